"""A profile as tables: tripath.profile.inspect.describe / compare (what `tripath profile show|compare --json`
print) flattened into rows the calibration page shows. Every row keeps its coefficient's source."""

from __future__ import annotations

from typing import Any

GIB = 2**30


def _named(entry: dict[str, Any]) -> tuple[float, str, str, str]:
    return entry["value"], entry["unit"], entry["source"], entry["note"]


def hardware_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    hw, model, memory = d["hardware"], d["model"], d["memory"]
    rows = [{"item": "device", "value": hw["device_name"], "unit": "", "source": d["source"], "note": hw["note"]},
            {"item": "device memory", "value": f"{hw['device_memory_bytes'] / GIB:.1f}", "unit": "GiB",
             "source": d["source"], "note": ""},
            {"item": "host memory", "value": f"{hw['host_memory_bytes'] / GIB:.1f}", "unit": "GiB",
             "source": d["source"], "note": ""},
            {"item": "SSD", "value": f"{hw['ssd_bytes'] / 1e12:.2f}", "unit": "TB", "source": d["source"], "note": ""},
            {"item": "KV budget per replica", "value": f"{memory['kv_capacity_bytes'] / GIB:.3f}", "unit": "GiB",
             "source": memory["source"], "note": memory["note"]},
            {"item": "model", "value": f"{model['name']}: {model['layers']} layers, {model['kv_heads']} KV heads "
                                       f"x {model['head_dim']}", "unit": "", "source": d["source"],
             "note": model["note"]},
            {"item": "KV bytes per token", "value": f"{model['kv_bytes_per_token']:,}", "unit": "B",
             "source": "derived", "note": "2 x layers x kv_heads x head_dim x dtype bytes"}]
    for name, link in hw["links"].items():
        value, unit, source, note = _named(link)
        rows.append({"item": f"link {name}", "value": f"{value:g}", "unit": unit, "source": source, "note": note})
    return rows


def coefficient_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per coefficient of every cost model, with its formula, unit, source and measured domain."""
    rows = []
    for cost, model in d["costs"].items():
        domain = ", ".join(f"{k} in [{lo:g}, {hi:g}]" for k, (lo, hi) in model["domain"].items())
        for name, coef in model["coefficients"].items():
            value, unit, source, note = _named(coef)
            rows.append({"cost": cost, "formula": model["formula"], "coefficient": name, "value": value, "unit": unit,
                         "source": source, "measured domain": domain, "note": note})
    return rows


AXES = {"prefill_table_v1": ("new tokens in the chunk", "tokens cached before it"),
        "decode_table_v1": ("batch (sequences)", "context per sequence (tokens)")}  # tripath/profile/cost_table.py


def table_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per cost model stored as a measured grid (tripath/profile/cost_table.py): its axes and their
    ranges, the grid's size, the range of its milliseconds, the share of time from measured kernel rows, source."""
    rows = []
    for cost, model in d["costs"].items():
        table = model.get("table")
        if table is None:
            continue
        row_axis, column_axis = AXES.get(model["formula"], ("rows", "columns"))
        values = [v for line in table["ms"] for v in line]
        share = table.get("measured_share")
        rows.append({"cost": cost, "formula": model["formula"],
                     "rows": f"{row_axis}: {table['rows'][0]:g} to {table['rows'][-1]:g} ({len(table['rows'])})",
                     "columns": f"{column_axis}: {table['columns'][0]:g} to {table['columns'][-1]:g} "
                                f"({len(table['columns'])})",
                     "ms per iteration": f"{min(values):,.2f} to {max(values):,.2f}",
                     "from measured kernel rows": "not stated" if share is None else f"{share:.1%}",
                     "source": table["source"], "note": table["note"]})
    return rows


