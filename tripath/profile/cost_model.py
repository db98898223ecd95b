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
from dataclasses import dataclass, field
from typing import Any

from tripath.core.errors import InputError
from tripath.profile.fields import (
    VALUE_SOURCES,
    JsonObject,
    build,
    check_count,
    check_number,
    check_text,
    number_list,
)
from tripath.profile.formulas import FORMULAS


@dataclass(frozen=True)
class Coefficient:
    """One number with its unit and where it comes from (one of ``VALUE_SOURCES``)."""

    value: float
    unit: str
    source: str
    note: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", check_number("value", self.value))
        check_text("unit", self.unit)
        check_text("source", self.source, allowed=VALUE_SOURCES)
        check_text("note", self.note, nonempty=False)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "source": self.source, "note": self.note}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> Coefficient:
        obj = JsonObject(raw, source, path)
        kwargs = {"value": obj.number("value"), "unit": obj.string("unit"),
                  "source": obj.string("source"), "note": obj.string("note", "")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class FitQuality:
    """How well a fit matches its samples. Errors are fractions (0.05 = 5 %), not percents.

    train_mape / max_ape: mean / worst absolute percentage error on the samples the fit used;
    holdout_mape: the same on samples left out of the fit (leave-one-out for small tables),
    None when there were too few samples to hold any out.
    """

    n_samples: int
    train_mape: float
    max_ape: float
    holdout_mape: float | None
    method: str
    data: str

    def __post_init__(self) -> None:
        check_count("n_samples", self.n_samples, low=1)
        object.__setattr__(self, "train_mape", check_number("train_mape", self.train_mape))
        object.__setattr__(self, "max_ape", check_number("max_ape", self.max_ape))
        if self.holdout_mape is not None:
            object.__setattr__(self, "holdout_mape", check_number("holdout_mape", self.holdout_mape))
        check_text("method", self.method)
        check_text("data", self.data)

    def to_dict(self) -> dict[str, Any]:
        return {"n_samples": self.n_samples, "train_mape": self.train_mape, "max_ape": self.max_ape,
                "holdout_mape": self.holdout_mape, "method": self.method, "data": self.data}

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> FitQuality | None:
        if raw is None:
            return None
        obj = JsonObject(raw, source, path)
        kwargs = {"n_samples": obj.integer("n_samples"), "train_mape": obj.number("train_mape"),
                  "max_ape": obj.number("max_ape"), "holdout_mape": obj.number("holdout_mape", None),
                  "method": obj.string("method"), "data": obj.string("data")}
        obj.finish()
        return build(cls, source, path, **kwargs)


@dataclass(frozen=True)
class CostModel:
    """A named formula with named coefficients, its inputs, the measured domain and fit quality."""

    formula: str
    coefficients: dict[str, Coefficient]
    inputs: tuple[str, ...]
    domain: dict[str, tuple[float, float]]
    fit: FitQuality | None = None
    note: str = ""
    # Resolved once so evaluation in the simulator's hot path is one plain function call.
    _fn: Callable[..., float] = field(init=False, repr=False, compare=False)
    _values: dict[str, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
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
            if name in spec.positive:
                check_number(f"coefficients.{name}.value", coef.value, positive=True)
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
        check_text("note", self.note, nonempty=False)
        object.__setattr__(self, "_fn", spec.fn)
        values = {name: self.coefficients[name].value for name in spec.coefficients}
        object.__setattr__(self, "_values", values)

    def __hash__(self) -> int:
        # Fields hold dicts (unhashable); equal models have equal formulas and values, so this agrees with ==.
        return hash((self.formula, tuple(self._values.values())))

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "formula": self.formula,
            "inputs": list(self.inputs),
            "coefficients": {name: coef.to_dict() for name, coef in self.coefficients.items()},
            "domain": {name: [lo, hi] for name, (lo, hi) in self.domain.items()},
            "fit": None if self.fit is None else self.fit.to_dict(),
            "note": self.note,
        }

    @classmethod
    def parse(cls, raw: object, source: str | None, path: str) -> CostModel:
        obj = JsonObject(raw, source, path)
        formula = obj.string("formula")
        inputs = obj.array("inputs")
        for i, name in enumerate(inputs):
            if not isinstance(name, str):
                raise obj.error(f"inputs[{i}]", "must be a string")
        coefficients = {name: Coefficient.parse(value, source, obj.where(f"coefficients.{name}"))
                        for name, value in obj.mapping("coefficients").items()}
        domain = {name: tuple(number_list(pair, source, obj.where(f"domain.{name}")))
                  for name, pair in obj.mapping("domain").items()}
        fit = FitQuality.parse(obj.get("fit", None), source, obj.where("fit"))
        note = obj.string("note", "")
        obj.finish()
        return build(cls, source, path, formula=formula, coefficients=coefficients, inputs=tuple(inputs),
                     domain=domain, fit=fit, note=note)
