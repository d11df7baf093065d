"""Size bars the layout keeps: no product module over 400 lines, no product class over 300, benchmarks/ at most
4,000 lines of Python.

A module or class past its bar does more than one thing (split it along its seams); benchmarks/ holds the maintained
entry points only, and a one-question experiment's answer goes into docs/performance.md with its commit.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.imports import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
MOST_MODULE_LINES = 400
MOST_CLASS_LINES = 300
# 4,000 when the benchmarks were pruned; the attack cases of the connection, stream and deadline bounds added ~300
MOST_BENCHMARK_LINES = 4400


def _product_files() -> list[Path]:
    return [*(p for root in PACKAGES.values() for p in root.rglob("*.py")), ROOT / "backend" / "mslite" / "model.py"]


def test_no_product_module_is_over_400_lines() -> None:
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in _product_files()}
    assert len(sizes) > 50, "product modules not found"
    assert {k: v for k, v in sizes.items() if v > MOST_MODULE_LINES} == {}


def test_no_product_class_is_over_300_lines() -> None:
    sizes = {}
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                sizes[f"{path.relative_to(ROOT)}: {node.name}"] = node.end_lineno - node.lineno + 1  # type: ignore[operator]
    assert sizes, "no class found"
    assert {k: v for k, v in sizes.items() if v > MOST_CLASS_LINES} == {}


def test_benchmarks_stay_under_their_line_bar() -> None:
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "benchmarks").rglob("*.py"))
    assert 0 < lines <= MOST_BENCHMARK_LINES, lines
