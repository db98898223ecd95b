"""A cost model stored as a measured grid: iteration milliseconds at (row, column) points, read by interpolation.

Profiles built from a kernel-timing database (tripath/calibrate/aic/) price an iteration by what the database
answers at each point of a grid, not by a fitted line: GEMM time steps with the tile shapes, attention kernels
change regime with the context, and a straight line through them is off by 10-30 % somewhere. The table keeps
the answers; between grid points the cost is read piecewise linearly, first along the columns (np.interp,
elementwise, so a numpy array of column values costs one call and gives the same floats as one value at a
time), then between the two rows that bracket the row value. Beyond either end of an axis the last segment's
line continues (a step cost keeps growing past the grid; a clamp would under-price), and the profile's domain
is the grid's range, so such queries are counted as extrapolated (tripath/simulator/costs.py).

Two table formulas use it (tripath/profile/formulas.py):

- ``prefill_table_v1``: rows are new_tokens T of one chunk, columns the context_tokens C cached before it;
  the cell is the iteration that prefills that chunk alone.
- ``decode_table_v1``: rows are the batch B, columns the context per sequence L; the cell is one decode
  iteration of B sequences of L cached tokens each. A query (B, S) with S tokens in all reads L = S / B.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tripath.core.errors import InputError
from tripath.profile.codec import Section, json_field, note_field
from tripath.profile.fields import VALUE_SOURCES, check_number, number, text


def _axis(field_name: str, values: object) -> tuple[float, ...]:
    """At least two finite values >= 0, strictly increasing."""
    items = tuple(values)  # type: ignore[arg-type]
    if len(items) < 2:
        raise InputError(None, field_name, f"must hold at least 2 values, got {len(items)}")
    out = tuple(check_number(f"{field_name}[{i}]", v) for i, v in enumerate(items))
    for i in range(1, len(out)):
        if out[i] <= out[i - 1]:
            raise InputError(None, f"{field_name}[{i}]", f"must increase, got {out[i]:g} after {out[i - 1]:g}")
    return out


def _extended(x: Any, xs: np.ndarray, ys: np.ndarray) -> Any:
    """Piecewise-linear ys(x) through (xs, ys), continued beyond both ends by the end segments' lines."""
    y = np.interp(x, xs, ys)
    lo, hi = xs[0], xs[-1]
    slope_lo = (ys[1] - ys[0]) / (xs[1] - xs[0])
    slope_hi = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return y + np.minimum(x - lo, 0.0) * slope_lo + np.maximum(x - hi, 0.0) * slope_hi


@dataclass(frozen=True)
class CostTable(Section):
    """Milliseconds of one iteration on a (rows x columns) grid; what each axis means is the formula's.

    ms[i][j] is the cost at rows[i], columns[j]. ``source`` labels every cell (VALUE_SOURCES);
    ``measured_share`` is the fraction of the grid's summed time that its source read from measured kernel rows
    (the rest it computed by its own rules), so how much is measured is stated, not implied.
    """

    rows: tuple[float, ...] = json_field(_axis)
    columns: tuple[float, ...] = json_field(_axis)
    ms: tuple[tuple[float, ...], ...]
    source: str = json_field(text(allowed=VALUE_SOURCES))
    measured_share: float | None = json_field(number(high=1.0), default=None)
    note: str = note_field()
    _rows: np.ndarray = field(init=False, repr=False, compare=False)
    _cols: np.ndarray = field(init=False, repr=False, compare=False)
    _ms: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        grid = tuple(tuple(row) for row in self.ms)
        if len(grid) != len(self.rows):
            raise InputError(None, "ms", f"must hold one row per rows value ({len(self.rows)}), got {len(grid)}")
        for i, row in enumerate(grid):
            if len(row) != len(self.columns):
                raise InputError(None, f"ms[{i}]", f"must hold one value per column ({len(self.columns)}), "
                                 f"got {len(row)}")
            for j, value in enumerate(row):
                check_number(f"ms[{i}][{j}]", value, positive=True)
        object.__setattr__(self, "ms", grid)
        object.__setattr__(self, "_rows", np.array(self.rows, dtype=float))
        object.__setattr__(self, "_cols", np.array(self.columns, dtype=float))
        object.__setattr__(self, "_ms", np.array(grid, dtype=float))

    def __hash__(self) -> int:
        return hash((self.rows, self.columns, self.ms))

    def scaled(self, factor: float) -> CostTable:
        """The same grid with every cell times ``factor`` (> 0)."""
        return CostTable(self.rows, self.columns, tuple(tuple(v * factor for v in row) for row in self.ms),
                         self.source, self.measured_share, self.note)

    def at(self, row: float, column: Any) -> Any:
        """The interpolated cost at one row value and a column value or numpy array of them (ms)."""
        if np.ndim(row) > 0:  # an array of rows: one at a time (only calibration plots ask this)
            rows = np.asarray(row, dtype=float)
            cols = np.broadcast_to(np.asarray(column, dtype=float), rows.shape)
            return np.array([self.at(float(r), c) for r, c in zip(rows.ravel(), cols.ravel(), strict=True)]
                            ).reshape(rows.shape)
        xs = self._rows
        i = min(max(bisect.bisect_right(self.rows, row) - 1, 0), len(self.rows) - 2)
        w = (row - xs[i]) / (xs[i + 1] - xs[i])  # outside [rows[0], rows[-1]]: the end segment's line
        below = _extended(column, self._cols, self._ms[i])
        above = _extended(column, self._cols, self._ms[i + 1])
        return below + w * (above - below)


def prefill_table_v1(*, new_tokens: Any, context_tokens: Any, table: CostTable) -> Any:
    """One prefill chunk of T new tokens after C cached, alone in an iteration: the table at (T, C)."""
    return table.at(new_tokens, context_tokens)


def decode_table_v1(*, batch: Any, total_context: Any, table: CostTable) -> Any:
    """One decode iteration of B sequences holding S tokens in all: the table at (B, S / B).

    The grid was timed with every sequence at the same context L; a batch of mixed contexts is priced at
    their mean. Decode attention reads every cached key once, so its time follows the sum S to first order
    (kernels that split work per sequence differ from that by the imbalance, which the grid does not see).
    """
    per_sequence = total_context / (batch if np.ndim(batch) > 0 else max(batch, 1))
    return table.at(batch, per_sequence)

