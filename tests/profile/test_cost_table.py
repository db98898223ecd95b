"""The measured-grid cost models: interpolation, extrapolation, validation, the JSON round trip, and the simulator."""

import numpy as np
import pytest

from tripath.core.errors import InputError
from tripath.profile.cost_model import CostModel
from tripath.profile.cost_table import CostTable
from tripath.profile.profile import Profile, load_profile, save_profile
from tripath.simulator.costs import IterationCost


def table() -> CostTable:
    # ms = 10 + 2*row + 0.5*column + 0.01*row*column: bilinear, so interpolation inside the grid is exact
    rows, cols = (1.0, 2.0, 4.0), (0.0, 100.0, 300.0)
    ms = tuple(tuple(10 + 2 * r + 0.5 * c + 0.01 * r * c for c in cols) for r in rows)
    return CostTable(rows, cols, ms, "published", 0.9, "test grid")


def exact(r: float, c: float) -> float:
    return 10 + 2 * r + 0.5 * c + 0.01 * r * c


def test_interpolation_is_exact_on_a_bilinear_surface_inside_and_beyond_the_grid():
    t = table()
    for r, c in [(1, 0), (3, 50), (2.5, 250), (4, 300), (6, 500), (0, 0), (1.5, -10)]:
        assert float(t.at(r, c)) == pytest.approx(exact(r, c))


def test_an_array_of_columns_gives_the_same_floats_as_one_at_a_time():
    t = table()
    cols = np.array([0.0, 17.0, 150.0, 299.0, 1000.0])
    together = t.at(2.7, cols)
    assert [float(v) for v in together] == [float(t.at(2.7, float(c))) for c in cols]


@pytest.mark.parametrize("change, field", [
    (dict(rows=(1.0,)), "rows"),
    (dict(rows=(2.0, 1.0, 4.0)), "rows[1]"),
    (dict(ms=((1.0, 2.0, 3.0),)), "ms"),
    (dict(ms=((1.0, 2.0), (1.0, 2.0), (1.0, 2.0))), "ms[0]"),
    (dict(ms=((1.0, 2.0, 3.0), (1.0, -2.0, 3.0), (1.0, 2.0, 3.0))), "ms[1][1]"),
    (dict(measured_share=1.5), "measured_share"),
    (dict(source="guessed"), "source"),
])
def test_bad_grids_name_the_field(change, field):
    t = table()
    args = dict(rows=t.rows, columns=t.columns, ms=t.ms, source=t.source, measured_share=t.measured_share)
    args.update(change)
    with pytest.raises(InputError) as err:
        CostTable(**args)
    assert field in str(err.value)


def table_profile(base: Profile) -> Profile:
    from dataclasses import replace

    decode = CostModel("decode_table_v1", {}, ("batch", "total_context"),
                       {"batch": (1.0, 4.0), "total_context": (0.0, 1200.0)}, None, "test", table())
    prefill = CostModel("prefill_table_v1", {}, ("new_tokens", "context_tokens"),
                        {"new_tokens": (1.0, 4.0), "context_tokens": (0.0, 300.0)}, None, "test", table())
    return replace(base, costs={**base.costs, "decode": decode, "prefill": prefill})


def test_a_table_formula_needs_its_table_and_a_coefficient_formula_refuses_one():
    with pytest.raises(InputError, match="needs table"):
        CostModel("decode_table_v1", {}, ("batch", "total_context"),
                  {"batch": (1.0, 4.0), "total_context": (0.0, 1.0)})


def test_profile_round_trip_and_decode_reads_the_mean_context(tmp_path):
    base = load_profile("data/profiles/seed-llama2-70b-a100.json")
    profile = table_profile(base)
    path = tmp_path / "p.json"
    save_profile(profile, path)
    again = load_profile(path)
    assert again.to_json() == profile.to_json()
    # 2 sequences holding 200 tokens in all: L = 100 per sequence
    assert again.decode_ms(2, 200) == pytest.approx(exact(2, 100))
    assert again.prefill_ms(3, 50) == pytest.approx(exact(3, 50))


def test_the_simulator_prices_table_profiles_and_scaling_scales_every_cell():
    from tripath.planning.headroom import scaled_step_costs

    profile = table_profile(load_profile("data/profiles/seed-llama2-70b-a100.json"))
    cost = IterationCost.from_profile(profile)
    s = np.array([200.0, 400.0])
    assert list(cost.decode_s(2, s) * 1000) == pytest.approx([exact(2, 100), exact(2, 200)])
    assert cost.decode_one_s(2, 400) == float(cost.decode_s(2, np.array([400.0]))[0])
    # the iteration rule: decode + each chunk's work above prefill(0, 0)
    fixed = exact(0, 0)
    assert cost.chunked_s([(3, 50)], 2, 200) * 1000 == pytest.approx(exact(2, 100) + exact(3, 50) - fixed)
    doubled = scaled_step_costs(profile, 2.0)
    assert doubled.decode_ms(2, 200) == pytest.approx(2 * exact(2, 100))
    assert doubled.prefill_ms(3, 50) == pytest.approx(2 * exact(3, 50))
