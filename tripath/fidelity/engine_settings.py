"""One scenario -> the engine's settings: the EngineConfig that `tripath serve` and the fidelity runner both build.

A parsed Scenario (tripath/simulator/scenario/) names its settings as the simulator reads them; the engine
(tripath/engine/) never imports the simulator, so the translation lives here, in the one layer that may import
both (tests/test_architecture.py), and both callers use it: `tripath serve` (tripath/cli/serve.py, with its
flags as EngineOverrides) and the validation runner (tripath/fidelity/engine_side.py, no overrides). Before,
each translated the scenario its own way, with its own defaults and its own SSD tier size.

What comes from where:
- [batching] max_batch_size, max_batched_tokens -> EngineConfig's fields of the same names.
- [strategy.compression] mode -> EngineConfig.kv_compression.
- [strategy.prefix_cache] (enabled) -> EngineConfig.prefix_caching (an override may force it on or off).
- [strategy.tiered] (or the override ``tiered``) -> a TierConfig of chunk_tokens-token pages of ONE layer, so
  each tier holds (its tokens // chunk_tokens) x layers pages: the device pool what ``device_tokens`` holds, the
  host tier the caller's ``host_tokens`` (None: as many pages as the device), the SSD tier the caller's
  ``ssd_tokens`` capped at SSD_PAGES_CAP x the device pool (None: the cap itself); sinks and window from the
  table. Explicit page counts in the overrides win.
"""

from __future__ import annotations

from dataclasses import dataclass

from tripath.engine.engine_config import EngineConfig
from tripath.engine.tiered.tier_config import TierConfig
from tripath.simulator.scenario.scenario import Scenario

BLOCK_SIZE = 16  # the engine's paged block size by default (tripath serve --block-size; the profile's KV blocks)
# The SSD tier, at most this many times the device pool's pages: a scenario's SSD (hundreds of GiB on a GPU
# server, or the profile's disk) bounds nothing a replay needs, and each page is a file the engine writes.
SSD_PAGES_CAP = 16


@dataclass(frozen=True)
class EngineOverrides:
    """Engine settings given outside the scenario (`tripath serve`'s flags); None: the scenario's or the default.

    The fidelity runner passes none: its engine is exactly the scenario's.
    """

    block_size: int = BLOCK_SIZE
    tiered: bool = False  # tier the KV even without a [strategy.tiered] table
    chunk_tokens: int | None = None
    device_pages: int | None = None
    host_pages: int | None = None
    ssd_pages: int | None = None
    ssd_dir: str | None = None
    sink_tokens: int | None = None
    window_tokens: int | None = None
    prefix_caching: bool | None = None


def engine_settings(scenario: Scenario, device_tokens: int, layers: int, host_tokens: int | None = None,
                    ssd_tokens: int | None = None, overrides: EngineOverrides = EngineOverrides()) -> EngineConfig:
    """The EngineConfig the scenario describes, on a device KV pool of ``device_tokens`` tokens.

    ``host_tokens`` / ``ssd_tokens``: the KV tokens the scenario's host and SSD tiers hold as the caller sizes
    them (None: unknown, see the module docstring); used only when the KV is tiered. Raises ValueError where
    EngineConfig or TierConfig refuse the result (e.g. compression with tiering, a mode the engine lacks).
    """
    strategy = scenario.strategy
    block = overrides.block_size
    prefix = strategy.prefix_cache is not None if overrides.prefix_caching is None else overrides.prefix_caching
    compression = strategy.compression.mode if strategy.compression is not None else None
    return EngineConfig(scenario.batching.max_batch_size, scenario.batching.max_batched_tokens, block,
                        max(1, device_tokens // block), tiered=_tiers(scenario, device_tokens, layers, host_tokens,
                                                                      ssd_tokens, overrides),
                        kv_compression=compression, prefix_caching=prefix)


def _tiers(scenario: Scenario, device_tokens: int, layers: int, host_tokens: int | None, ssd_tokens: int | None,
           overrides: EngineOverrides) -> TierConfig | None:
    """The tiers of ``engine_settings`` (None: one paged pool); pages hold chunk_tokens tokens of one layer."""
    spec = scenario.strategy.tiered
    if spec is None and not overrides.tiered:
        return None
    chunk = overrides.chunk_tokens or (spec.chunk_tokens if spec is not None else TierConfig.chunk_tokens)
    if chunk < 1:
        raise ValueError(f"TierConfig.chunk_tokens: must be an integer >= 1, got {chunk}")

    def pages(tokens: int) -> int:
        return max(0, tokens // chunk) * layers

    device = overrides.device_pages or max(1, device_tokens // chunk) * layers
    host = overrides.host_pages if overrides.host_pages is not None else (
        device if host_tokens is None else pages(host_tokens))
    cap = SSD_PAGES_CAP * device
    ssd = overrides.ssd_pages if overrides.ssd_pages is not None else (
        cap if ssd_tokens is None else min(pages(ssd_tokens), cap))
    sinks = overrides.sink_tokens if overrides.sink_tokens is not None else (
        spec.sink_tokens if spec is not None else TierConfig.sink_tokens)
    window = overrides.window_tokens if overrides.window_tokens is not None else (
        spec.window_tokens if spec is not None else TierConfig.window_tokens)
    return TierConfig(chunk, device, host, ssd, overrides.ssd_dir, sink_tokens=sinks, window_tokens=window)
