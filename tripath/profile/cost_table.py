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
from tripath.profile.fields import MAX_STEP_MS, VALUE_SOURCES, check_number, number, text


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
    # each row's segment slopes (ms per column unit), and the columns as an array for numpy queries
    _slopes: tuple[tuple[float, ...], ...] = field(init=False, repr=False, compare=False)
    _cols: np.ndarray = field(init=False, repr=False, compare=False)
    _inner: np.ndarray = field(init=False, repr=False, compare=False)  # the columns but the first and last
    # row value -> the grid's line at that row (values, slopes; floats and arrays): a run asks few distinct rows
    _lines: dict[float, tuple[tuple[float, ...], tuple[float, ...], np.ndarray, np.ndarray]] = field(
        init=False, repr=False, compare=False)

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
                check_number(f"ms[{i}][{j}]", value, positive=True, high=MAX_STEP_MS)
        object.__setattr__(self, "ms", grid)
        cols = self.columns
        slopes = tuple(tuple((row[j + 1] - row[j]) / (cols[j + 1] - cols[j]) for j in range(len(cols) - 1))
                       for row in grid)
        object.__setattr__(self, "_slopes", slopes)
        object.__setattr__(self, "_cols", np.array(cols, dtype=float))
        object.__setattr__(self, "_inner", self._cols[1:-1])
        object.__setattr__(self, "_lines", {})

    def __hash__(self) -> int:
        return hash((self.rows, self.columns, self.ms))

    def scaled(self, factor: float) -> CostTable:
        """The same grid with every cell times ``factor`` (> 0)."""
        return CostTable(self.rows, self.columns, tuple(tuple(v * factor for v in row) for row in self.ms),
                         self.source, self.measured_share, self.note)

    def line(self, row: float) -> tuple[tuple[float, ...], tuple[float, ...], np.ndarray, np.ndarray]:
        """The grid read at one row value: the values at every column and the slopes between them, blended
        linearly between the two rows that bracket it (beyond the ends, the end rows' line continues); kept per
        row value, since a run asks a few hundred distinct batches or chunk sizes millions of times."""
        found = self._lines.get(row)
        if found is not None:
            return found
        rows, grid, slopes = self.rows, self.ms, self._slopes
        i = min(max(bisect.bisect_right(rows, row) - 1, 0), len(rows) - 2)
        w = (row - rows[i]) / (rows[i + 1] - rows[i])
        values = tuple(a + w * (b - a) for a, b in zip(grid[i], grid[i + 1], strict=True))
        steep = tuple(a + w * (b - a) for a, b in zip(slopes[i], slopes[i + 1], strict=True))
        found = (values, steep, np.array(values), np.array(steep))
        if len(self._lines) < 65536:  # bounded: a pathological caller cannot grow it without end
            self._lines[row] = found
        return found

    def at(self, row: float, column: Any) -> Any:
        """The interpolated cost at one row value and a column value or numpy array of them (ms).

        The row's line (``line``: the two bracketing rows blended), then along the columns y_j + (c - c_j) *
        slope_j on the segment j holding c (the first or last segment beyond the ends, so its line continues).
        A scalar column is priced in plain floats and an array elementwise in numpy with the same operations, so
        an element of an array result equals the scalar result bit for bit (the simulator's fast path relies on
        it: tripath/simulator/costs.py decode_one_s).
        """
        if isinstance(row, np.ndarray) and row.ndim > 0:  # an array of rows: one at a time (calibration plots)
            cols = np.broadcast_to(np.asarray(column, dtype=float), row.shape)
            return np.array([self.at(float(r), c) for r, c in zip(row.ravel(), cols.ravel(), strict=True)]
                            ).reshape(row.shape)
        values, slopes, value_array, slope_array = self.line(float(row))
        if isinstance(column, np.ndarray):
            # the segment holding c, the first or last beyond the ends: how many inner columns are <= c
            j = np.searchsorted(self._inner, column, side="right")
            return value_array[j] + (column - self._cols[j]) * slope_array[j]
        cols = self.columns
        j = min(max(bisect.bisect_right(cols, column) - 1, 0), len(cols) - 2)
        return values[j] + (column - cols[j]) * slopes[j]


def prefill_table_v1(*, new_tokens: Any, context_tokens: Any, table: CostTable) -> Any:
    """One prefill chunk of T new tokens after C cached, alone in an iteration: the table at (T, C)."""
    return table.at(new_tokens, context_tokens)


def decode_table_v1(*, batch: Any, total_context: Any, table: CostTable) -> Any:
    """One decode iteration of B sequences holding S tokens in all: the table at (B, S / B).

    The grid was timed with every sequence at the same context L; a batch of mixed contexts is priced at
    their mean. Decode attention reads every cached key once, so its time follows the sum S to first order
    (kernels that split work per sequence differ from that by the imbalance, which the grid does not see).
    """
    per_sequence = total_context / (batch if isinstance(batch, np.ndarray) else max(batch, 1))
    return table.at(batch, per_sequence)

