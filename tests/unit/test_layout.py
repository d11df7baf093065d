"""The test suite stands on its own: it imports nothing from `benchmarks/` and never edits `sys.path`.

The benchmarks run as modules (`python -m benchmarks.x` from the checkout), so they never edit it either.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
BENCHMARKS = TESTS.parent / "benchmarks"


def _imported_modules(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_tests_import_nothing_from_benchmarks() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        modules = _imported_modules(ast.parse(path.read_text()))
        if any(m == "benchmarks" or m.startswith("benchmarks.") for m in modules):
            offenders.append(str(path.relative_to(TESTS)))
    assert not offenders, f"move what they need into tests/support: {offenders}"


def test_tests_leave_sys_path_alone() -> None:
    # also in the scripts tests hand to a child interpreter (they get PYTHONPATH instead)
    here = Path(__file__).resolve()
    offenders = [
        str(p.relative_to(TESTS)) for p in sorted(TESTS.rglob("*.py")) if p != here and "sys.path." in p.read_text()
    ]
    assert not offenders, offenders


def test_benchmarks_leave_sys_path_alone() -> None:
    # child interpreters they start get PYTHONPATH instead
    scripts = sorted(BENCHMARKS.rglob("*.py"))
    offenders = [str(p.relative_to(BENCHMARKS)) for p in scripts if "sys.path." in p.read_text()]
    assert not offenders, f"run them as `python -m benchmarks.NAME`: {offenders}"
