"""A program's own server (no URL): median predict latency, this tree against `--old DIR`, alternated (perf.md)."""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mslite_contract import settings
from tests.support.repository import GEN

PROGRAM = """import sys, time, numpy as np, mslite_triton as mslite
r = mslite.Model(); r.build_from_file(sys.argv[1], mslite.ModelType.MINDIR, mslite.Context())
i = r.get_inputs(); i[0].set_data_from_numpy(np.load(sys.argv[2])); n = int(sys.argv[3]); took = []
for k in range(n + 10):
    t = time.perf_counter(); r.predict(i); took.append(time.perf_counter() - t)
print("MEDIAN_US", sorted(took[10:])[n // 2] * 1e6)"""

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--old", type=Path, required=True, help="a checkout of the older tree (its client is put first)")
ap.add_argument("--rounds", type=int, default=4), ap.add_argument("--predicts", type=int, default=200)
args = ap.parse_args()
env = {k: v for k, v in os.environ.items() if k not in (settings.URL_ENV, settings.ADMIN_KEY_ENV)}
old = os.pathsep.join(str(args.old / p) for p in ("client", "contract", "server", "backend/mslite"))
with tempfile.TemporaryDirectory() as tmp:
    models = {"tiny": (GEN.build_tiny(), (1, 4)), "mobilenetv2": (GEN.build_mobilenetv2(), (1, 3, 224, 224))}
    for name, (proto, shape) in models.items():
        model, data = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}.npy"
        model.write_bytes(proto.SerializeToString())
        np.save(data, np.random.default_rng(0).standard_normal(shape, dtype=np.float32))
        seen: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for who in ("old", "new") if r % 2 == 0 else ("new", "old"):
                run_env = {**env, "PYTHONPATH": old} if who == "old" else env
                out = subprocess.run([sys.executable, "-c", PROGRAM, str(model), str(data), str(args.predicts)],
                                     env=run_env, capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
                if out.returncode:
                    sys.exit(f"{who} {name}: {out.stderr[-3000:]}")
                seen[who].append(float(out.stdout.split("MEDIAN_US")[1]))
        ratios = [n / o for n, o in zip(seen["new"], seen["old"], strict=True)]
        print(f"{name}: old {np.median(seen['old']):.0f} us, new {np.median(seen['new']):.0f} us, "
              f"new/old {np.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); "
              f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
