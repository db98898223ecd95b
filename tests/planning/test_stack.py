"""Stacking validation flags a planted negative coupling: compression that kills speculation's acceptance."""

from __future__ import annotations

import copy
import itertools

import pytest

from tests.helpers import SEED
from tripath.planning.stack import INTERACTIONS, order_classes, stack
from tripath.profile.profile import Profile


def coefficient(value: float, unit: str = "1") -> dict:
    return {"value": value, "unit": unit, "source": "derived", "note": "planted by tests/planning/test_stack.py"}


def profile_with_mode(drop: float, overhead: float) -> Profile:
    """The seed profile plus one compression mode, built in the test (the seed measured none)."""
    raw = copy.deepcopy(SEED.to_dict())
    mode = {"kv_bytes_ratio": coefficient(0.5), "decode_overhead_ratio": coefficient(overhead),
            "quality_loss": coefficient(0.0), "acceptance_drop": coefficient(drop),
            "note": "hand-made for the coupling test"}
    raw["compression"] = {"planted": mode}
    return Profile.from_dict(raw)


def scenario() -> dict:
    """Short dialogue requests that fit the seed's KV budget, at a light load: decode dominates TPOT."""
    return {"name": "coupling", "workload": {"requests": 60, "arrival": {"kind": "poisson", "rate_per_s": 0.05},
                                             "tasks": {"dialogue": 1.0},
                                             "prompt_tokens": {"kind": "fixed", "value": 1024},
                                             "output_tokens": {"kind": "fixed", "value": 128}},
            "cluster": {"gpus": 1}, "batching": {"max_batch_size": 4}, "sla": {"tpot_p99_ms": 100.0}}


def test_compression_that_drops_acceptance_below_breakeven_is_flagged():
    # dialogue acceptance 0.75 - 0.30 = 0.45, below the seed's K = 5 break-even of 0.588
    result = stack(scenario(), None, profile_with_mode(drop=0.30, overhead=0.0), replications=1)
    assert set(result.paths) == {"speculative", "tiered", "compression"}
    assert "sequence_parallel" in result.not_applicable  # one GPU
    flagged = [c for c in result.negative_couplings
               if (c["path"], c["after"], c["term"]) == ("speculative", "compression", "tpot")]
    assert len(flagged) == 1
    row = flagged[0]
    assert row["gain_alone_ms"] > 0 > row["gain_after_ms"]
    assert row["verdict"] == "speculative stops paying after compression"
    # 3 paths: 2^3 subsets simulated once each, 3! orders of 3 steps each
    assert len(result.subsets) == 8 and len(result.orders) == 6
    assert all(len(o["steps"]) == 3 for o in result.orders)


def test_a_harmless_mode_is_not_flagged():
    # no acceptance drop, no overhead, and no memory pressure: compression changes nothing here
    result = stack(scenario(), None, profile_with_mode(drop=0.0, overhead=0.0), replications=1)
    pairs = {(c["path"], c["after"]) for c in result.negative_couplings}
    assert ("speculative", "compression") not in pairs
    row = next(c for c in result.couplings
               if (c["path"], c["after"], c["term"]) == ("speculative", "compression", "tpot"))
    assert row["coupling_ms"] == pytest.approx(0.0, abs=row["noise_ms"])


def test_marginal_steps_add_up_along_every_order():
    result = stack(scenario(), None, profile_with_mode(drop=0.30, overhead=0.0), replications=1)
    base = result.subsets["baseline"]["p99_ms"]["tpot"]
    full = result.subsets["speculative+tiered+compression"]["p99_ms"]["tpot"]
    for order in result.orders:  # telescoping: the steps of any order sum to baseline - everything
        assert sum(s["tpot_gain_ms"] for s in order["steps"]) == pytest.approx(base - full)


def test_only_orders_of_interacting_pairs_are_shown_with_four_paths():
    data = scenario()
    data["cluster"] = {"gpus": 2}  # room for a 2-GPU sequence-parallel replica
    result = stack(data, None, profile_with_mode(drop=0.30, overhead=0.0), replications=1)
    assert set(result.paths) == {"speculative", "tiered", "sequence_parallel", "compression"}
    reduction = result.order_reduction
    pairs = {frozenset(r["pair"]) for r in reduction["interacting"]}
    declared = {p for p in INTERACTIONS if p <= set(result.paths)}  # prefix caching: not applicable here
    assert declared <= pairs  # every declared interaction keeps its orders
    assert reduction["orders_total"] == 24 and reduction["orders_shown"] == len(result.orders)
    if pairs == declared:  # a triangle (spec, tiered, comp) plus SP on tiered: 6 x 2 acyclic orientations
        assert len(result.orders) == 12
    # every one of the 24 orders has exactly one shown order agreeing with it on every interacting pair
    shown = [tuple(o["order"]) for o in result.orders]
    for order in itertools.permutations(result.paths):
        same = [s for s in shown if all((order.index(a) < order.index(b)) == (s.index(a) < s.index(b))
                                        for a, b in (sorted(p) for p in pairs))]
        assert len(same) == 1


def test_order_classes_by_hand():
    # no interactions: one order; one interacting pair among three paths: its two relative orders
    assert order_classes(("speculative", "tiered", "compression"), set()) == [("speculative", "tiered", "compression")]
    two = order_classes(("speculative", "tiered", "compression"), {frozenset({"speculative", "compression"})})
    assert len(two) == 2 and {o.index("speculative") < o.index("compression") for o in two} == {True, False}


def test_measured_interactions_are_judged_on_the_shown_metric():
    data = scenario()
    data["cluster"] = {"gpus": 2}
    result = stack(data, None, profile_with_mode(drop=0.30, overhead=0.0), replications=1, metric="tpot")
    assert all(m["term"] == "tpot" for m in result.order_reduction["measured"])
    assert len(result.couplings) == 4 * 3 * 3  # couplings still cover every ordered pair and every term
