"""Which serving engine's scheduling rules a profile's numbers describe.

The simulator models the engine a profile was measured on. Two rules differ between engines:

- when the draft model first reads a prompt (real_engine: in the request's first speculative
  round; vLLM-style engines: in the target's prefill step), and
- what the tiered cache pins on the device per live sequence (real_engine: sinks + recent
  window + one straddling page per layer, tiers.TierConfig; other engines: not published).

A profile of source kind "measured" is written only by `tripath calibrate`, which times
real_engine, so it follows real_engine's rules. Seed and published profiles describe other
engines (the seed document's and Vidur's vLLM), and projected profiles inherit the rules of what
they project from only where the projection keeps the source kind (it does not), so both keep the
vLLM-style rules. A scenario can override the tiering rule ([strategy.tiered] device_residency).
"""

from __future__ import annotations

from typing import Any


def follows_real_engine(profile: Any) -> bool:
    """True when the profile was measured on tripath's real_engine (source kind "measured")."""
    return getattr(profile, "source", None) == "measured"
