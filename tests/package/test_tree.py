"""The test suite mirrors the package: every test module lives in tests/PART/, where PART is a
subpackage or top-level module of rnnlens (tests/cells/ for rnnlens.cells, tests/config/ for
rnnlens/config.py), or in tests/package/ for the package as a whole; each of those folders is
a Python package, so equal file names in two folders do not collide. No test module imports
another test module or conftest: shared helpers come from tests/support.py, fixtures from
conftest.py."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

TESTS = REPO / "tests"
PACKAGE = REPO / "rnnlens"
WHOLE = "package"               # tests of the package as a whole: the README, its layers, this tree


def package_parts() -> set[str]:
    """The names of rnnlens's subpackages and top-level modules."""
    parts = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    return parts | {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("__")}


def collected_files() -> list[Path]:
    """Every file pytest collects tests from (its default patterns)."""
    return sorted({*TESTS.rglob("test_*.py"), *TESTS.rglob("*_test.py")})


def test_every_test_module_lives_in_a_folder_named_after_a_part_of_the_package():
    allowed = package_parts() | {WHOLE}
    files = collected_files()
    assert len(files) > 60
    misplaced = [str(p.relative_to(TESTS)) for p in files
                 if len(p.relative_to(TESTS).parts) != 2 or p.parent.name not in allowed]
    assert not misplaced, f"move these to tests/PART/, PART one of {sorted(allowed)}: {misplaced}"
    folders = {TESTS, *(p.parent for p in files)}
    not_packages = sorted(str(d.relative_to(REPO)) for d in folders if not (d / "__init__.py").is_file())
    assert not not_packages, f"give these folders an empty __init__.py: {not_packages}"


def _is_test_module(dotted: str) -> bool:
    return any(part == "conftest" or part.startswith("test_") for part in dotted.split("."))


def forbidden_imports(source: str, package: list[str]) -> list[tuple[int, str]]:
    """(line, name) of each import statement in `source`, a module of the package `package`
    (["tests", "cells"]), that names conftest or a test module; relative imports resolved."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            names = [base]
            if node.level or base.split(".")[0] == "tests":      # `from tests.cells import test_x`
                names += [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found += [(node.lineno, n) for n in names if _is_test_module(n)][:1]
    return found


def test_no_test_module_imports_another_test_module_or_conftest():
    # the check sees the ways a test module can be reached
    bad = ("from conftest import max_diff\nimport test_cli\nfrom test_cells import E\n"
           "from tests.cells.test_cells import make\nfrom tests.cells import test_cells\n"
           "from . import test_rational\nfrom ..conftest import shared_data\n")
    assert len(forbidden_imports(bad, ["tests", "cells"])) == 7
    assert not forbidden_imports("from tests.support import E, max_diff\nfrom ..support import REPO\n"
                                   "from rnnlens.cli import main\n", ["tests", "cells"])

    found = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(REPO)
        package = list(rel.parent.parts)
        found += [f"{rel}:{line}: {name}"
                  for line, name in forbidden_imports(path.read_text(encoding="utf-8"), package)]
    assert not found, "import these from tests/support.py (or make them fixtures in conftest.py):\n" + "\n".join(found)
