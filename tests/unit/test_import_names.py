"""One import name per package (one copy of its classes per process), and one name per thing imported."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from collections import defaultdict
from pathlib import Path

import mslite_backend
import mslite_contract
import mslite_gateway
import mslite_server
import mslite_triton

RUNTIME_DIR = Path(mslite_backend.__file__).resolve().parent


def _import_all(package: object) -> None:
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):  # type: ignore[attr-defined]
        importlib.import_module(info.name)


def test_runtime_is_imported_under_one_name_only() -> None:
    # Everything the client, launcher, gateway and contract import, and the backend's own modules.
    for package in (mslite_contract, mslite_triton, mslite_server, mslite_gateway, mslite_backend):
        _import_all(package)
    names: dict[Path, list[str]] = defaultdict(list)
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().is_relative_to(RUNTIME_DIR):
            names[Path(file).resolve()].append(name)
    assert names, "no module of the backend's runtime was imported"
    doubles = {str(f): n for f, n in names.items() if len(n) > 1}
    assert not doubles, f"one file imported under several names: {doubles}"
    assert all(n[0].split(".")[0] == "mslite_backend" for n in names.values()), dict(names)


OURS = ("mslite_triton", "mslite_server", "mslite_gateway", "mslite_contract", "mslite_backend")
PRODUCT = [
    Path(p.__file__).resolve().parent
    for p in (mslite_triton, mslite_server, mslite_gateway, mslite_contract, mslite_backend)
]
KNOWN_RENAMES: set[str] = set()  # none may be added


def test_our_names_are_imported_under_their_own_names() -> None:
    """No `import x as y` of a name of ours: one name per constant, module and function (third parties' may)."""
    renames = set()
    for root in PRODUCT:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(OURS)):
                    names = node.names
                elif isinstance(node, ast.Import):
                    names = [a for a in node.names if a.name.startswith(OURS)]
                else:
                    continue
                renames |= {f"{path.name}: {a.name} as {a.asname}" for a in names if a.asname not in (None, a.name)}
    assert renames <= KNOWN_RENAMES, sorted(renames - KNOWN_RENAMES)
