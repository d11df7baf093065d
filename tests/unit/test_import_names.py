"""The backend's runtime has one import name, so one process holds one copy of its classes."""

from __future__ import annotations

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
