"""How numbers appear on the app's pages: latencies in ms, "—" with a reason, intervals that hold their point,
and verdicts that never call a rejecting candidate a success.

One place for what a reader sees, so every page says the same thing the same way:

- **Latencies in ms**, always (``ms``): "1,234 ms", "86.4 ms"; never seconds on one page and ms on another.
- **Nothing raw**: a value that does not exist is shown as ``DASH`` ("—") with the reason beside it (``why`` /
  a note column), never as None, NaN or an empty cell (st.dataframe draws a missing cell as the word "None").
  ``frame`` builds a table with that rule applied.
- **An interval holds its point** (``shown_interval``, ``estimate_text``): tripath/core/metrics.py's
  ``percentile_estimate`` gives as its point the mean over replications of each replication's percentile, and
  as its interval the order-statistic interval over every replication's requests pooled. With few replications
  the mean can fall outside that interval (a P99.9 over 3 x 1,000 requests, say). The page then shows the point
  and says the interval is not shown and why, instead of a point outside its own interval.
- **Rejections are never a success** (``success``, ``verdict``, ``colour_margin``): tripath/planning/sweep.py's
  ``meets_sla`` already requires at most MAX_REJECTED (1 %) rejected; a margin is the P99's distance to the target
  over the requests that completed, so a candidate that rejected 60 % of its requests can show +55 %. It is
  shown as a miss ("rejects 60 %"), coloured as a miss, whatever its margin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from tripath.core.metrics import INTERVAL_METHOD
from tripath.planning.sweep import MAX_REJECTED

DASH = "—"
NO_REQUEST = "no request completed"
TERM_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end", "queueing": "queueing delay"}


def missing(value: object) -> bool:
    """None, NaN (float or numpy) or pandas' NA: a value that is not there."""
    if value is None or value is pd.NA:
        return True
    try:
        return isinstance(value, float | int) and not isinstance(value, bool) and math.isnan(value)
    except TypeError:
        return False


def ms(value: float | None, signed: bool = False) -> str:
    """A latency in milliseconds: "1,234 ms" from 100 ms up, "86.4 ms" below; DASH when there is none."""
    if missing(value):
        return DASH
    assert value is not None
    sign = "+" if signed else ""
    return f"{value:{sign},.0f} ms" if abs(value) >= 100 else f"{value:{sign},.1f} ms"


def pct(share: float | None, signed: bool = False, digits: int = 0) -> str:
    """A share (0.25) as a percentage ("25 %"); DASH when there is none."""
    if missing(share):
        return DASH
    assert share is not None
    sign = "+" if signed else ""
    return f"{100.0 * share:{sign}.{digits}f} %"


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def shown_interval(est: Mapping[str, Any]) -> tuple[float | None, float | None, str | None]:
    """The ends of ``est``'s 95 % interval a page may show, and why an end is not shown (None when both are).

    ``est`` is a percentile estimate ({"mean", "ci_low", "ci_high"}, ms). Both ends are withheld when the point
    lies outside them (see the module doc); an end the estimator could not give (too few requests beyond that
    percentile) is withheld alone.
    """
    mean, low, high = est.get("mean"), est.get("ci_low"), est.get("ci_high")
    if missing(mean):
        return None, None, NO_REQUEST
    low = None if missing(low) else low
    high = None if missing(high) else high
    if (low is not None and mean < low) or (high is not None and mean > high):
        ends = f"[{DASH if low is None else _number(low)}, {DASH if high is None else _number(high)}]"
        return None, None, (f"interval not shown: the point (mean over replications, {_number(mean)} ms) lies "
                            f"outside the {INTERVAL_METHOD} interval of the pooled requests {ends} ms; more "
                            "replications or requests close the gap")
    if low is None and high is None:
        return None, None, "too few requests for either end of the interval"
    if low is None:
        return None, high, "too few requests below this percentile for a lower end"
    if high is None:
        return low, None, "too few requests above this percentile for an upper end"
    return low, high, None


def interval_text(est: Mapping[str, Any]) -> str:
    """The interval as text: "[95% 1,100, 1,500 ms]"; an end not shown is "n/a"; "n/a" alone when neither is."""
    low, high, _ = shown_interval(est)
    if low is None and high is None:
        return "n/a"
    ends = ["n/a" if v is None else _number(v) for v in (low, high)]
    return f"[95% {ends[0]}, {ends[1]} ms]"


def estimate_text(est: Mapping[str, Any] | None, label: str = "P99") -> str:
    """"P99 1,234 ms [95% 1,100, 1,500 ms]"; with the reason when the interval (or the point) is not shown."""
    est = est or {}
    if missing(est.get("mean")):
        return f"{label} {DASH} ({NO_REQUEST})"
    low, high, why = shown_interval(est)
    text = f"{label} {ms(est['mean'])}"
    if low is None and high is None:
        return f"{text} [95% n/a: {why}]"
    return f"{text} {interval_text(est)}"


