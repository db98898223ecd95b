"""A calibration job: time the real engine over the sweeps, fit, and write the profile.

    run_calibration(CalibrationJob(...)) -> CalibrationResult

The CLI (``tripath calibrate``) and the tests call this same function. The files it will write are checked
first (a folder or link there is refused before any measuring). Samples are appended to
``NAME.samples.csv`` as they are measured (a killed job resumes where it stopped; a job that fails before its
first point leaves none, tripath/calibrate/samples.py); the profile
is written only after every point is measured and every fit passes the threshold (or ``force``),
and then atomically, so it is never half-written. Residual plots go beside it.
"""

from __future__ import annotations

import datetime as dt
import functools
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from tripath.calibrate.assemble import SWEEPS, FittedCost, fit_all, refusals
from tripath.calibrate.fit import FitRefused, refusal_reason
from tripath.calibrate.hardware import GIB, cpu_hardware, spec_for_device
from tripath.calibrate.job_config import REFRESH_PREFIXES, CalibrationJob
from tripath.calibrate.optional_sweeps import measure_optional, optional_sections
from tripath.calibrate.probe import StepProbe
from tripath.calibrate.samples import Sample, SampleLog, meta_path_for, samples_path_for
from tripath.calibrate.sweeps.overhead import REPS_FACTOR, measure_overhead, overhead_cost
from tripath.calibrate.sweeps.overhead import missing as overhead_missing
from tripath.calibrate.target import DTYPE_KEYS, LoadedTarget, TargetSpec, load_target, model_spec
from tripath.calibrate.timer import time_call
from tripath.core.atomic import check_file_target
from tripath.core.data_dirs import REPO_ROOT
from tripath.core.errors import InputError
from tripath.engine.model.checkpoint import load_config
from tripath.engine.model.config import PRESETS
from tripath.profile.profile import Hardware, MemoryBudget, Profile, ProfileKey, Provenance, save_profile

CLOCK_TEXT = {"cuda-events": "CUDA events", "wall": "wall time (perf_counter)",
              "thread": "CPU time of the single torch thread (time.thread_time: what the step costs on an idle "
              "core; other processes inflate it far less than wall time, not by nothing: calibrate on a quiet machine)"}
GPU_MEMORY_UTILISATION = 0.9  # vLLM's default share of device memory for weights + KV
SERVE_KV_TOKENS = 1024 * 16  # `tripath serve` defaults: --num-blocks 1024 x --block-size 16

@dataclass(frozen=True)
class CalibrationResult:
    profile: Profile
    profile_path: Path
    samples_path: Path
    plots: tuple[Path, ...]
    measured_points: int  # points measured by this run (the rest were on disk already)
    refusals: tuple[str, ...] = field(default=())


def clock_of(job: CalibrationJob) -> str:
    """What times a CPU step: the single torch thread's CPU time when possible (immune to other processes)."""
    if job.device == "cuda":
        return "cuda-events"
    return job.cpu_clock or ("thread" if job.threads == 1 else "wall")


def engine_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=10, check=True)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _fingerprint(job: CalibrationJob, device_name: str) -> dict[str, object]:
    return {"target": asdict(job.target), "preset": asdict(job.preset), "device": job.device,
            "device_name": device_name, "block_size": job.block_size, "threads": job.threads, "clock": clock_of(job),
            "columns": {name: list(s.inputs) for name, s in SWEEPS.items()},
            # only when given, so samples taken without a draft still resume
            # (spread_prompts left out: it adds untimed per-prompt count rows under keys of their own, nothing
            # to mix with rows taken before it existed, so those samples still resume)
            **({"draft": job.draft, "spec": {k: v for k, v in asdict(job.spec).items() if k != "spread_prompts"}}
               if job.draft is not None else {}),
            **({"paging": True} if job.paging else {}), **({"seqpar": True} if job.seqpar else {}),
            **({"compression": True} if job.compression else {})}


