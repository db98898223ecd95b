"""`tripath validate`: replay each validation scenario on the real engine and in the simulator, report the error.

For every scenario TOML in the folder (data/scenarios/validation/ by default): draw the request
list replication 0 of runner.simulate serves (tripath.fidelity.sim_side), serve it in wall-clock time on
the tiny target on this machine with one torch thread (tripath.fidelity.engine_side; the profile was
measured on one thread), simulate the same scenario on the profile, and compare TTFT, TPOT and
end-to-end latency at P50/P90/P99, throughput and per-path quantities (tripath.fidelity.compare). A side
that cannot run a scenario yet is reported "not run: <what is missing>".

``--quick``: only QUICK_SCENARIOS, each cut to its first QUICK_REQUESTS requests (the test suite
runs this). A quick or ``--only`` run is partial: its report goes to a folder of the user's
(PARTIAL_OUT by default) and is refused over the shipped full report (DEFAULT_OUT).
``--noise NAME``: serve that scenario's requests a second time on the engine and report the
run-to-run spread, the part of the error that is this shared machine's noise.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tripath.core.atomic import check_dir_target
from tripath.core.data_dirs import MODELS_DIR, SCENARIOS_DIR, user_dir
from tripath.core.errors import InputError
from tripath.simulator.scenario.scenario import read_scenario_file

if TYPE_CHECKING:  # imported where used at run time, so `tripath validate --help` stays quick
    from tripath.profile.profile import Profile

QUICK_SCENARIOS = ("baseline-light", "speculative-code")
QUICK_REQUESTS = 8
DEFAULT_SCENARIOS = SCENARIOS_DIR / "validation"
DEFAULT_OUT = SCENARIOS_DIR.parent / "validation" / "latest"  # the shipped full report the app shows
PARTIAL_OUT = user_dir() / "validation" / "partial"  # where quick and --only reports go by default


@dataclass(frozen=True)
class ValidateConfig:
    profile: str = "cpu-tiny"
    scenarios: str = str(DEFAULT_SCENARIOS)
    out: str | None = None  # None: DEFAULT_OUT for a full run, PARTIAL_OUT for a quick or --only one
    quick: bool = False
    seed: int = 0
    target: str = str(MODELS_DIR / "tiny-target")
    draft: str = str(MODELS_DIR / "tiny-draft")
    noise: tuple[str, ...] = ()  # scenario names whose engine side runs twice
    only: tuple[str, ...] = ()  # run only these scenario names (empty: all)
    progress: bool = True
    replace: bool = False  # an existing non-empty `out` given by the user is replaced whole

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise InputError(None, "--seed", f"must be >= 0, got {self.seed}")

    @property
    def partial(self) -> bool:
        return self.quick or bool(self.only)

    @property
    def default_out(self) -> Path:
        """The report folder without --out: the shipped full report, or the user's partial folder."""
        return PARTIAL_OUT if self.partial else DEFAULT_OUT

    def out_folder(self) -> Path:
        """Where the report goes, checked before any work: a partial run never replaces the shipped full
        report; a folder the user named that holds files needs ``replace`` (the defaults are replaced whole)."""
        out = Path(self.out) if self.out is not None else self.default_out
        if self.partial and out.resolve() == DEFAULT_OUT.resolve():
            raise InputError(str(out), "--out", "is the shipped full report; a quick or --only validation "
                                                f"writes elsewhere (default {PARTIAL_OUT})")
        check_dir_target(out, self.may_replace(out))
        return out

    def may_replace(self, out: Path) -> bool:
        """Whether a non-empty ``out`` is replaced whole: with --replace, or where it is the default folder."""
        return self.replace or out.resolve() == self.default_out.resolve()


