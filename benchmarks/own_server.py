"""A program's own server, as the Python client starts it: predict latency, this tree against an older one.

Each round runs one program per contender, alternating: it starts its own server (no URL), builds the model,
warms up, then times `--predicts` predicts one after another and prints their median in microseconds. The
contender `old` runs the tree at `--old` (a checkout of the commit to compare against, e.g. a worktree at
5ffb74f, whose client started tritonserver in-process and spoke to it directly), `new` this tree (the child
`mslite-triton serve --private`, its gateway in between, the key sent with every request).

    python -m benchmarks.own_server --old /path/to/old/checkout --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mslite_contract import settings
from tests.support.repository import GEN

PROGRAM = """
import sys, time, numpy as np
import mslite_triton as mslite
model, n = sys.argv[1], int(sys.argv[2])
r = mslite.Model(); r.build_from_file(model, mslite.ModelType.MINDIR, mslite.Context())
inputs = r.get_inputs()
shape = [int(d) for d in sys.argv[4].split(",")]
inputs[0].set_data_from_numpy(np.fromfile(sys.argv[3], np.float32).reshape(shape))
for _ in range(10):
    r.predict(inputs)
took = []
for _ in range(n):
    t = time.perf_counter(); r.predict(inputs); took.append(time.perf_counter() - t)
print("MEDIAN_US", sorted(took)[n // 2] * 1e6, flush=True)
"""


def _paths(old: Path) -> str:
    return os.pathsep.join(str(old / p) for p in ("client", "contract", "server", "backend/mslite"))


def run_once(contender: str, old: Path, model: Path, data: Path, shape: tuple[int, ...], predicts: int) -> float:
    """One program's median predict latency (us) against its own server."""
    env = {k: v for k, v in os.environ.items() if k not in (settings.URL_ENV, settings.ADMIN_KEY_ENV)}
    if contender == "old":
        env["PYTHONPATH"] = _paths(old)
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(model), str(predicts), str(data), ",".join(map(str, shape))],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if out.returncode != 0 or "MEDIAN_US" not in out.stdout:
        raise SystemExit(f"{contender}: {out.stderr[-2000:]}")
    return float(out.stdout.split("MEDIAN_US")[1].split()[0])


def main() -> None:
    """Alternate the contenders round by round; print each model's medians and the new/old ratio."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, required=True, help="a checkout of the older tree")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--predicts", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "tiny": (GEN.build_tiny(), (1, 4)),
            "mobilenetv2": (GEN.build_mobilenetv2(), (1, 3, 224, 224)),
        }
        for name, (proto, shape) in models.items():
            model, data = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}.bin"
            model.write_bytes(proto.SerializeToString())
            np.random.default_rng(0).standard_normal(shape, dtype=np.float32).tofile(data)
            seen: dict[str, list[float]] = {"old": [], "new": []}
            for round_ in range(args.rounds):
                order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
                for contender in order:
                    seen[contender].append(run_once(contender, args.old, model, data, shape, args.predicts))
            ratios = [n / o for n, o in zip(seen["new"], seen["old"], strict=True)]
            print(
                f"{name}: old median {statistics.median(seen['old']):.0f} us, new {statistics.median(seen['new']):.0f}"
                f" us; new/old {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); "
                f"load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
