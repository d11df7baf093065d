"""Where the tests read private attributes of our product objects: `obj._name` with `obj` not self/cls.

A test that reads `runner._pending` breaks when the product renames a field although nothing a user sees
changed, and it can pass while the behaviour a user sees is wrong. This scan counts such reads so that the
number can be kept small (tests/unit/test_private_reads.py holds the bar).

A name counts when product code defines it as a private attribute: `self._name = ...`, or a `_name` method or
class attribute in a class body, or a module-level `_name` (read as `module._name`). Dunder names do not count,
nor do private names that belong to other libraries only (a `_name` our product never defines).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "client", ROOT / "server", ROOT / "contract", ROOT / "backend"]
TESTS = ROOT / "tests"


@dataclass(frozen=True)
class Read:
    """One read of a private product attribute in a test."""

    path: Path
    line: int
    owner: str  # the expression read from, as written (`runner`, `server.supervisor`)
    name: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.owner}.{self.name}"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _product_files() -> Iterator[Path]:
    for root in PRODUCT:
        yield from (p for p in root.rglob("*.py") if ".venv" not in p.parts)


@functools.cache
def product_private_names() -> frozenset[str]:
    """Every private attribute name product code defines (on instances, classes or modules)."""
    names: set[str] = set()
    for path in _product_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
            elif isinstance(node, ast.ClassDef | ast.Module):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        names.add(item.name)
                    elif isinstance(item, ast.Assign):
                        names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
    return frozenset(name for name in names if _is_private(name))


def private_reads(tests: Path = TESTS) -> list[Read]:
    """Every `obj._name` read in `tests` where `_name` is a product private name and `obj` is not self/cls.

    The scanner itself and the fake `pb_utils` (which stands in for Triton's, not ours) are left out.
    """
    product = product_private_names()
    reads = []
    for path in sorted(tests.rglob("*.py")):
        if path.name in ("private_reads.py", "fake_pb_utils.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Attribute) and node.attr in product):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            reads.append(Read(path, node.lineno, ast.unparse(node.value), node.attr))
    return sorted(reads, key=lambda r: (str(r.path), r.line))


if __name__ == "__main__":
    found = private_reads()
    for read in found:
        print(read)
    print(f"{len(found)} reads of private product attributes in tests/")