def load_cases(folder: str | Path, quick: bool, only: tuple[str, ...] = ()) -> list[tuple[str, dict[str, Any]]]:
    """(path, TOML dict) per scenario file, sorted by name; quick keeps QUICK_SCENARIOS, cut short."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(str(root), None, "validation scenario folder not found")
    cases = []
    for path in sorted(root.glob("*.toml")):
        data = read_scenario_file(path)
        name = data.setdefault("name", path.stem)
        if (quick and name not in QUICK_SCENARIOS) or (only and name not in only):
            continue
        if quick:
            data = copy.deepcopy(data)
            data["workload"].pop("duration_s", None)
            data["workload"]["requests"] = QUICK_REQUESTS
        cases.append((str(path), data))
    if not cases:
        raise InputError(str(root), None, "no validation scenarios selected (*.toml)")
    return cases


def _side_summary(records: list, extra: dict[str, Any]) -> dict[str, Any]:
    from tripath.core import metrics

    return {**metrics.counts(records), **extra}


def run_case(path: str, data: dict[str, Any], profile: Profile, models: tuple[Any, Any], seed: int,
             noise: bool, target_path: str | None = None) -> tuple[Any, list | None]:
    """One scenario: (ScenarioResult, noise rows or None).

    Every measured side's rows carry its 95 % bootstrap interval (tripath.fidelity.bootstrap), drawn from a
    stream keyed by (seed, scenario, side): the same run gives the same intervals.
    """
    from tripath.fidelity.bootstrap import bootstrap_ci, ci_rng
    from tripath.fidelity.compare import compare
    from tripath.fidelity.engine_side import NotAvailable, measure
    from tripath.fidelity.report import ScenarioResult
    from tripath.fidelity.sim_side import prefix_keys_for, requests_for, simulate_case, tier_tokens

    requests, kv_tokens = requests_for(data, path, profile, seed)
    k_default = profile.speculative.k if profile.speculative is not None else 4
    serve_on = partial(measure, data, requests, models[0], models[1], kv_tokens, seed, k_default,
                       target_path=target_path, tier_tokens=tier_tokens(data, profile),
                       prefix_keys=prefix_keys_for(data, path, profile, seed), source=path)
    res = ScenarioResult(data["name"], data.get("description", ""), path, len(requests))
    reasons, real, sim = [], None, None
    try:
        real = serve_on()
        res.real_records = real.records
        res.real = _side_summary(real.records, {"wall_s": real.wall_s, "steps": real.steps,
                                                "prompts": real.prompt_source, "core_share": real.core_share,
                                                "mean_batch": real.mean_batch})
    except NotAvailable as exc:
        reasons.append(str(exc))
    try:
        sim = simulate_case(data, path, profile, seed)
        spec = data.get("strategy", {}).get("speculative")
        if spec is not None:  # what the simulator was told: the profile's a per task, over the task mix
            sim.paths["acceptance"] = (profile_acceptance(profile, data, int(spec.get("k", k_default))),
                                       "fraction (profile input)")
        res.sim_records = sim.records
        res.sim = _side_summary(sim.records, {"profile_source": sim.profile_source})
    except NotAvailable as exc:
        reasons.append(str(exc))
    res.reason = "; ".join(reasons) or None
    real_ci = bootstrap_ci(real.records, ci_rng(seed, res.name, "real")) if real is not None else None
    # one-sided rows keep what was measured or simulated visible (the other side None, no error)
    if sim is not None or real is not None:
        sim_recs = sim.records if sim is not None else _nan_twin(real.records)
        real_recs = real.records if real is not None else _nan_twin(sim.records)
        res.rows = compare(sim_recs, real_recs, sim.paths if sim else {}, real.paths if real else {}, real_ci)
    if real is not None:  # the same requests again in CPU time: how much of the error is contention
        cpu = serve_on(clock="cpu")
        res.cpu_records = cpu.records
        res.real_cpu = _side_summary(cpu.records, {"steps": cpu.steps, "mean_batch": cpu.mean_batch,
                                                   "wall_s": cpu.wall_s})
        cpu_ci = bootstrap_ci(cpu.records, ci_rng(seed, res.name, "cpu"))
        res.cpu_rows = compare(sim.records if sim is not None else _nan_twin(cpu.records), cpu.records,
                               sim.paths if sim else {}, cpu.paths, cpu_ci)
    noise_rows = None
    if noise and real is not None:  # within_noise here: run 2 inside run 1's interval (a check of the interval)
        again = serve_on()
        noise_rows = compare(again.records, real.records, again.paths, real.paths, real_ci)
    return res, noise_rows


def profile_acceptance(profile: Profile, data: dict[str, Any], k: int) -> float:
    """The calibrated per-token acceptance a at K, averaged over the scenario's task mix."""
    tasks = data["workload"].get("tasks", {"default": 1.0})
    total = sum(tasks.values())
    return sum(w / total * profile.acceptance_for(t, k).mean for t, w in tasks.items())


