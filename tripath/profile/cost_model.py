"""A cost model: a registered formula, its named coefficients with units and origins, and its domain.

The JSON form of one cost model (times in ms; ``fit`` is null for numbers not fitted to samples):

    {"formula": "decode_v1", "inputs": ["batch", "total_context"],
     "coefficients": {"d0": {"value": 2.1, "unit": "ms", "source": "fitted", "note": "..."}, ...},
     "domain": {"batch": [1, 1], "total_context": [4096, 32768]},
     "fit": {"n_samples": 4, "train_mape": 0.03, "max_ape": 0.07, "holdout_mape": 0.06,
             "method": "...", "data": "..."},
     "note": "..."}

The domain is the range of each input the coefficients were measured or fitted over; the
simulator counts and reports queries outside it instead of trusting them silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from tripath.core.errors import InputError
from tripath.profile.codec import Section, json_field, note_field
from tripath.profile.cost_table import CostTable
from tripath.profile.fields import MAX_STEP_MS, MIN_LINK_GBPS, VALUE_SOURCES, Hook, check_number, count, number, text
from tripath.profile.formulas import FORMULAS


@dataclass(frozen=True)
class Coefficient(Section):
    """One number with its unit and where it comes from (one of ``VALUE_SOURCES``)."""

    value: float = json_field(number())
    unit: str = json_field(text())
    source: str = json_field(text(allowed=VALUE_SOURCES))
    note: str = note_field()


def coefficient(*, low: float = 0.0, positive: bool = False, high: float | None = None,
                unit: str | None = None) -> Hook:
    """Hook: a Coefficient whose value is >= low (> low when ``positive``, <= ``high`` when given; the physical
    ranges are in tripath/profile/fields.py), in ``unit`` when given."""

    def run(field: str, value: object) -> Coefficient:
        if not isinstance(value, Coefficient):
            raise InputError(None, field, "must be a Coefficient")
        check_number(f"{field}.value", value.value, low=low, positive=positive, high=high)
        if unit is not None and value.unit != unit:
            raise InputError(None, f"{field}.unit", f"must be {unit!r}, got {value.unit!r}")
        return value

    return run


@dataclass(frozen=True)
class FitQuality(Section):
    """How well a fit matches its samples. Errors are fractions (0.05 = 5 %), not percents.

    train_mape / max_ape: mean / worst absolute percentage error on the samples the fit used;
    holdout_mape: the same on samples left out of the fit (leave-one-out for small tables),
    None when there were too few samples to hold any out.
    """

    n_samples: int = json_field(count(1))
    train_mape: float = json_field(number())
    max_ape: float = json_field(number())
    holdout_mape: float | None = json_field(number())
    method: str = json_field(text())
    data: str = json_field(text())


@dataclass(frozen=True)
class CostModel(Section):
    """A named formula with named coefficients, its inputs, the measured domain and fit quality."""

    JSON_ORDER = ("formula", "inputs", "coefficients", "domain", "table", "fit", "note")

    formula: str
    coefficients: dict[str, Coefficient]
    inputs: tuple[str, ...]
    domain: dict[str, tuple[float, float]] = json_field(shape="a pair [lo, hi]")
    fit: FitQuality | None = None
    note: str = note_field()
    # a table formula's grid (tripath/profile/cost_table.py); None for coefficient formulas
    table: CostTable | None = json_field(default=None, omit=True)
    # Resolved once so evaluation in the simulator's hot path is one plain function call.
    _fn: Callable[..., float] = field(init=False, repr=False, compare=False)
    _values: dict[str, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        spec = FORMULAS.get(self.formula) if isinstance(self.formula, str) else None
        if spec is None:
            raise InputError(None, "formula",
                             f"unknown formula {self.formula!r}; known: {', '.join(FORMULAS)}")
        for name in spec.coefficients:
            if name not in self.coefficients:
                raise InputError(None, f"coefficients.{name}", f"missing; formula {spec.name} needs "
                                 f"{', '.join(spec.coefficients)}")
        for name, coef in self.coefficients.items():
            if name not in spec.coefficients:
                raise InputError(None, f"coefficients.{name}", f"not a coefficient of formula {spec.name} "
                                 f"(it has {', '.join(spec.coefficients)})")
            if not isinstance(coef, Coefficient):
                raise InputError(None, f"coefficients.{name}", "must be a Coefficient")
            # one that divides is a bandwidth in GB/s (paging_v1's); every other is ms, or ms per unit of an input
            low, high = (MIN_LINK_GBPS, None) if name in spec.positive else (0.0, MAX_STEP_MS)
            check_number(f"coefficients.{name}.value", coef.value, low=low, high=high)
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if self.inputs != spec.inputs:
            raise InputError(None, "inputs",
                             f"formula {spec.name} takes {list(spec.inputs)}, got {list(self.inputs)}")
        domain: dict[str, tuple[float, float]] = {}
        for name in spec.inputs:
            if name not in self.domain:
                raise InputError(None, f"domain.{name}", "missing; every input needs its measured [lo, hi]")
            lo, hi = self._bounds(name, self.domain[name])
            domain[name] = (lo, hi)
        for name in self.domain:
            if name not in spec.inputs:
                raise InputError(None, f"domain.{name}", f"not an input of formula {spec.name}")
        object.__setattr__(self, "domain", domain)
        if self.fit is not None and not isinstance(self.fit, FitQuality):
            raise InputError(None, "fit", "must be a FitQuality or None")
        if spec.table != (self.table is not None):
            raise InputError(None, "table", f"formula {spec.name} {'needs' if spec.table else 'takes no'} table")
        object.__setattr__(self, "_fn", partial(spec.fn, table=self.table) if spec.table else spec.fn)
        values = {name: self.coefficients[name].value for name in spec.coefficients}
        object.__setattr__(self, "_values", values)

    def __hash__(self) -> int:
        # Fields hold dicts (unhashable); equal models have equal formulas and values, so this agrees with ==.
        return hash((self.formula, tuple(self._values.values()), self.table))

    @staticmethod
    def _bounds(name: str, pair: object) -> tuple[float, float]:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InputError(None, f"domain.{name}", f"must be a pair [lo, hi], got {pair!r}")
        lo = check_number(f"domain.{name}[0]", pair[0])
        hi = check_number(f"domain.{name}[1]", pair[1])
        if lo > hi:
            raise InputError(None, f"domain.{name}", f"lo must be <= hi, got [{lo:g}, {hi:g}]")
        return lo, hi

    def evaluate(self, **inputs: float) -> float:
        """The formula's value in ms at these inputs (keyword names as in ``inputs``)."""
        return self._fn(**inputs, **self._values)

    def in_domain(self, **inputs: float) -> bool:
        """Whether every input lies inside the range the coefficients were measured over."""
        return all(self.domain[name][0] <= inputs[name] <= self.domain[name][1] for name in self.inputs)

    def values(self) -> dict[str, float]:
        """Plain coefficient values by name, so a hot loop can bind them once."""
        return dict(self._values)

    def function(self) -> Callable[..., float]:
        """The formula with its coefficients (or its table) bound: call it with the inputs by keyword."""
        return partial(self._fn, **self._values)

    def scaled(self, factor: float) -> CostModel:
        """This model with every cost times ``factor`` (> 0): each coefficient, or each cell of its table.

        Every formula is linear in its coefficients except paging's bandwidth, which divides (never scaled here).
        """
        if self.table is not None:
            return replace(self, table=self.table.scaled(factor))
        coefficients = {name: replace(c, value=c.value * factor) for name, c in self.coefficients.items()}
        return replace(self, coefficients=coefficients)


def cost_model_of(name: str, example: str = "") -> Hook:
    """Hook: a CostModel whose only input is ``name`` (``example``: a formula that fits, for the message)."""

    def run(field: str, value: object) -> CostModel:
        if not isinstance(value, CostModel) or value.inputs != (name,):
            raise InputError(None, field, f"must be a cost model whose only input is {name}{example}")
        return value

    return run
