"""The packages import one another in one direction: no cycle between packages (the root package's
modules each counted on their own: everyone uses radiance.knobs, and radiance.stack reads the quant
methods' descriptions), and none between the modules of the kernels, whose registry imports no
table. Imports inside functions count: a late import hides a cycle, it does not remove it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"radiance": "radiance", "plugin": "radiance.plugin", "kernels": "radiance.kernels",
           "launcher": "radiance.launcher", "deploy": "radiance.deploy", "healthchecks": "radiance.healthchecks",
           "quantize": "radiance.quantize", "units": "radiance.units", "images": "radiance.images"}


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, package in FOLDERS.items():
        for p in (ROOT / folder).rglob("*.py"):
            rel = p.relative_to(ROOT / folder)
            if "tests" not in rel.parts and "testing" not in rel.parts:
                mods[".".join([package, *rel.with_suffix("").parts]).removesuffix(".__init__")] = p
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (`from pkg import submodule` is the submodule)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in mods] + ([node.module] if any(s not in mods for s in subs) else [])
            else:
                continue
            edges[m] |= {t for t in targets if t in mods and t != m}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[1] in FOLDERS and parts[1] != "radiance" else module


def test_no_cycle_between_packages():
    edges: dict[str, set[str]] = {}
    for m, targets in _imports(_modules()).items():
        edges.setdefault(_package(m), set()).update(_package(t) for t in targets if _package(t) != _package(m))
    assert _cycles(edges) == []


def test_no_cycle_between_the_kernels_modules():
    edges = {m: {t for t in ts if t.startswith("radiance.kernels")}
             for m, ts in _imports(_modules()).items() if m.startswith("radiance.kernels")}
    assert _cycles(edges) == []
    assert edges["radiance.kernels.registry"] <= {"radiance.kernels.methods"}, "the registry imports no table"
