"""Scenarios as TOML-shaped dicts: the form planning varies (copy, change a field, rebuild).

``load_scenario_dict`` reads a file the way tripath.simulator.scenario.scenario.load_scenario does (a bare name
looks in data/scenarios/) but keeps the raw dict, so a variant is a dict edit followed by
``tripath.simulator.scenario.scenario.scenario_from_dict(variant, source)``, which validates it; ``source`` keeps
relative trace paths resolving against the original file's folder.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tripath.core.data_dirs import SCENARIOS_DIR
from tripath.core.errors import InputError
from tripath.simulator.scenario.scenario import Scenario, read_scenario_file, scenario_from_dict


def scenario_path(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    if not text.endswith(".toml") and "/" not in text and "\\" not in text:
        return SCENARIOS_DIR / f"{text}.toml"
    return Path(name_or_path)


def load_scenario_dict(name_or_path: str | Path) -> tuple[dict[str, Any], str]:
    """(the parsed TOML dict, its source path); validated once by building the Scenario."""
    path = scenario_path(name_or_path)
    source = str(path)
    data = read_scenario_file(path)
    scenario_from_dict(data, source)
    return data, source


def canonical(data: dict[str, Any]) -> str:
    """The dict as canonical JSON text (sorted keys): equal scenarios give equal text (and cache keys)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def get_field(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def with_fields(data: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy with each dotted field set (tables created as needed); None deletes the field."""
    out = copy.deepcopy(data)
    for dotted, value in changes.items():
        parts = dotted.split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = copy.deepcopy(value)
    return out


def refuse_closed_loop(data: dict[str, Any]) -> None:
    """Planning at a request rate cannot load a closed loop of users (its rate follows the simulated latency):
    one InputError naming the field, before any run."""
    arrival = (data.get("workload") or {}).get("arrival") or {}
    if arrival.get("kind") == "closed":
        raise InputError(None, "workload.arrival.kind",
                         "'closed' (a closed loop of users) has no request rate to plan at: sizing for a rate "
                         "(--qps) needs poisson, gamma, constant or trace arrivals")


def with_rate(data: dict[str, Any], rate_per_s: float) -> dict[str, Any]:
    """Poisson/gamma arrivals at a fixed rate (load_fraction dropped): every candidate sees the same load."""
    refuse_closed_loop(data)
    return with_fields(data, {"workload.arrival.load_fraction": None, "workload.arrival.rate_per_s": rate_per_s})


def with_requests(data: dict[str, Any], requests: int) -> dict[str, Any]:
    """A fixed request count (a duration dropped): the quick looks' override of a scenario's workload size."""
    return with_fields(data, {"workload.requests": requests, "workload.duration_s": None})


def build(data: dict[str, Any], source: str | None) -> Scenario:
    return scenario_from_dict(data, source)
