"""How long converting a MindIR MobileNetV2 to ONNX takes, and its peak memory (the child process's).

Builds a MobileNetV2 (1.0, 224 x 224, random weights) in MindSpore, exports it as MindIR, converts it
the way the server does (`mslite_contract.mindir.run_converter`: a child process) --rounds times, and
compares ONNX Runtime's outputs with MindSpore's on a batch of 4. Needs the [mindir] extra.

    .venv/bin/python -m benchmarks.mindir_conversion [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# MindSpore compiles networks from a source file, and must be imported before anything loads protobuf:
# the network is exported in a child process, from this text.
EXPORT = r"""
import sys
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor

def conv_bn(cin, cout, k, stride, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, pad_mode="pad", padding=k // 2, group=groups, has_bias=False),
              nn.BatchNorm2d(cout)]
    return nn.SequentialCell(layers + ([nn.ReLU6()] if act else []))

class Inverted(nn.Cell):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn(cin, hidden, 1, 1)] if expand != 1 else []
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, 1, act=False)]
        self.body = nn.SequentialCell(layers)
        self.residual = stride == 1 and cin == cout

    def construct(self, x):
        return x + self.body(x) if self.residual else self.body(x)

class MobileNetV2(nn.Cell):
    def __init__(self, classes=1000):
        super().__init__()
        settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                    (6, 320, 1, 1)]
        layers, cin = [conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in settings:
            for i in range(n):
                layers.append(Inverted(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, 1280, 1, 1))
        self.features = nn.SequentialCell(layers)
        self.mean = ops.ReduceMean(keep_dims=False)
        self.head = nn.Dense(1280, classes)

    def construct(self, x):
        return self.head(self.mean(self.features(x), (2, 3)))

out = sys.argv[1]
net = MobileNetV2()
net.set_train(False)
ms.export(net, Tensor(np.zeros((1, 3, 224, 224), np.float32)), file_name=f"{out}/mobilenetv2", file_format="MINDIR")
x = np.random.default_rng(0).random((4, 3, 224, 224), np.float32)
np.savez(f"{out}/reference.npz", x=x, y=net(Tensor(x)).asnumpy())
"""


ROUND = r"""
import json, resource, sys, time
from mslite_contract import mindir
start = time.perf_counter()
mindir.run_converter(sys.argv[1], sys.argv[2])
print(json.dumps([time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import numpy as np
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="mindir-bench-") as tmp:
        script = Path(tmp, "export.py")
        script.write_text(EXPORT)
        env = {**os.environ, "GLOG_v": "3"}
        subprocess.run([sys.executable, str(script), tmp], cwd=tmp, check=True, env=env, timeout=600)
        source = Path(tmp, "mobilenetv2.mindir")
        times, peaks = [], []
        for i in range(args.rounds):
            target = Path(tmp, f"round{i}", "model.onnx")
            target.parent.mkdir()
            # one process per round, which runs the server's conversion (itself a child): the peak memory
            # reported is that child's alone
            probe = subprocess.run(
                [sys.executable, "-c", ROUND, str(source), str(target)],
                env={**os.environ, "PYTHONPATH": str(ROOT / "backend" / "mslite")},  # the backend as served
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            seconds, peak_kib = json.loads(probe.stdout)
            times.append(seconds)
            peaks.append(peak_kib / 1024)
        reference = np.load(Path(tmp, "reference.npz"))
        session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
        got = session.run(None, {session.get_inputs()[0].name: reference["x"]})[0]
        result = {
            "model": "MobileNetV2 1.0 224 (random weights)",
            "mindir_mib": round(source.stat().st_size / 2**20, 1),
            "seconds": [round(t, 2) for t in times],
            "peak_rss_mib": [round(p) for p in peaks],
            "max_abs_diff_vs_mindspore": float(np.abs(got - reference["y"]).max()),
            "onnx_inputs": [(i.name, i.type, i.shape) for i in session.get_inputs()],
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg()[0],
        }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
