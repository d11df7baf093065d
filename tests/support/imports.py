"""The import graph of our packages, read from their source: what import-linter would check, and more.

Every import counts, also one inside a function or under `TYPE_CHECKING`, and `from pkg import mod`
counts as importing `pkg` (its `__init__`) as well as `pkg.mod`, since Python runs both and `pkg` must be far
enough initialised to hand `mod` over. `import pkg.mod` and `from pkg.mod import x` count as importing
`pkg.mod` only in `graph(...)`, as import-linter counts them; `graph(..., executed=True)` counts them as Python
executes them: `pkg/__init__` runs first (every parent package's does), so it is imported too. The package
rules and the cycle between packages are judged on that graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "mslite_contract": ROOT / "contract" / "mslite_contract",
    "mslite_triton": ROOT / "client" / "mslite_triton",
    "mslite_server": ROOT / "server" / "mslite_server",
    "mslite_gateway": ROOT / "server" / "mslite_gateway",
    "mslite_backend": ROOT / "backend" / "mslite" / "mslite_backend",
}


def modules(package: str, roots: dict[str, Path] | None = None) -> dict[str, Path]:
    """Dotted module name -> source file, for one of `roots` (default `PACKAGES`)."""
    root = (roots or PACKAGES)[package]
    found = {}
    for path in root.rglob("*.py"):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name `module` imports (for `from pkg import name`, `pkg` and `pkg.name`)."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = module.split(".") if is_package else module.split(".")[:-1]
            stem = node.module or ""
            if node.level:
                stem = ".".join(base[: len(base) - node.level + 1] + ([stem] if stem else []))
            targets = [stem, *(f"{stem}.{alias.name}" for alias in node.names)]
        else:
            continue
        names.update(targets)
    return names


def executed_names(module: str, path: Path) -> set[str]:
    """`imported_names` and every parent package of each: Python runs `a/__init__` before `a.b`, and so on."""
    return {".".join(parts[:i]) for name in imported_names(module, path) if name for parts in [name.split(".")]
            for i in range(1, len(parts) + 1)}  # fmt: skip


def graph(*packages: str, roots: dict[str, Path] | None = None, executed: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports (`executed`: as Python executes it, parents included)."""
    found: dict[str, Path] = {}
    for package in packages:
        found.update(modules(package, roots))
    names = executed_names if executed else imported_names
    return {m: (names(m, p) & found.keys()) - {m} for m, p in found.items()}


def package_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages its modules import."""
    tops: dict[str, set[str]] = {}
    for module, imported in edges.items():
        top = module.split(".")[0]
        tops.setdefault(top, set()).update(m.split(".")[0] for m in imported)
    return {top: found - {top} for top, found in tops.items()}


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(edges[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(edges.get(module, ()))
    return seen


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or not (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found
