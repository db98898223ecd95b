"""The import graph of the production package: layers point one way and no modules import in a circle.

Read with ast from tripath/**.py, every import statement counted: at module level, inside a function (it
still makes the importer depend on the module) and under ``if TYPE_CHECKING:`` (two modules that need each
other's types are one concept in two places, even if the circle never runs).

The same graph folded onto sub-packages (each module counted in the package folder it sits in) must be acyclic
too: two sibling folders that import each other (``engine.kv`` <-> ``engine.tiered``) are one layer split in two,
even where no single module circles back. A package and the folders inside it may import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tripath"

# The tripath packages each package may import besides itself (docs/architecture.md).
_BELOW_PLANNING = {"core", "profile", "simulator", "planning"}
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "profile": {"core"},
    "simulator": {"core", "profile"},
    "planning": {"core", "profile", "simulator"},
    "app": _BELOW_PLANNING,
    "cli": _BELOW_PLANNING | {"engine", "training", "calibrate", "fidelity"},
    "engine": {"core"},
    "training": {"core", "engine"},
    "calibrate": {"core", "profile", "engine", "training"},
    "fidelity": {"core", "profile", "simulator", "engine"},
}
# Packages the analytical side (and what it stands on) must run without: no torch.
NO_TORCH = {"core", "profile", "simulator", "planning", "app"}
TORCH = {"torch", "safetensors"}


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules it imports (a submodule where ``from package import submodule``, else the
    module; external modules by their full dotted name)."""
    files = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = {f"{source}.{a.name}" if f"{source}.{a.name}" in files else source for a in node.names}
            else:
                continue
            graph[mod] |= targets
    return graph


def internal(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between tripath's own modules only."""
    return {mod: targets & graph.keys() for mod, targets in graph.items()}


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, targets in sorted(graph.items()):
        own = package_of(mod)
        for target in sorted(targets):
            top = target.split(".")[0]
            if top == "tripath":
                other = package_of(target)
                if other and other != own and own in ALLOWED and other not in ALLOWED[own]:
                    bad.append(f"{mod} -> {target}")
            elif top in TORCH and own in NO_TORCH:
                bad.append(f"{mod} -> {target}")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted, one cycle per component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def packages_in(graph: dict[str, set[str]]) -> set[str]:
    """The modules that are packages (some other module's name starts with theirs and a dot)."""
    names = sorted(graph)
    return {a for a, b in zip(names, names[1:], strict=False) if b.startswith(a + ".")} | {
        m.rsplit(".", 1)[0] for m in names if "." in m}


def folder_of(module: str, packages: set[str]) -> str:
    """The package folder a module sits in: a package is its own, a plain module its parent's."""
    return module if module in packages else module.rsplit(".", 1)[0]


def subpackage_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the packages its modules import, leaving out a package's own ancestors and descendants (an
    ``__init__`` re-exporting its folder, a sub-folder using its parent's shared modules)."""
    packages = packages_in(graph)
    folded: dict[str, set[str]] = {p: set() for p in packages}
    for mod, targets in graph.items():
        a = folder_of(mod, packages)
        for target in targets:
            b = folder_of(target, packages)
            if not (a == b or a.startswith(b + ".") or b.startswith(a + ".")):
                folded[a].add(b)
    return folded


def _cycle_path(graph: dict[str, set[str]], component: list[str]) -> str:
    """One circle through the component's first module, as ``a -> b -> a``."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return " -> ".join([*paths[v], start])
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no circle through {start}")


def test_the_reader_sees_relative_function_level_and_guarded_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "tripath"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from . import y\n")
    (pkg / "a" / "y.py").write_text("def f():\n    from tripath.a.x import f\n")
    (pkg / "a" / "z.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
                                    "    from tripath.a import x\n")
    (pkg / "a" / "w.py").write_text("from tripath.a.z import q\n")
    graph = import_graph(pkg)
    assert graph["tripath.a.x"] == {"tripath.a.y"}
    assert graph["tripath.a.y"] == {"tripath.a.x"}
    assert graph["tripath.a.z"] == {"typing", "torch", "tripath.a.x"}
    assert graph["tripath.a.w"] == {"tripath.a.z"}
    assert internal(graph)["tripath.a.z"] == {"tripath.a.x"}
    assert cycles(internal(graph)) == [["tripath.a.x", "tripath.a.y"]]
    assert _cycle_path(internal(graph), ["tripath.a.x", "tripath.a.y"]) == "tripath.a.x -> tripath.a.y -> tripath.a.x"


def test_sibling_packages_importing_each_other_are_a_cycle_without_a_module_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "tripath"
    for folder in ("e", "e/kv", "e/tiered"):
        (pkg / folder).mkdir(parents=True, exist_ok=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "e" / "kv" / "backend.py").write_text("from tripath.e.tiered.store import S\n")
    (pkg / "e" / "kv" / "paged.py").write_text("X = 1\n")
    (pkg / "e" / "tiered" / "store.py").write_text("from tripath.e.kv.paged import X\nS = X\n")
    (pkg / "e" / "engine.py").write_text("from tripath.e.kv import backend\n")  # parent -> child: allowed
    (pkg / "e" / "kv" / "cfg.py").write_text("from tripath.e import engine\n")  # child -> parent: allowed
    graph = internal(import_graph(pkg))
    assert cycles(graph) == []
    folded = subpackage_graph(graph)
    assert folded["tripath.e.kv"] == {"tripath.e.tiered"} and folded["tripath.e.tiered"] == {"tripath.e.kv"}
    assert folded["tripath.e"] == set()
    assert cycles(folded) == [["tripath.e.kv", "tripath.e.tiered"]]


def test_layer_rules_flag_upward_and_torch_imports() -> None:
    graph = {
        "tripath.simulator.costs": {"tripath.profile.profile", "tripath.engine.engine", "numpy"},
        "tripath.profile.profile": {"torch.nn"},
        "tripath.engine.serving": {"tripath.simulator.scenario.scenario", "torch"},
        "tripath.cli.main": {"tripath.calibrate.commands", "tripath.engine.serving"},
        "tripath.planning.sweep": {"tripath.calibrate.fit"},
    }
    assert layer_violations(graph) == [
        "tripath.engine.serving -> tripath.simulator.scenario.scenario",
        "tripath.planning.sweep -> tripath.calibrate.fit",
        "tripath.profile.profile -> torch.nn",
        "tripath.simulator.costs -> tripath.engine.engine",
    ]


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(ALLOWED)


def test_no_import_crosses_the_layers() -> None:
    bad = layer_violations(import_graph())
    assert not bad, "layer violations (importer -> imported):\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    graph = internal(import_graph())
    circles = [f"{_cycle_path(graph, c)}  (all in the circle: {', '.join(c)})" for c in cycles(graph)]
    assert not circles, "import cycles:\n" + "\n".join(circles)


def test_no_import_cycles_between_subpackages() -> None:
    folded = subpackage_graph(internal(import_graph()))
    circles = [f"{_cycle_path(folded, c)}  (all in the circle: {', '.join(c)})" for c in cycles(folded)]
    assert not circles, "sub-package import cycles:\n" + "\n".join(circles)
