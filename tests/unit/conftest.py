"""Unit tests import the backend's runtime (`mslite_backend`) and the test model zoo directly."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Triton puts backend/mslite on sys.path when it loads the backend; unit tests do the same.
for _path in (ROOT / "backend" / "mslite", ROOT / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
