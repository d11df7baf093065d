"""What one string element costs a worker: time and peak memory of a run of many short strings.

`python -m benchmarks.strings_cost [--elements 1000000] [--rounds 3] [--baseline REV]`

Each measurement is a fresh process that opens the string identity model the way a CPU worker does (ORT's
C API session of `ort_c_strings`), builds one request of `--elements` two-byte strings as Triton's stub
hands it over (an object array of `bytes`), resets its peak RSS (`/proc/self/clear_refs`), runs the
request once and reports the run's time and the peak RSS above where it started, each per element.
`--baseline REV` adds the same run through backend/mslite as it was at git revision REV; the variants
alternate, the order reversed every other round, and the last lines give each one's medians. Not
measured here: Triton's own (de)serialization of BYTES tensors in the stub, the same for every variant.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .worker_cpu import backend_at

ROOT = Path(__file__).resolve().parent.parent

# Run in the child, with the backend folder first on its path: prints one JSON line
_CHILD = """
import json, os, sys, time
import numpy as np
from mslite_backend.ort_c_strings import CStringSession
from mslite_backend.session import SessionSettings
from tests.support import model_zoo

def rss_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

n = int(sys.argv[1])
session = CStringSession(model_zoo.string_identity().SerializeToString(), SessionSettings(1, 1, False, True, 99, ()))
sent = np.empty((n, 1), dtype=object)
sent[:, 0] = [bytes((97 + i % 26, 98)) for i in range(n)]
session.run(["OUTPUT0"], {"INPUT0": sent[:2]})  # the first run's one-time costs stay out of the figure
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak RSS starts again from here
before = rss_kib("VmRSS:")
start = time.perf_counter()
got = session.run(["OUTPUT0"], {"INPUT0": sent})[0]
elapsed = time.perf_counter() - start
peak = rss_kib("VmHWM:")  # before the check below, whose lists would count
assert got.shape == sent.shape and all(a == b for a, b in zip(got.flat, sent.flat))
print(json.dumps({"us": elapsed / n * 1e6, "bytes": (peak - before) * 1024 / n}))
"""


def measure(backend: Path, elements: int) -> dict[str, float]:
    """One run of `elements` strings through the C API path of the backend folder `backend`, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(elements)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(backend), str(ROOT)])},  # that backend first
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    """Measure each variant `--rounds` times, alternating, and print every run and the medians."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--baseline", help="a git revision: also measure backend/mslite as it was there")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-strings-") as tmp:
        variants = {"now": ROOT / "backend" / "mslite"}
        if a.baseline:
            variants["before"] = backend_at(a.baseline, Path(tmp))
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for r in range(a.rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for name in order:
                got = measure(variants[name], a.elements)
                runs[name].append(got)
                print(f"round {r + 1} {name}: {got['us']:.2f} us and {got['bytes']:.0f} bytes per element", flush=True)
    for name, got in runs.items():
        us = statistics.median(g["us"] for g in got)
        peak = statistics.median(g["bytes"] for g in got)
        print(f"{name}: median {us:.2f} us and {peak:.0f} bytes of peak RSS per element ({a.elements:,} strings)")


if __name__ == "__main__":
    main()