def plotted(ests: Sequence[Mapping[str, Any] | None]) -> tuple[list[float], list[float], list[float]]:
    """Points and band ends for a figure, one per estimate: NaN where a point is missing or an end is not shown
    (``shown_interval``), so no band is drawn that does not hold its point."""
    points, lows, highs = [], [], []
    for est in ests:
        est = est or {}
        low, high, _ = shown_interval(est)
        points.append(math.nan if missing(est.get("mean")) else float(est["mean"]))
        lows.append(math.nan if low is None else float(low))
        highs.append(math.nan if high is None else float(high))
    return points, lows, highs


def why(est: Mapping[str, Any] | None) -> str:
    """Why an estimate's point or interval is not (fully) shown; "" when all of it is."""
    return shown_interval(est or {})[2] or ""


# ---- verdicts: a rejecting candidate is never a success


def rejected_share(row: Mapping[str, Any]) -> float:
    """The share of arrived requests rejected (0 when the row does not say)."""
    share = row.get("rejected_share")
    return 0.0 if missing(share) else float(share)


def success(row: Mapping[str, Any]) -> bool:
    """Whether a simulated candidate meets the SLA: sweep's ``meets_sla`` and at most MAX_REJECTED rejected.

    The rejection test is repeated here on purpose: a page must never call a rejecting row a success, whatever
    a result's ``meets_sla`` says (an older cached result, a row built elsewhere)."""
    return row.get("meets_sla") is True and rejected_share(row) <= MAX_REJECTED


def verdict(row: Mapping[str, Any]) -> str:
    """A row's verdict in words: "meets", "misses: rejects 60 %", "misses: TTFT over target", or DASH + why."""
    if row.get("not_applicable"):
        return f"{DASH} not applicable"
    if row.get("error"):
        return f"{DASH} refused by the simulator"
    share = rejected_share(row)
    if share > MAX_REJECTED:
        return f"misses: rejects {pct(share)}"
    if success(row):
        return "meets"
    if row.get("meets_sla") is None and missing(row.get("sla_margin")):
        return f"{DASH} {NO_REQUEST}"
    return "misses: a P99 over its target"


def colour_margin(row: Mapping[str, Any]) -> float | None:
    """The value a heatmap colours a candidate by: its SLA margin clipped to [-1, 1], but -1 (the colour of a
    miss) for a row rejecting more than MAX_REJECTED, and never above -0.05 for a row that misses; None (grey)
    where nothing ran."""
    if row.get("not_applicable") or row.get("error"):
        return None
    if rejected_share(row) > MAX_REJECTED:
        return -1.0
    margin = row.get("sla_margin")
    if missing(margin):
        return None
    value = max(-1.0, min(1.0, float(margin)))
    return value if success(row) else min(value, -0.05)


def margin_text(row: Mapping[str, Any]) -> str:
    """A row's SLA margin as text: "+55 %" (headroom), "over by 30 %" (a P99 over its target: no bare negative
    number), or what stands in for it: "rejects 60 %", "n/a", DASH + why."""
    if row.get("not_applicable"):
        return "n/a"
    if rejected_share(row) > MAX_REJECTED:
        return f"rejects {pct(rejected_share(row))}"
    margin = row.get("sla_margin")
    if missing(margin):
        return f"{DASH} {NO_REQUEST}"
    return pct(margin, signed=True) if margin >= 0 else f"over by {pct(-margin)}"


# ---- tables


def cell(value: Any, fmt: str | None = None) -> Any:
    """One table value: DASH for a missing one, ``fmt`` (a format spec, e.g. ",.1f") applied to a number."""
    if missing(value) or value == "":
        return DASH
    if fmt is not None and isinstance(value, int | float) and not isinstance(value, bool):
        return format(value, fmt)
    return value


def frame(rows: Sequence[Mapping[str, Any]], formats: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Rows as a table with no missing value: a column named in ``formats`` becomes text, its numbers in that
    format spec (",.1f"), so a column reads the same whether or not a value is missing; any other column holding a
    missing or empty value becomes text too (numbers as ",.4g"); DASH stands where the value is missing or empty.
    The other columns keep their type. Booleans read "yes" / "no", so a column never mixes True with text.
    """
    table = pd.DataFrame(list(rows))
    formats = formats or {}
    for column in table.columns:
        values = list(table[column])
        if any(isinstance(v, bool) for v in values):
            values = ["yes" if v is True else "no" if v is False else v for v in values]
            table[column] = pd.Series(values, index=table.index, dtype=object)
        if column in formats or any(missing(v) or v == "" for v in values):
            fmt = formats.get(column, ",.4g")
            table[column] = pd.Series([cell(v, fmt) for v in values], index=table.index, dtype=object).astype(str)
    return table


def has_missing(table: pd.DataFrame) -> list[str]:
    """The columns of a shown table that hold a missing value or an empty string (what a test asserts is [])."""
    return [str(c) for c in table.columns if any(missing(v) or v == "" for v in table[c])]
