"""One request of many short strings through a real server: its time and the worker's peak memory per element.

`python -m benchmarks.strings_served [--elements 1000000] [--rounds 2] [--against OTHER_CHECKOUT]`

Each measurement is a child interpreter of a checkout (its `.venv`, its product, its `tests.support`): it
starts that checkout's `LocalServer` (no gateway: its string-element bound would refuse the request)
with the string identity model on one CPU worker, warms it up, resets the worker's peak RSS
(`/proc/<pid>/clear_refs`), sends one HTTP request of `--elements` two-byte strings (binary data) and
checks every string that comes back. Each line: the request's wall time per element (client, Triton, the
stub's conversions and the worker's run together) and the worker's peak RSS above where it started.
`--against` measures another checkout too (e.g. a `git worktree` of an older revision, with its `.venv`),
alternating, the order reversed every other round.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run by the checkout's interpreter, in the checkout's root: prints one line
_CHILD = """
import shutil, sys, tempfile, time
from pathlib import Path
import numpy as np
import tritonclient.http as httpclient
from mslite_server import LocalServer, ServerConfig
from mslite_server.workers import workers_of
from tests.support import model_zoo
from tests.support.repository import MINIMAL, add_model

def kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

n = int(sys.argv[1])
repo = Path(tempfile.mkdtemp(prefix="bench-strings-served-"))
try:
    add_model(repo, "s", model_zoo.string_identity(), MINIMAL + "instance_group [ { kind: KIND_CPU, count: 1 } ]\\n")
    with LocalServer(ServerConfig(model_repository=repo, startup_timeout_s=240)) as srv:
        [pid] = [w.pid for w in workers_of(srv.process.pid) if w.instance == "s_0_0"]
        client = httpclient.InferenceServerClient(srv.http_url.split("://", 1)[1], network_timeout=600)
        sent = np.empty((1, n), dtype=object)
        sent[0, :] = [bytes((97 + i % 26, 98)) for i in range(n)]
        wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
        for data in (sent[:, :1], sent):  # the first is the warm-up
            request = httpclient.InferInput("INPUT0", list(data.shape), "BYTES")
            request.set_data_from_numpy(data, binary_data=True)
            if data is sent:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")  # the worker's peak RSS starts again from here
                before = kib(pid, "VmRSS:")
                started = time.perf_counter()
            got = client.infer("s", [request], outputs=wanted).as_numpy("OUTPUT0")
        elapsed = time.perf_counter() - started
        peak = (kib(pid, "VmHWM:") - before) * 1024
        client.close()
        assert got.shape == sent.shape and (got == sent).all()
        print(f"{n:,} strings: {elapsed / n * 1e6:.2f} us per element, worker peak +{peak / 2**20:.0f} MiB "
              f"({peak / n:.0f} bytes per element)")
finally:
    shutil.rmtree(repo, ignore_errors=True)
"""


def measure(checkout: Path, elements: int) -> str:
    """One server of `checkout`, one request of `elements` strings: the figures, as one line."""
    out = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "-c", _CHILD, str(elements)],
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    ).stdout
    return out.strip().splitlines()[-1]


def main() -> None:
    """Measure each checkout `--rounds` times, alternating."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--elements", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--against", type=Path, help="another checkout (with its .venv) to measure too")
    a = p.parse_args()
    checkouts = [ROOT] + ([a.against.resolve()] if a.against else [])
    for r in range(a.rounds):
        for checkout in checkouts if r % 2 == 0 else list(reversed(checkouts)):
            print(f"round {r + 1} {checkout.name}: {measure(checkout, a.elements)}", flush=True)


if __name__ == "__main__":
    main()
