"""The `execute-deadline` row of `python -m benchmarks.chaos costs`, and the figures behind the deadline's default.

Row: a keyless client sends a request of 2**40 loop iterations to `spin` (one worker, `execute_deadline_s` 1)
every second for 30 s, each on a connection of its own, while another client predicts `tiny` in a loop. Bar:
the other client's requests all answered, the slowest within 2 s; tritonserver not restarted (workers may be
ended: counted); gateway and tritonserver RSS growth under 256 MiB each.

Default: `python -m benchmarks.chaos_deadline [--hogs 0,2,4]`: a MobileNetV2 worker (model.py on the unit
tests' stand-in pb_utils) runs `execute`s of 1 and 64 requests beside processes that each keep a core busy;
printed: the slowest of 5 as a multiple of a first run on a fresh session (what the load's warm-up costs).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from benchmarks.chaos_costs import _Other, _rss_mib
from mslite_contract.protocol import DEADLINE_PASSED
from mslite_server import LocalServer
from mslite_server.workers import workers_of
from tests.support import fake_pb_utils as pb

SPIN = 'instance_group [{kind: KIND_CPU, count: 1}]\nparameters {key: "execute_deadline_s" value {string_value: "1"}}'


def _input(name: str, value: np.ndarray, dtype: str) -> httpclient.InferInput:
    inp = httpclient.InferInput(name, list(value.shape), dtype)
    inp.set_data_from_numpy(value)
    return inp


def execute_deadline(server: LocalServer, seconds: int = 30) -> str:
    """The row; the server's repository has `spin` (the zoo's spin model, config `SPIN`)."""
    assert server.process is not None and server.gateway is not None and server.supervisor is not None
    pid, gateway, heals = server.process.pid, server.gateway.pid or 0, len(server.supervisor.heals)
    spins, rss = {w.pid for w in workers_of(pid) if w.model == "spin"}, (_rss_mib([pid]), _rss_mib([gateway]))
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=30)
    x, outcomes = np.arange(4, dtype=np.float32).reshape(1, 4), []

    def attack() -> None:
        attacker = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", network_timeout=120)
        try:
            attacker.infer("spin", [_input("n", np.array([2**40], np.int64), "INT64")])
            outcomes.append("answered")
        except Exception as e:  # noqa: BLE001 - the deadline's error is the expected outcome
            outcomes.append("deadline" if DEADLINE_PASSED in str(e) else str(e)[:80])

    with _Other(
        lambda: client.infer("tiny", [_input("x", x, "FP32")]).as_numpy("y").tolist() == [[1, 3, 5, 7]]
    ) as other:
        threads = [threading.Thread(target=attack, daemon=True) for _ in range(seconds)]
        for t in threads:
            t.start()
            time.sleep(1)
        for t in threads:
            t.join(timeout=300)
    ended = len(spins - {w.pid for w in workers_of(pid) if w.model == "spin"})
    return (
        f"execute-deadline: {len(threads)} keyless requests of 2**40 iterations to spin, one a second: "
        f"{outcomes.count('deadline')} answered the deadline's error, others {sorted(set(outcomes) - {'deadline'})}; "
        f"the other client's predicts of tiny: {other.ok} ok, {other.failed} failed (bar: 0), slowest "
        f"{max(other.waits):.2f} s (bar: 2 s); spin workers ended {ended}, heals "
        f"{[h.what for h in server.supervisor.heals[heals:]]}, tritonserver restarted: "
        f"{server.process is None or server.process.pid != pid} (bar: False); RSS growth tritonserver "
        f"{_rss_mib([pid]) - rss[0]:+.0f} MiB, gateway {_rss_mib([gateway]) - rss[1]:+.0f} MiB (bar: < 256 each)"
    )


def _hog() -> None:
    while True:
        pass


def default_figures(hogs: list[int], model: str = "model_repository/mobilenetv2/1/model.onnx") -> None:
    """Print the slowest `execute` of 1 and 64 requests as a multiple of the warm-up, beside each count of hogs."""
    import onnxruntime as ort

    from mslite_backend.session import session_options

    worker, repo = pb.install().TritonPythonModel(), Path(tempfile.mkdtemp(prefix="deadline-"))
    (repo / "1").mkdir()
    (repo / "1" / "model.onnx").symlink_to(Path(model).resolve())
    inputs = [{"name": "input", "data_type": "TYPE_FP32", "dims": [3, 224, 224]}]
    group = [{"name": "m_0", "count": 1, "kind": "KIND_CPU"}]
    config = {"name": "m", "max_batch_size": 64, "input": inputs, "output": [], "instance_group": group}
    args = {"model_instance_name": "m_0_0", "model_instance_kind": "CPU", "model_instance_device_id": "0"}
    worker.initialize({"model_config": json.dumps(config), "model_repository": str(repo), "model_version": "1", **args})
    feeds = {"input": np.random.default_rng(0).random((1, 3, 224, 224), np.float32)}
    session = ort.InferenceSession(model, session_options(worker.runtime.cfg), providers=["CPUExecutionProvider"])
    started = time.perf_counter()
    session.run(None, feeds)
    warm_s = time.perf_counter() - started
    for n in hogs:
        procs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(n)]
        for p in procs:
            p.start()
        row = []
        for size in (1, 64):
            took = []
            for _ in range(5):
                started = time.perf_counter()
                worker.execute([pb.InferenceRequest(dict(feeds), "{}", ()) for _ in range(size)])
                took.append(time.perf_counter() - started)
            row.append(f"{size} request(s): slowest {max(took):.2f} s = {max(took) / warm_s:.0f} x the warm-up")
        for p in procs:
            p.terminate()
        print(f"warm-up {warm_s * 1000:.0f} ms; {n} hogs, load {os.getloadavg()[0]:.1f}: {'; '.join(row)}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hogs", default="0,2,4")
    default_figures([int(h) for h in parser.parse_args().hogs.split(",")])
