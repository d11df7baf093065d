"""Where the tests reach into our products' privates: `obj._name` reads (obj not self/cls), and imports of private
names or from private modules (`from mslite_triton._transport import Transport`, `from mslite_server.tune import
_choose`).

A test that reads `runner._pending` breaks when the product renames a field although nothing a user sees
changed, and it can pass while the behaviour a user sees is wrong. An import of a private name (or of a name from
a private module) binds the test the same way. This scan counts both so that the number can be kept small
(tests/unit/test_private_reads.py holds the bar and the list).

A name counts when product code defines it as a private attribute: `self._name = ...`, or a `_name` method or
class attribute in a class body, or a module-level `_name` (read as `module._name`). Dunder names do not count,
nor do private names that belong to other libraries only (a `_name` our product never defines). An import counts
once per name it binds, when the name is private or a part of the module's dotted path is (for our packages).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "client", ROOT / "server", ROOT / "contract", ROOT / "backend"]
# the top-level modules of our products a test may import (`model` is the backend's Triton adapter)
OURS = ("mslite_contract", "mslite_triton", "mslite_server", "mslite_gateway", "mslite_backend", "model")
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

    @property
    def key(self) -> str:
        """Where and what, without the line: stable while the test file changes around it."""
        return f"{self.path.relative_to(ROOT).as_posix()}: {self.owner}.{self.name}"


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


def _private_module(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in OURS and any(_is_private(part) for part in parts)


def _imports(node: ast.AST, path: Path) -> Iterator[Read]:
    """The private names an import statement binds (see the module's docstring)."""
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        if node.module.split(".")[0] not in OURS:
            return
        for alias in node.names:
            if _is_private(alias.name) or _private_module(node.module):
                yield Read(path, node.lineno, node.module, alias.name)
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if _private_module(alias.name):
                module, _, name = alias.name.rpartition(".")
                yield Read(path, node.lineno, module, name)


def private_reads(tests: Path = TESTS) -> list[Read]:
    """Every `obj._name` read in `tests` where `_name` is a product private name and `obj` is not self/cls, and
    every name a test imports that is private or comes from a private module of ours.

    The scanner itself and the fake `pb_utils` (which stands in for Triton's, not ours) are left out.
    """
    product = product_private_names()
    reads = []
    for path in sorted(tests.rglob("*.py")):
        if path.name in ("private_reads.py", "fake_pb_utils.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            reads += _imports(node, path)
            if not (isinstance(node, ast.Attribute) and node.attr in product):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            reads.append(Read(path, node.lineno, ast.unparse(node.value), node.attr))
    return sorted(reads, key=lambda r: (str(r.path), r.line, r.name))


if __name__ == "__main__":
    found = private_reads()
    for read in found:
        print(read)
    print(f"{len(found)} reads and imports of private product names in tests/")
