"""One scenario -> one engine: `tripath serve` and the validation runner get their EngineConfig from the same
function (tripath/fidelity/engine_settings.py), so on the same device pool they build the same engine."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest
import torch

from tripath.cli.arg_types import OneLineParser
from tripath.cli.serve import serve_config
from tripath.cli.serve_parser import add_arguments
from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel
from tripath.fidelity.engine_settings import SSD_PAGES_CAP, EngineOverrides, engine_settings
from tripath.fidelity.engine_side import engine_config, scenario_of, unsupported
from tripath.fidelity.sim_side import requests_for, tier_tokens
from tripath.profile.profile import resolve_profile

VALIDATION = sorted((SCENARIOS_DIR / "validation").glob("*.toml"))


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    return LlamaModel(PRESETS["tiny-target"], torch.Generator().manual_seed(0))


def _serve_args(*argv: str):
    p = OneLineParser(prog="tripath serve")
    add_arguments(p)
    return p.parse_args(list(argv))


def _data(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", VALIDATION, ids=lambda p: p.stem)
def test_serve_and_the_validation_runner_build_the_same_engine_from_a_shipped_scenario(path: Path, model) -> None:
    data = _data(path)
    if unsupported(data) is not None or "sequence_parallel" in data.get("strategy", {}):
        pytest.skip("the engine side does not build a plain Engine for this scenario")
    profile = resolve_profile("cpu-tiny")
    _, kv_tokens = requests_for(data, str(path), profile, 0)
    layers = model.config.num_layers
    fidelity = engine_config(data, kv_tokens, layers, tier_tokens(data, profile), str(path))
    # serve on the same device pool: --num-blocks the validation runner's blocks of the default block size
    served = serve_config(_serve_args(str(path), "--num-blocks", str(kv_tokens // 16)), scenario_of(data, str(path)),
                          model)
    assert served == fidelity
    scenario = scenario_of(data, str(path))
    assert (fidelity.max_batch_size, fidelity.max_batched_tokens) == (scenario.batching.max_batch_size,
                                                                     scenario.batching.max_batched_tokens)
    assert fidelity.prefix_caching == (scenario.strategy.prefix_cache is not None)
    assert fidelity.kv_compression == (scenario.strategy.compression.mode if scenario.strategy.compression else None)
    assert (fidelity.tiered is None) == (scenario.strategy.tiered is None)


def test_the_ssd_tier_is_the_scenarios_capped_at_the_device_pools_multiple(model) -> None:
    path = SCENARIOS_DIR / "validation" / "tiered-host-ssd.toml"
    data = _data(path)
    scenario = scenario_of(data, str(path))
    capped = engine_settings(scenario, 1052, 6, 1048, 349525)  # 1 GiB of 3,072-byte tokens: past the cap
    assert (capped.tiered.device_pages, capped.tiered.host_pages, capped.tiered.ssd_pages) == (24, 24,
                                                                                              SSD_PAGES_CAP * 24)
    assert engine_settings(scenario, 1052, 6, 1048, 2560).tiered.ssd_pages == 10 * 6  # below the cap: the scenario's
    no_ssd = copy.deepcopy(data)
    no_ssd["strategy"]["tiered"]["ssd_capacity_gib"] = 0.0  # host-only tiering: serve used to give it 8x the device
    args = _serve_args(str(path), "--num-blocks", "65")
    assert serve_config(args, scenario_of(no_ssd, str(path)), model).tiered.ssd_pages == 0
    assert serve_config(_serve_args(str(path), "--ssd-pages", "7"), scenario, model).tiered.ssd_pages == 7
    # no size given: the cap
    assert engine_settings(scenario, 1052, 6).tiered.ssd_pages == SSD_PAGES_CAP * 24


def test_overrides_win_and_the_tables_sinks_and_window_are_kept(model) -> None:
    path = SCENARIOS_DIR / "validation" / "tiered-host-ssd.toml"
    data = _data(path)
    data["strategy"]["tiered"].update(sink_tokens=8, window_tokens=64)
    scenario = scenario_of(data, str(path))
    tiers = engine_settings(scenario, 1052, 6).tiered
    assert (tiers.sink_tokens, tiers.window_tokens) == (8, 64)
    forced = engine_settings(scenario, 1052, 6, overrides=EngineOverrides(window_tokens=32, chunk_tokens=128,
                                                                         prefix_caching=True))
    assert (forced.tiered.window_tokens, forced.tiered.chunk_tokens, forced.tiered.device_pages) == (32, 128, 48)
    assert forced.prefix_caching
    plain = copy.deepcopy(data)
    del plain["strategy"]
    assert engine_settings(scenario_of(plain, str(path)), 1052, 6).tiered is None
    assert engine_settings(scenario_of(plain, str(path)), 1052, 6, overrides=EngineOverrides(tiered=True)).tiered
