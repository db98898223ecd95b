"""The optional sweeps of a calibration job (speculative, paging, sequence parallel, compression): run them
into the samples log, then build the profile's optional sections from the samples.

Each is switched on by the job (``--draft``, ``--paging``, ``--seqpar``, ``--compression``) and swept
over the preset's grid for it: K (``spec_k``), tokens per page (``paging_chunks``) and degree P
(``sp_degrees``). Each sweep resumes on its own from the rows on disk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from tripath.calibrate.samples import Sample, SampleLog
from tripath.calibrate.sweeps.compression import compression_section, measure_compression, thread_clock
from tripath.calibrate.sweeps.paging import CHUNK_TOKENS, measure_paging, paging_sections
from tripath.calibrate.sweeps.seqpar import measure_seqpar, seqpar_section
from tripath.calibrate.sweeps.speculative import SpecSettings, measure_speculative, speculative_sections
from tripath.calibrate.target import DTYPES
from tripath.core.errors import InputError
from tripath.engine.model.config import ModelConfig
from tripath.profile.profile import CompressionMode, PagingLink, SequenceParallel, Speculative, TaskAcceptance

if TYPE_CHECKING:
    from tripath.calibrate.job_config import CalibrationJob
    from tripath.engine.model.model import LlamaModel

SEQPAR_REPS = 3  # whole-model prefills: a few repetitions are enough (seconds each at 2K tokens)


@dataclass(frozen=True)
class OptionalSections:
    speculative: Speculative | None
    acceptance: dict[str, TaskAcceptance]
    paging: dict[str, PagingLink]
    sequence_parallel: dict[int, SequenceParallel]
    compression: dict[str, CompressionMode]

    def missing(self) -> list[str]:
        """The optional sweeps this profile has no section for."""
        return (([] if self.compression else ["compression"]) + ([] if self.sequence_parallel else
                                                                 ["sequence-parallel"])
                + (["speculative"] if self.speculative is None else []) + ([] if self.paging else ["paging"]))


def spec_settings(job: CalibrationJob, thread_clocked: bool) -> SpecSettings:
    """The job's speculative settings with the preset's K grid unless the job names its own, timed by the
    job's clock (the thread's CPU time when the job's steps are)."""
    settings = job.spec if job.spec.ks else replace(job.spec, ks=job.preset.spec_k)
    return replace(settings, clock="thread") if thread_clocked else settings


def measure_optional(job: CalibrationJob, log: SampleLog, device: torch.device, config: ModelConfig,
                     thread_clocked: bool) -> int:
    """Every optional sweep the job switches on, resuming from ``log``; returns the units measured."""
    measured = 0
    if job.draft is not None:
        measured += _measure_speculative(job, log, device, thread_clocked)
    if job.paging:
        measured += measure_paging(config, DTYPES[job.target.dtype], device, job.preset.timer, log,
                                   ssd_dir=str(Path(job.out).parent), chunk_tokens=CHUNK_TOKENS,
                                   more_chunks=job.preset.paging_chunks, model=_paging_model(job, device))
    if job.seqpar:
        measured += measure_seqpar(config, min(job.preset.timer.reps, SEQPAR_REPS), log,
                                   degrees=job.preset.sp_degrees)
    if job.compression:
        measured += _measure_compression(job, log, device, thread_clocked)
    return measured


