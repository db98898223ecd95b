"""What a calibration job asks for: the target, the sweep grid, the optional sweeps and the fit settings.

A CalibrationJob is checked when it is built (bad settings are one InputError each); run_calibration
(tripath/calibrate/job.py) measures and fits it, and the optional sweeps read their switches from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tripath.calibrate.assemble import STATISTICS
from tripath.calibrate.fit import DEFAULT_MAX_HOLDOUT_MAPE
from tripath.calibrate.presets import Preset
from tripath.calibrate.sweeps.speculative import SpecSettings
from tripath.calibrate.target import TargetSpec
from tripath.calibrate.timer import CLOCKS
from tripath.core.errors import InputError

# --refresh NAME: the samples CSV rows (sweep-name prefixes) that sweep writes, and the job switch it needs
REFRESH_PREFIXES = {"compression": ("comp_",), "seqpar": ("seqpar_",), "paging": ("paging", "tier_step", "tier_miss"),
                    "speculative": ("spec_",)}
REFRESH_SWITCH = {"compression": "compression", "seqpar": "seqpar", "paging": "paging", "speculative": "draft"}


@dataclass(frozen=True)
class CalibrationJob:
    target: TargetSpec
    preset: Preset
    out: str  # profile path; samples, meta and plots go beside it
    device: str = "cpu"
    threads: int | None = 1  # CPU threads for torch (None: torch's default)
    force: bool = False  # write the profile even if a fit exceeds the threshold
    max_holdout_mape: float = DEFAULT_MAX_HOLDOUT_MAPE
    block_size: int = 16
    statistic: str | None = None  # "median" or "min" of the repetitions; None: min for CPU wall time, else median
    cpu_clock: str | None = None  # "wall" or "thread"; None: thread CPU time when threads == 1, else wall
    # KV budget of one replica; None: derived (serve's pool on CPU, memory x 0.9 - weights on GPU). Give it
    # when the full model's weights do not fit the one device that times a few of its layers.
    kv_capacity_bytes: int | None = None
    command: str = "tripath.calibrate.job.run_calibration"
    progress: bool = True
    plots: bool = True
    draft: str | None = None  # draft checkpoint folder: adds the speculative sweep (needs a --model checkpoint)
    eval_prompts: str | None = None  # eval_prompts.jsonl for the speculative sweep (default data/models/)
    spec: SpecSettings = SpecSettings()
    paging: bool = False  # add the paging sweep (the tiered cache's tiers per chunk size, SSD tier in a temp dir)
    seqpar: bool = False  # add the sequence-parallel sweep (P vs 1 prefill per preset degree; spawns gloo ranks)
    compression: bool = False  # add the KV-compression sweep (needs a --model checkpoint; --draft adds acceptance)
    # add the step-overhead sweep (tripath/calibrate/sweeps/overhead.py): a served Engine.step() minus its forward,
    # fitted as costs.step_overhead; its rows resume like the others' and need no fingerprint of their own
    step_overhead: bool = False
    # optional sweeps to measure afresh: their rows are dropped from the samples CSV before resuming (the
    # other sweeps' rows are kept and only refitted), e.g. after the engine's implementation of one changed
    refresh: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise InputError(None, "device", f"must be cpu or cuda, got {self.device!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or self.threads < 1):
            raise InputError(None, "threads", f"must be >= 1, got {self.threads!r}")
        if not 0 < self.max_holdout_mape:
            raise InputError(None, "max_holdout_mape", f"must be > 0, got {self.max_holdout_mape!r}")
        if self.statistic not in (None, *STATISTICS):
            raise InputError(None, "statistic", f"must be one of {', '.join(STATISTICS)}, got {self.statistic!r}")
        if self.kv_capacity_bytes is not None and (isinstance(self.kv_capacity_bytes, bool)
                                                   or not isinstance(self.kv_capacity_bytes, int)
                                                   or self.kv_capacity_bytes < 1):
            raise InputError(None, "kv_capacity_bytes", f"must be an integer >= 1, got {self.kv_capacity_bytes!r}")
        if self.cpu_clock not in (None, *CLOCKS):
            raise InputError(None, "cpu_clock", f"must be one of {', '.join(CLOCKS)}, got {self.cpu_clock!r}")
        if self.cpu_clock == "thread" and self.threads != 1:
            raise InputError(None, "cpu_clock", "thread CPU time measures a step only with threads = 1")
        if self.draft is not None and self.target.checkpoint is None:
            raise InputError(None, "draft", "the speculative sweep decodes real prompts: give --model DIR too")
        if self.compression and self.target.checkpoint is None:
            raise InputError(None, "compression", "the compression sweep decodes real prompts: give --model DIR too")
        for name in self.refresh:
            if name not in REFRESH_PREFIXES:
                raise InputError(None, "refresh", f"unknown sweep {name!r}; one of {', '.join(REFRESH_PREFIXES)}")
            if not getattr(self, REFRESH_SWITCH[name]):
                raise InputError(None, "refresh", f"--refresh {name} needs that sweep switched on too")
        if not str(self.out).endswith(".json"):
            raise InputError(None, "out", f"profile path must end in .json, got {self.out!r}")
