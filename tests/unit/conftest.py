"""Unit tests import the backend's runtime (`mslite_backend`) directly, as Triton does."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Triton puts backend/mslite on sys.path when it loads the backend; unit tests do the same.
if str(ROOT / "backend" / "mslite") not in sys.path:
    sys.path.insert(0, str(ROOT / "backend" / "mslite"))