def optional_sections(job: CalibrationJob, samples: list[Sample], kv_bytes_per_token: int, statistic: str,
                      device_name: str, clock_text: str) -> OptionalSections:
    """The profile's optional sections from the samples (empty for the sweeps the job left off)."""
    where = f"{job.preset.name} preset on {device_name}"
    speculative, acceptance = (speculative_sections(samples, Path(job.draft).name, job.spec.k)
                               if job.draft is not None else (None, {}))
    # Paging is timed by wall clock everywhere (SSD transfers wait on I/O, which a CPU clock leaves out): on a
    # shared CPU other processes only add time, so the minimum of the repetitions is its own cost.
    paging_statistic = job.statistic or ("min" if job.device == "cpu" else statistic)
    paging = (paging_sections(samples, kv_bytes_per_token, paging_statistic, f"{where}, wall clock", CHUNK_TOKENS)
              if job.paging else {})
    sequence_parallel = seqpar_section(samples, where) if job.seqpar else {}
    compression = (compression_section(samples, job.spec.k if job.draft is not None else None,
                                       f"{device_name}, clock: {clock_text}")
                   if job.compression else {})
    return OptionalSections(speculative, acceptance, paging, sequence_parallel, compression)


def _paging_model(job: CalibrationJob, device: torch.device) -> LlamaModel | None:
    """The target checkpoint, for the paging sweep's tiered-vs-paged Engine steps (tripath/calibrate/sweeps/gather.py);
    None for a config preset (random weights at full depth would be a second copy of a possibly huge model)."""
    if job.target.checkpoint is None:
        return None
    from tripath.engine.model.checkpoint import load_checkpoint

    return load_checkpoint(str(job.target.checkpoint), device=device, dtype=DTYPES[job.target.dtype])[1]


def _measure_compression(job: CalibrationJob, log: SampleLog, device: torch.device, thread_clocked: bool) -> int:
    """The compression sweep on the target checkpoint: the first eval prompt of each task (two at most)."""
    from tripath.engine.model.checkpoint import load_checkpoint

    dtype = DTYPES[job.target.dtype]
    target = load_checkpoint(str(job.target.checkpoint), device=device, dtype=dtype)[1]
    draft = load_checkpoint(str(job.draft), device=device, dtype=dtype)[1] if job.draft is not None else None
    prompts = [p[0] for p in _eval_prompts(job).values()][:2]
    clock = thread_clock if thread_clocked else time.perf_counter
    return measure_compression(target, draft, prompts, job.spec.k, log, clock)


def _eval_prompts(job: CalibrationJob) -> dict[str, list[list[int]]]:
    """Token ids of the eval prompts per task (at most job.spec.prompts_needed each: the timed ones and those counted
    for the between-prompt spread of acceptance), tasks without prompts left out."""
    from tripath.core.data_dirs import MODELS_DIR
    from tripath.engine.model.tokenizer import ByteTokenizer
    from tripath.training.corpus import TASKS, load_eval_prompts

    tok = ByteTokenizer()
    eval_path = Path(job.eval_prompts) if job.eval_prompts is not None else MODELS_DIR / "eval_prompts.jsonl"
    evals = load_eval_prompts(eval_path)
    prompts = {t: [tok.encode(s.prompt, add_bos=True) for s in evals if s.task == t][: job.spec.prompts_needed]
               for t in TASKS}
    prompts = {t: p for t, p in prompts.items() if p}
    if not prompts:
        raise InputError(str(eval_path), None, f"no prompts for any task of {', '.join(TASKS)}")
    return prompts


def _measure_speculative(job: CalibrationJob, log: SampleLog, device: torch.device, thread_clocked: bool) -> int:
    """The speculative sweep (tasks x K) on the target checkpoint and the draft; pairs on disk are skipped."""
    from tripath.engine.model.checkpoint import load_checkpoint

    dtype = DTYPES[job.target.dtype]
    target = load_checkpoint(str(job.target.checkpoint), device=device, dtype=dtype)[1]
    draft = load_checkpoint(str(job.draft), device=device, dtype=dtype)[1]
    settings = spec_settings(job, thread_clocked)
    prompts = _eval_prompts(job)
    with tqdm(total=len(prompts) * len(settings.grid), desc="speculative (task x K)", unit="run",
              disable=not job.progress) as bar:
        return measure_speculative(target, draft, prompts, settings, log,
                                   progress=lambda what: (bar.set_postfix_str(what), bar.update(1)) and None)
