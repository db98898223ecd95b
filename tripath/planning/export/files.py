"""A recommendation kept as files: scenario.toml and the export folder, and the suggestions of its chosen
candidate.

``write_export`` writes a folder: scenario.toml (the scenario as recommended: the request rate and any
request-count override applied, so ``tripath recommend DIR/scenario.toml`` reruns it), recommendation.json
(what ``tripath recommend --json`` prints), vllm.txt and sglang.txt (the suggestions), each file atomically.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from tripath.core.atomic import writing_dir
from tripath.planning.candidates import Candidate, by_names
from tripath.planning.export.settings import S
from tripath.planning.export.sglang import SglangSuggestion, sglang_suggestion
from tripath.planning.export.vllm import VllmSuggestion, vllm_suggestion
from tripath.planning.scenario_dict import with_fields
from tripath.profile.profile import Profile, resolve_profile

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: {value} has no place in a scenario")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v, where) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v, where)}" for k, v in value.items()) + "}"
    raise ValueError(f"{where}: cannot write a {type(value).__name__} to TOML")


def scenario_toml(data: dict[str, Any]) -> str:
    """The scenario dict as TOML text that ``tomllib`` reads back to the same dict (tables as [a.b] headers)."""
    lines: list[str] = []

    def table(node: dict[str, Any], path: list[str]) -> None:
        scalars = [(k, v) for k, v in node.items() if not isinstance(v, dict)]
        tables = [(k, v) for k, v in node.items() if isinstance(v, dict)]
        if path and (scalars or not tables):
            lines.extend(["", "[" + ".".join(_key(p) for p in path) + "]"])
        lines.extend(f"{_key(k)} = {_value(v, '.'.join([*path, k]))}" for k, v in scalars)
        for k, v in tables:
            table(v, [*path, k])

    table(data, [])
    return "\n".join(lines).lstrip("\n") + "\n"


def write_export(directory: str | Path, scenario: dict[str, Any], recommendation: dict[str, Any],
                 suggestion: VllmSuggestion | None, replace: bool = False,
                 sglang: SglangSuggestion | None = None) -> list[Path]:
    """scenario.toml, recommendation.json and (when a candidate was chosen) vllm.txt and sglang.txt in
    ``directory``, written as one folder (core.atomic.writing_dir: a non-empty folder is refused unless
    ``replace``)."""
    files = [("scenario.toml", scenario_toml(scenario)),
             ("recommendation.json", json.dumps(recommendation, indent=2, sort_keys=True, allow_nan=False) + "\n")]
    if suggestion is not None:
        files.append(("vllm.txt", suggestion.text()))
    if sglang is not None:
        files.append(("sglang.txt", sglang.text()))
    with writing_dir(directory, replace, "--export") as tmp:
        for name, text in files:
            (tmp / name).write_text(text, encoding="utf-8")
    return [Path(directory) / name for name, _ in files]


def _chosen(recommendation: dict[str, Any], profile: Profile, data: dict[str, Any]
            ) -> tuple[Profile, dict[str, Any], Candidate, int | None, bool] | None:
    """(profile, scenario, candidate, replicas, whether it meets the SLA) of a recommendation's dict
    (``Recommendation.to_dict``): its recommended candidate on the plan's replicas, else the closest on the
    replicas searched, else None. A summary that names its layout (``{"layout": {"profile": NAME}}``: the GPU type
    and TP it was simulated on) is exported on that profile, else on ``profile``; one that names the max batch size
    it simulated, with that size in the scenario."""
    best, closest = recommendation.get("recommended"), recommendation.get("closest")
    chosen = best or closest
    if chosen is None:
        return None
    layout = chosen.get("layout")
    if isinstance(layout, dict) and layout.get("profile") and layout.get("profile_key") != profile.key_str():
        profile = resolve_profile(str(layout["profile"]))
    if chosen.get("max_batch_size") is not None:
        data = with_fields(data, {"batching.max_batch_size": int(chosen["max_batch_size"])})
    candidate = by_names(profile, [chosen["candidate"]])[0]
    replicas = chosen["replicas"] if best is not None else chosen.get("searched_replicas")
    return profile, data, candidate, None if replicas is None else int(replicas), best is not None


def _labelled(out: S, meets: bool) -> S:
    return out if meets else dataclasses.replace(out, candidate=f"{out.candidate} (the closest; it MISSES the SLA)")


def recommended_suggestion(recommendation: dict[str, Any], profile: Profile, data: dict[str, Any]
                           ) -> VllmSuggestion | None:
    """The vLLM suggestion for a recommendation's dict (``Recommendation.to_dict``): its recommended candidate on
    the plan's replicas, else the closest on the replicas searched (labelled as missing the SLA), else None."""
    chosen = _chosen(recommendation, profile, data)
    if chosen is None:
        return None
    on, simulated, candidate, replicas, meets = chosen
    return _labelled(vllm_suggestion(on, simulated, candidate, replicas), meets)


def recommended_sglang(recommendation: dict[str, Any], profile: Profile, data: dict[str, Any]
                       ) -> SglangSuggestion | None:
    """The SGLang suggestion for the same candidate and replicas as ``recommended_suggestion``."""
    chosen = _chosen(recommendation, profile, data)
    if chosen is None:
        return None
    on, simulated, candidate, replicas, meets = chosen
    return _labelled(sglang_suggestion(on, simulated, candidate, replicas), meets)
