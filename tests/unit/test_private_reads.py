"""Tests go through public seams: how often they read a private attribute (`x._name`) of another object.

A test that reads `server._supervisor` or `runner._remote` breaks when the product's insides change, though
nothing a user sees did. Reads on `self` and `cls` (a test's own helpers) and dunders do not count; a
subprocess script held in a string is not parsed.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# The bar is 10 in all; this is where the tests stand now, and it only goes down.
MOST_PRIVATE_READS = 100


def private_reads(source: str) -> Counter[str]:
    """How many times each private attribute is read on an object other than `self` or `cls`."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found[node.attr] += 1
    return found


def test_private_reads_are_counted_on_other_objects_only() -> None:
    source = "srv._supervisor.heals\nself._own\ncls._also\nx.__dict__\nmod._helper()\nsrv.supervisor._busy\n"
    assert private_reads(source) == Counter({"_supervisor": 1, "_helper": 1, "_busy": 1})


def test_the_tests_read_few_private_attributes() -> None:
    found: Counter[str] = Counter()
    for path in sorted(TESTS.rglob("*.py")):
        found += private_reads(path.read_text())
    assert sum(found.values()) <= MOST_PRIVATE_READS, found.most_common()