def _measure(job: CalibrationJob, log: SampleLog, device: torch.device,
             after_point: Callable[[int], None] | None) -> int:
    target = load_target(job.target, device)
    max_len = target.config.max_position_embeddings
    grid = [(sweep, p) for sweep in SWEEPS.values() for p in sweep.points(job.preset, max_len)]
    total = len(grid) * len(target.layer_counts)
    measured = 0
    bar = tqdm(total=total, initial=len(log.done), desc="calibrate", unit="pt", disable=not job.progress)
    deepest = max(target.layer_counts)
    for layers in target.layer_counts:  # one model (and KV pool) alive at a time
        todo = [(sweep, p) for sweep, p in grid if (sweep.name, layers, *p) not in log.done]
        overhead = job.step_overhead and layers == deepest and overhead_missing(job.preset, max_len, layers, log)
        if not todo and not overhead:
            continue
        probe = StepProbe(target.models[layers], job.preset.max_step_tokens(max_len), job.block_size,
                          max_sequences=max(job.preset.decode_batch))
        for sweep, (x1, x2) in todo:
            chunks = sweep.chunks(probe, x1, x2)
            timing = time_call(functools.partial(probe.run, chunks), job.preset.timer, device,
                               "wall" if clock_of(job) == "cuda-events" else clock_of(job))
            log.append(Sample(sweep.name, layers, x1, x2, timing.median_ms, timing.min_ms, timing.max_ms,
                              len(timing.times_ms)))
            measured += 1
            bar.update(1)
            if after_point is not None:
                after_point(measured)
        if overhead:
            clock = time.thread_time if clock_of(job) == "thread" else time.perf_counter
            measured += measure_overhead(probe, job.preset, max_len, layers, log, clock, device)
        del probe
        target.models.pop(layers)
    bar.close()
    return measured


def _hardware(job: CalibrationJob, device: torch.device) -> tuple[str, Hardware, str | None]:
    if device.type == "cpu":
        name, hardware = cpu_hardware()
        return name, hardware, None
    device_name = torch.cuda.get_device_name(device)
    total = torch.cuda.get_device_properties(device).total_memory
    spec = spec_for_device(device_name)
    note = f"device memory measured (torch.cuda.get_device_properties: {total} bytes)"
    if spec is None:
        hw = Hardware(device_name, total, 0, 0, {}, note + "; no published spec matched, no links listed")
        return device_name.lower().replace(" ", "-").replace("/", "-"), hw, device_name
    published = spec.hardware(note)
    hw = Hardware(device_name, total, published.host_memory_bytes, published.ssd_bytes, published.links,
                  published.note)
    return spec.name, hw, device_name


def _memory(job: CalibrationJob, hardware: Hardware, weight_bytes: int, kv_per_token: int) -> MemoryBudget:
    if job.kv_capacity_bytes is not None:
        return MemoryBudget(job.kv_capacity_bytes, "derived", "given with the calibration job (--kv-capacity-gib)")
    if job.device == "cpu":
        return MemoryBudget(SERVE_KV_TOKENS * kv_per_token, "derived",
                            "the KV pool `tripath serve` allocates by default (1024 blocks x 16 tokens), so a "
                            "simulation and a serve replay on this CPU hold the same cache")
    budget = int(hardware.device_memory_bytes * GPU_MEMORY_UTILISATION) - weight_bytes
    if budget <= 0:
        raise InputError(None, "memory", f"{weight_bytes / GIB:.1f} GiB of weights leave no KV room on "
                         f"{hardware.device_memory_bytes / GIB:.1f} GiB x {GPU_MEMORY_UTILISATION}: pass "
                         "--kv-capacity-gib (the KV budget of one replica of your deployment)")
    return MemoryBudget(budget, "derived", f"device memory x {GPU_MEMORY_UTILISATION} (vLLM's default "
                        f"utilisation) minus full-model weights; activations are not reserved separately")


