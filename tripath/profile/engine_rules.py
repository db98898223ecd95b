"""Which serving engine's scheduling rules a profile's numbers describe.

The simulator models the engine a profile was measured on. Three rules differ between engines:

- when the draft model first reads a prompt (the engine: in the request's first speculative
  round; vLLM-style engines: in the target's prefill step), and
- what the tiered cache pins on the device per live sequence (the engine: sinks + recent
  window + one straddling page per layer, tiers.TierConfig; other engines: not published), and
- how many keys a decode step's attention reads (the engine: every decoding sequence gathers the
  batch's longest context rounded up to whole KV blocks, the rest masked; vLLM's paged-attention
  kernel reads only each sequence's own blocks): ``decode_block_tokens``.

A profile of source kind "measured" is written only by `tripath calibrate`, which times
the engine, so it follows the engine's rules. Seed and published profiles describe other
engines (the seed document's and Vidur's vLLM), and projected profiles inherit the rules of what
they project from only where the projection keeps the source kind (it does not), so both keep the
vLLM-style rules. A scenario can override the tiering rule ([strategy.tiered] device_residency).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the simulator imports these rules; the profile module is not needed to run them
    from tripath.profile.profile import Profile


def follows_tripath_engine(profile: Profile) -> bool:
    """True when the profile was measured on tripath's engine (source kind "measured")."""
    return getattr(profile, "source", None) == "measured"


# tripath/engine/engine_config.py EngineConfig.block_size, the block size `tripath calibrate` times with
# (tripath/calibrate/job.py, recorded in samples.meta) and `tripath serve` runs; the profile has no field for it,
# so the engine default stands (tests/simulator/test_padded_decode.py checks the two agree).
REAL_ENGINE_BLOCK_TOKENS = 16


def decode_block_tokens(profile: Profile) -> int | None:
    """Tokens per KV block when decode attention is padded to the batch's longest context, else None.

    the engine's PagedAttention gathers ``tables[:B, :ceil(max context / block)]`` for the B decoding
    sequences: B x ceil(max / block) x block keys, whatever the shorter ones hold. Profiles of other
    engines price the sum of contexts (None).
    """
    return REAL_ENGINE_BLOCK_TOKENS if follows_tripath_engine(profile) else None