def _nan_twin(records: list) -> list:
    """The same requests with no times: the missing side of a one-sided table (its values show as None)."""
    from tripath.core.records import rejected_record

    return [rejected_record(r.request_id, r.task, r.arrival_s, r.prompt_tokens, r.output_tokens, "not run")
            for r in records]


def run_validation(cfg: ValidateConfig) -> tuple[Path, list[Any], list[tuple[str, list]]]:
    import torch
    from tqdm import tqdm

    from tripath.engine.model.checkpoint import load_checkpoint
    from tripath.fidelity.bootstrap import LEVEL, RESAMPLES
    from tripath.fidelity.report import write_report
    from tripath.profile.profile import resolve_profile

    out = cfg.out_folder()
    profile = resolve_profile(cfg.profile)
    cases = load_cases(cfg.scenarios, cfg.quick, cfg.only)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the profile was measured: one torch thread (see data/profiles/README.md)
    try:
        _, target = load_checkpoint(cfg.target, device="cpu")
        _, draft = load_checkpoint(cfg.draft, device="cpu")
        results, noise = [], []
        for path, data in tqdm(cases, desc="validate", unit="scenario", file=sys.stderr, disable=not cfg.progress):
            res, noise_rows = run_case(path, data, profile, (target, draft), cfg.seed, data["name"] in cfg.noise,
                                       cfg.target)
            results.append(res)
            if noise_rows is not None:
                noise.append((res.name, noise_rows))
    finally:
        torch.set_num_threads(threads)
    meta = {"numbers_from": f"real engine measured on this machine (cpu, torch {torch.__version__}, 1 thread; "
                            f"wall clock, and replayed in the thread's CPU time) vs simulator on profile "
                            f"{cfg.profile}",
            "profile": profile.key_str(), "profile_source": profile.source, "seed": cfg.seed, "quick": cfg.quick,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "scenario_folder": cfg.scenarios,
            "measured_ci": {"method": "percentile bootstrap over requests (tripath/fidelity/bootstrap.py)",
                            "resamples": RESAMPLES, "level": LEVEL,
                            "seed": f"SeedSequence([{cfg.seed}, crc32(scenario), crc32(side)])"}}
    return write_report(out, meta, results, noise, cfg.may_replace(out)), results, noise


def cmd_validate(args: argparse.Namespace) -> int:
    cfg = ValidateConfig(profile=args.profile, scenarios=args.scenarios, out=args.out, quick=args.quick,
                         seed=args.seed, noise=tuple(args.noise), only=tuple(args.only),
                         progress=not args.no_progress, replace=args.replace)
    out, results, _ = run_validation(cfg)
    if args.json:
        print((out / "error_table.json").read_text(encoding="utf-8"))
        return 0
    for res in results:
        worst = res.to_dict()["worst"]
        line = f"{res.name}: {res.status}"
        if worst:
            line += f"; largest |error| {worst['metric']} {worst['stat']} {worst['error']:+.1%}"
            if worst.get("within_noise"):
                line += " (inside the measured 95 % interval)"
        if res.reason:
            line += f" ({res.reason})"
        print(line)
    print(f"report: {out}/error_table.md")
    return 0