def table_grid(d: dict[str, Any], cost: str) -> tuple[list[str], list[dict[str, Any]]]:
    """(column labels, rows) of one measured grid: ms per iteration at each (row, column) point, as stored."""
    model = d["costs"][cost]
    table = model["table"]
    row_axis, column_axis = AXES.get(model["formula"], ("rows", "columns"))
    labels = [f"{c:g}" for c in table["columns"]]
    rows = [{row_axis: f"{r:g}", **dict(zip(labels, line, strict=True))}
            for r, line in zip(table["rows"], table["ms"], strict=True)]
    return [row_axis, *labels], rows


def fit_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for cost, model in d["costs"].items():
        fit = model["fit"]
        if fit is None:
            method = ("no fit: read from a measured table (Coefficients tab)" if model.get("table") is not None
                      else "not fitted to samples here")
            rows.append({"cost": cost, "n samples": None, "train MAPE": None, "worst APE": None, "holdout MAPE": None,
                         "method": method, "data": ""})
            continue
        rows.append({"cost": cost, "n samples": fit["n_samples"], "train MAPE": fit["train_mape"],
                     "worst APE": fit["max_ape"], "holdout MAPE": fit["holdout_mape"], "method": fit["method"],
                     "data": fit["data"]})
    return rows


def path_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    """The optional path sections: speculative, acceptance per task, paging, sequence parallel, compression."""
    rows: list[dict[str, Any]] = []
    spec = d.get("speculative")
    if spec:
        for key in ("cost_ratio", "verify_cost_ratio"):
            value, unit, source, note = _named(spec[key])
            rows.append({"section": "speculative", "item": f"{key} (K={spec['k']}, draft {spec['draft_model']})",
                         "value": value, "unit": unit, "source": source, "note": note})
    for task, acc in d.get("acceptance", {}).items():
        rows.append({"section": "acceptance", "item": f"{task} at K={acc['k']}", "value": acc["mean"],
                     "unit": "acceptance", "source": acc["source"], "note": acc.get("note", "")})
    for link, page in d.get("paging", {}).items():
        bw = page["cost"]["coefficients"]["bandwidth_gbps"]
        rows.append({"section": "paging", "item": f"{link} bandwidth", "value": bw["value"], "unit": bw["unit"],
                     "source": bw["source"], "note": f"{page['ms_per_2k_tokens']:.4g} ms per 2K tokens of KV"})
    for degree, sp in d.get("sequence_parallel", {}).items():
        for row in sp["rows"]:
            rows.append({"section": f"sequence_parallel P={degree}", "item": f"{row['context_tokens']} tokens",
                         "value": row["speedup"], "unit": "x speedup", "source": sp["source"],
                         "note": f"merge {row['merge_ms']:.4g} ms"})
    for mode, comp in d.get("compression", {}).items():
        for key in ("kv_bytes_ratio", "decode_overhead_ratio", "quality_loss", "acceptance_drop"):
            value, unit, source, note = _named(comp[key])
            rows.append({"section": f"compression {mode}", "item": key, "value": value, "unit": unit,
                         "source": source, "note": note})
    return rows


def compare_rows(c: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(coefficient rows with the B / A ratio, example-cost rows at tripath.profile.inspect's probe points)."""
    coefficients, examples = [], []
    for cost, entry in c["costs"].items():
        for name, pair in entry["coefficients"].items():
            a, b = pair["a"], pair["b"]
            coefficients.append({"cost": cost, "coefficient": name, "A": a["value"] if a else None,
                                 "A source": a["source"] if a else "", "B": b["value"] if b else None,
                                 "B source": b["source"] if b else "", "B / A": pair["ratio"],
                                 "unit": (a or b or {}).get("unit", "")})
        for ex in entry["examples"]:
            where = ", ".join(f"{k}={v}" for k, v in ex["inputs"].items())
            examples.append({"cost": cost, "at": where, "A ms": ex["a_ms"], "B ms": ex["b_ms"], "B / A": ex["ratio"],
                             "inside both measured domains": all(ex["in_domain"])})
    return coefficients, examples
