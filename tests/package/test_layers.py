"""The package's layers (../shared/DESIGN.md, "Layers"): every import in rnnlens/, at module
level or inside a function, points down or sideways, and no modules import each other in a
cycle. No exceptions list."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

PACKAGE = REPO / "rnnlens"

# top-level module or subpackage of rnnlens -> its layer (higher may import lower)
LAYERS = {
    "errors": 0, "version": 0, "config": 0, "metrics": 0, "argtypes": 0, "outfiles": 0,
    "ops": 1,
    "cells": 2, "data": 2,
    "heads": 3, "encoder": 3, "models": 3,
    "analysis": 4, "viz": 4,
    "train": 5,
    "app": 6, "repro": 6, "demo": 6, "bench": 6,
    "cli": 7, "__main__": 7,
}
TOP = 8          # the package's own __init__ (it re-exports and imports the registries)


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return TOP
    assert parts[1] in LAYERS, f"{module}: give rnnlens.{parts[1]} a layer in tests/package/test_layers.py"
    return LAYERS[parts[1]]


def _is_module(name: str) -> bool:
    p = PACKAGE.parent / name.replace(".", "/")
    return p.with_suffix(".py").is_file() or p.is_dir()


def imports() -> dict[str, set[tuple[str, int]]]:
    """module -> {(imported rnnlens module, line)}, from every import statement anywhere."""
    out: dict[str, set[tuple[str, int]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        mod = _module(path)
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        found = out.setdefault(mod, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "rnnlens":
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add((sub if _is_module(sub) else target, node.lineno))
            elif isinstance(node, ast.Import):
                found |= {(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "rnnlens"}
        found.discard((mod, 0))
    return out


def test_every_import_points_down_or_sideways():
    bad = [f"{mod}:{line} imports {target} (layer {_layer(target)} above {_layer(mod)})"
           for mod, targets in imports().items() for target, line in sorted(targets)
           if target != mod and _layer(target) > _layer(mod)]
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = {m: {t for t, _ in ts if t != m} for m, ts in imports().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles = []

    def visit(v: str) -> None:          # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_walk_sees_imports_inside_functions():
    graph = imports()
    assert ("rnnlens.config", 0) not in graph["rnnlens.cells"]
    inside = {t for t, _ in graph["rnnlens.repro.records"]}
    assert "rnnlens.version" in inside          # `from ..version import __version__` inside environment()
