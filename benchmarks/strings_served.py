"""One request of many short strings through a real server: its time and the worker's peak memory per element.

`python benchmarks/strings_served.py [--elements 1000000] [--rounds 2]`, from a checkout's root

Starts the embedded server of the checkout it runs in (no gateway: its string-element bound would refuse
the request) with the string identity model on one CPU worker, warms it up, resets the worker's peak RSS
(`/proc/<pid>/clear_refs`), sends one HTTP request of `--elements` two-byte strings (binary data) and
checks every string that comes back. Each line: the request's wall time per element (client, Triton, the
stub's conversions and the worker's run together) and the worker's peak RSS above where it started.
It imports only the product and `tests.support`, so the same file measures an older checkout too:
`cd OLD_CHECKOUT && .venv/bin/python NEW_CHECKOUT/benchmarks/strings_served.py`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

sys.path.insert(0, os.getcwd())  # the checkout measured: its product and its tests.support

from mslite_triton.server import EmbeddedServer, ServerConfig  # noqa: E402
from mslite_triton.server.workers import workers_of  # noqa: E402
from tests.support import model_zoo  # noqa: E402
from tests.support.repository import MINIMAL, add_model  # noqa: E402


def _kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def measure(elements: int) -> str:
    """One server, one request of `elements` strings: the figures, as one line."""
    repo = Path(tempfile.mkdtemp(prefix="bench-strings-served-"))
    try:
        add_model(repo, "s", model_zoo.string_identity(), MINIMAL + "instance_group [ { kind: KIND_CPU, count: 1 } ]\n")
        with EmbeddedServer(ServerConfig(model_repository=repo, startup_timeout_s=240)) as srv:
            [pid] = [w.pid for w in workers_of(srv.process.pid) if w.instance == "s_0_0"]
            client = httpclient.InferenceServerClient(srv.http_url.split("://", 1)[1], network_timeout=600)
            sent = np.empty((1, elements), dtype=object)
            sent[0, :] = [bytes((97 + i % 26, 98)) for i in range(elements)]
            wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
            for data in (sent[:, :1], sent):
                request = httpclient.InferInput("INPUT0", list(data.shape), "BYTES")
                request.set_data_from_numpy(data, binary_data=True)
                if data is sent:  # the first was the warm-up
                    with open(f"/proc/{pid}/clear_refs", "w") as f:
                        f.write("5")  # the worker's peak RSS starts again from here
                    before = _kib(pid, "VmRSS:")
                    started = time.perf_counter()
                got = client.infer("s", [request], outputs=wanted).as_numpy("OUTPUT0")
            elapsed = time.perf_counter() - started
            peak = (_kib(pid, "VmHWM:") - before) * 1024
            client.close()
            assert got.shape == sent.shape and (got == sent).all()
            return (
                f"{elements:,} strings: {elapsed / elements * 1e6:.2f} us per element, worker peak "
                f"+{peak / 2**20:.0f} MiB ({peak / elements:.0f} bytes per element)"
            )
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def main() -> None:
    """Measure `--rounds` times, one server each."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    for r in range(a.rounds):
        print(f"{os.path.basename(os.getcwd())} round {r + 1}: {measure(a.elements)}", flush=True)


if __name__ == "__main__":
    main()
