"""What a stopped embedded server leaves behind in /dev/shm: its python backend's regions, its weights stores.

Both are named after the launcher (a prefix with its pid and a random part), so a launcher removes exactly
its own, once its tritonserver has exited. Triton's copies of uploaded models are `workers.py`'s.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

from mslite_triton_backend.mslite_backend.protocol import WEIGHTS_STORE_PREFIX


def remove_shm_regions(prefix: str) -> list[str]:
    """Remove every `/dev/shm` region whose name starts with `prefix`; returns the names removed."""
    removed = []
    for path in glob.glob(f"/dev/shm/{prefix}*"):
        try:
            os.unlink(path)
            removed.append(os.path.basename(path))
        except FileNotFoundError:
            pass
    return removed


def remove_weight_stores(owner: str) -> list[str]:
    """Remove the weights stores of launcher `owner` (see protocol.WEIGHTS_OWNER_ENV); returns their names."""
    removed = []
    for root in {"/dev/shm", tempfile.gettempdir()}:
        for path in glob.glob(os.path.join(root, f"{WEIGHTS_STORE_PREFIX}{owner}_*")):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(os.path.basename(path))
    return removed
