"""tripath: which long-context LLM inference path meets a P99 SLA at the lowest GPU cost.

The packages, lowest layer first (docs/architecture.md): ``core`` (shared types, atomic writes,
the data folders, speculative-decoding math), ``profile`` (the calibration-profile contract),
``simulator``, ``planning``, ``app`` and ``cli``; beside them ``engine`` (the real PyTorch engine),
``training`` (the tiny models), ``calibrate`` (profiles from the engine or from published timings)
and ``fidelity`` (the engine against the simulator).
"""