def run_calibration(job: CalibrationJob, after_point: Callable[[int], None] | None = None) -> CalibrationResult:
    """Measure (resuming from the samples on disk), fit, and write the profile unless a fit is refused. An
    existing profile at ``job.out`` is updated (its samples resume, --refresh measures a sweep afresh)."""
    out = Path(job.out)
    samples_path = samples_path_for(out)
    for path in (out, samples_path, meta_path_for(samples_path)):  # before any work: not after the sweep
        check_file_target(path, "--out")
    if job.device == "cuda" and not torch.cuda.is_available():
        raise InputError(None, "device", "cuda requested but torch sees no CUDA device")
    device = torch.device(job.device)
    if job.threads is not None and device.type == "cpu":
        torch.set_num_threads(job.threads)
    key_hw, hardware, cuda_name = _hardware(job, device)
    target_spec = job.target
    spec_model = model_spec(_config_only(target_spec))
    # before any measuring: a budget that cannot be derived must fail now, not after the sweep
    memory = _memory(job, hardware, spec_model.weight_bytes, spec_model.kv_bytes_per_token)
    with SampleLog.open(samples_path, _fingerprint(job, hardware.device_name)) as log:
        log.drop(tuple(p for name in job.refresh for p in REFRESH_PREFIXES[name]))
        measured = _measure(job, log, device, after_point)
        measured += measure_optional(job, log, device, _config_only(target_spec).config, clock_of(job) == "thread")
        samples = list(log.samples)
    how = (f"timed at 1 and {target_spec.layers_timed} layers, extrapolated per layer" if target_spec.scaled
           else "all layers timed")
    # Wall time on a CPU shared with other processes: contention only ever adds time, so the minimum
    # of the repetitions is the engine's own cost (timeit's convention). Thread CPU time and a GPU: median.
    clock = clock_of(job)
    statistic = job.statistic or ("min" if clock == "wall" else "median")
    fitted = fit_all(samples, spec_model.layers, coefficient_source="fitted",
                     data=f"{samples_path.name} ({statistic}_ms): {job.preset.name} preset on "
                     f"{hardware.device_name} ({how})",
                     note=f"{statistic.capitalize()} of {job.preset.timer.reps} timed repetitions per point after "
                     f"{job.preset.timer.warmup} warm-up, clock: {CLOCK_TEXT[clock]}; {how}.", statistic=statistic)
    reasons = refusals(fitted, job.max_holdout_mape)
    overhead = None
    if job.step_overhead:
        overhead = overhead_cost(samples, data=f"{samples_path.name} (overhead rows: median of the paired "
                                 f"step - forward differences): {job.preset.name} preset on {hardware.device_name}",
                                 note=f"{REPS_FACTOR * job.preset.timer.reps} paired repetitions per point after "
                                 f"{job.preset.timer.warmup} warm-up, clock: {CLOCK_TEXT[clock]}.")
        if overhead is not None:
            reason = refusal_reason("step_overhead", overhead[0].fit, job.max_holdout_mape)
            reasons += [reason] if reason is not None else []
    if reasons and not job.force:
        raise FitRefused("profile not written: " + "; ".join(reasons) + f". Samples are kept in {samples_path}; "
                         "pass --force to write it anyway")
    commit = engine_commit()
    notes = [f"Measured on this machine by `{job.command}`: the engine forwards (paged attention, fused "
             f"projections) timed per point; coefficients fitted to {samples_path.name}."]
    if target_spec.scaled:
        notes.append(f"Scaled: random weights, {target_spec.layers_timed} of {spec_model.layers} decoder layers "
                     "instantiated; full-depth times extrapolated per layer (see model.note).")
    if overhead is not None:
        notes.append("costs.step_overhead: the served Engine.step()'s host work outside the forward (schedule, "
                     "inputs, sampler, outputs), measured as step - forward on the same steps; the simulator "
                     "adds it once per iteration.")
    notes += [f"Written with --force despite: {r}" for r in reasons]
    sections = optional_sections(job, samples, spec_model.kv_bytes_per_token, statistic, hardware.device_name,
                                 CLOCK_TEXT[clock])
    if sections.missing():
        notes.append(f"Not measured by this run: {', '.join(sections.missing())} sweeps; those optional sections "
                     "are absent.")
    profile = Profile(
        key=ProfileKey(key_hw, spec_model.name, DTYPE_KEYS[target_spec.dtype], 1, commit),
        source="measured", hardware=hardware, model=spec_model,
        memory=memory,
        costs={**{name: f.model for name, f in fitted.items()},
               **({"step_overhead": overhead[0]} if overhead is not None else {})},
        speculative=sections.speculative, acceptance=sections.acceptance, paging=sections.paging,
        sequence_parallel=sections.sequence_parallel, compression=sections.compression,
        provenance=Provenance(job.command, commit, torch.__version__, torch.version.cuda, cuda_name or
                              hardware.device_name, dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")),
        notes=tuple(notes),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    save_profile(profile, out)
    plots = write_plots(fitted, out, profile.key_str()) if job.plots else ()
    return CalibrationResult(profile, out, samples_path, plots, measured, tuple(reasons))


def _config_only(spec: TargetSpec) -> LoadedTarget:
    """The full model's config without weights (for the profile's model section)."""
    config = load_config(spec.checkpoint) if spec.checkpoint is not None else PRESETS[str(spec.preset)]
    return LoadedTarget(spec, config, {})


def write_plots(fitted: dict[str, FittedCost], profile_path: Path, title: str) -> tuple[Path, ...]:
    """One samples-vs-fit PNG per cost model beside the profile: NAME.fit-<cost>.png."""
    from tripath.calibrate.plots import plot_fit  # matplotlib loads only when plots are written

    return tuple(plot_fit(name, f.model, f.x1, f.x2, f.observed_ms,
                          profile_path.with_name(f"{profile_path.stem}.fit-{name}.png"), title)
                 for name, f in fitted.items())
