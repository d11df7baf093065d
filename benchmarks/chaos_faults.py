"""`python -m benchmarks.chaos faults`: one fault after another under checked load, one row per fault.

The stack is `mslite-triton serve` as shipped (gateway, admin key, supervisor) on a repository holding
`tiny` (y = 2x + 1), plus a model the Python client uploads with 2 workers and whose weight it updates to
10 x I. Load throughout: 8 threads of the Python client predicting the uploaded model, and 8 threads of raw
`tritonclient` HTTP (no key, as any client) calling `tiny` with random inputs; every answer is checked.

Faults: the process faults the supervisor heals (SIGKILL of a worker, the gateway or tritonserver, SIGSTOP
of tritonserver, the gateway or a worker, tritonserver killed again while a heal loads the models), and
attacks made as a client would make them: naming another client's shared-memory regions, deeply nested
JSON to `/generate`, idle HTTP bodies and stalled gRPC messages announcing 64 MiB / 16 MiB, a gzip body
inflating to 30 MiB of JSON, a request that crashes tritonserver followed by its restart, and HTTP/2
rapid reset.

Per fault and per kind of client: the outage (the longest time no request of that kind was answered,
from the fault until the service was back), answers ok, failed and wrong; and a note on what the fault
did (e.g. the attacker's requests accepted, tritonserver's pid and RSS). Loopback only; each fault is
bounded in time.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import tritonclient.http as httpclient

import mslite_triton as mslite
from mslite_contract.protocol import CLIENT_REGION_PREFIX
from mslite_contract.settings import KEY_DIR_ENV
from mslite_gateway.grpc.frames import END_HEADERS, HEADERS, RST_STREAM, U32, frame
from mslite_server.ports import pick_ports
from mslite_server.workers import state_of, workers_of
from tests.support.badinput.memory import rss_kib
from tests.support.processes import children_of
from tests.support.raw_h2 import MODEL_INFER, RawH2
from tests.support.repository import GEN as generate_models
from tests.support.traffic import Loops
from tests.support.updatable import build_updated

ROOT = Path(__file__).resolve().parents[1]
HEAL_LINE = re.compile(r"(worker|tritonserver|gateway) healed in ([0-9.]+) s")
UP_AGAIN = "tritonserver up again in"
FAULT_DEADLINE_S = 90.0  # the longest one fault and the recovery after it may take
X = np.arange(1, 5, dtype=np.float32).reshape(1, 4)
KINDS = ("python", "http")


# -- load ------------------------------------------------------------------------------------------
class Load(Loops):
    """8 Python-client threads and 8 raw-HTTP threads; per kind: success times, failures, wrong answers."""

    def __init__(self, runner: mslite.ModelParallelRunner, http_url: str, threads: int = 8) -> None:
        self.runner, self.http_url = runner, http_url
        self.ok: dict[str, list[float]] = {k: [] for k in KINDS}
        self.failed: dict[str, list[tuple[float, str]]] = {k: [] for k in KINDS}
        self.wrong = dict.fromkeys(KINDS, 0)
        self._lock = threading.Lock()
        super().__init__([self._python] * threads + [self._http] * threads)

    def _note(self, kind: str, error: str | None = None, wrong: bool = False) -> None:
        with self._lock:
            if error is not None:
                self.failed[kind].append((time.monotonic(), error[:200]))
            elif wrong:
                self.wrong[kind] += 1
            else:
                self.ok[kind].append(time.monotonic())

    def _python(self) -> None:
        while not self._stop.is_set():
            try:
                inputs = self.runner.get_inputs()
                inputs[0].set_data_from_numpy(X)
                y = self.runner.predict(inputs)[0].get_data_to_numpy()
                self._note("python", wrong=not np.array_equal(y, 10 * X))
            except Exception as e:  # counted
                self._note("python", repr(e))

    def _http(self) -> None:
        rng = np.random.default_rng()
        client = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = httpclient.InferenceServerClient(self.http_url.removeprefix("http://"), network_timeout=60)
                x = rng.random((1, 4), dtype=np.float32)
                item = httpclient.InferInput("x", [1, 4], "FP32")
                item.set_data_from_numpy(x)
                y = client.infer("tiny", [item]).as_numpy("y")
                self._note("http", wrong=y is None or not np.allclose(y, 2 * x + 1))
            except Exception as e:  # counted; a new connection after any failure
                self._note("http", repr(e))
                client = None
                time.sleep(0.05)

    def answered_since(self, since: float) -> dict[str, int]:
        with self._lock:
            return {k: sum(1 for t in self.ok[k] if t > since) for k in KINDS}

    def wait_served(self, since: float, count: int, timeout_s: float) -> bool:
        """Until each kind had `count` answers after `since`; False at the timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if min(self.answered_since(since).values()) >= count:
                return True
            time.sleep(0.05)
        return False

    def window(self, start: float, end: float) -> dict[str, tuple[float, int, int, int]]:
        """Per kind: (outage s, ok, failed, wrong) within [start, end]; wrong answers counted since `start`."""
        out = {}
        with self._lock:
            for k in KINDS:
                times = [t for t in self.ok[k] if start < t <= end]
                marks = [start, *times, end]
                outage = max(b - a for a, b in zip(marks, marks[1:], strict=False))
                failed = sum(1 for t, _ in self.failed[k] if start < t <= end)
                out[k] = (outage, len(times), failed, self.wrong[k])
        return out

    def first_failures(self, start: float, end: float, n: int = 2) -> list[str]:
        with self._lock:
            return [f"{k}: {e}" for k in KINDS for t, e in self.failed[k] if start < t <= end][:n]


# -- the stack -------------------------------------------------------------------------------------
@dataclass
class Stack:
    """`mslite-triton serve` as a child process, and what the faults need to reach into it."""

    proc: subprocess.Popen[str]
    log_path: Path
    http_port: int
    grpc_port: int
    runner: mslite.ModelParallelRunner
    quick: bool

    def child(self, word: str) -> int:
        return next(pid for pid, cmd in children_of(self.proc.pid) if word in cmd)

    def tritonserver(self) -> int:
        return self.child("tritonserver")

    def gateway(self) -> int:
        return self.child("mslite_gateway")

    def worker(self) -> int:
        name = self.runner._remote.info.name
        live = [w for w in workers_of(self.tritonserver()) if w.state != "Z"]
        return next(w.pid for w in live if w.instance.startswith(name))

    def log_count(self, text: str | re.Pattern[str]) -> int:
        log = self.log_path.read_text(errors="replace")
        return len(text.findall(log)) if isinstance(text, re.Pattern) else log.count(text)

    def wait_log(self, text: str | re.Pattern[str], above: int, timeout_s: float = FAULT_DEADLINE_S) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.log_count(text) > above:
                return True
            time.sleep(0.05)
        return False

    def attack_s(self, full: float) -> float:
        return min(full, 3.0) if self.quick else full


def _rss_mib(pid: int) -> float:
    return (rss_kib(pid) or 0) / 1024


# -- process faults --------------------------------------------------------------------------------
def _kill_and_heal(stack: Stack, pid: int, sig: int) -> str:
    heals = stack.log_count(HEAL_LINE)
    os.kill(pid, sig)
    healed = stack.wait_log(HEAL_LINE, heals)
    found = HEAL_LINE.findall(stack.log_path.read_text(errors="replace"))
    return f"healed in {found[-1][1]} s ({found[-1][0]})" if healed else "NOT healed"


def worker_kill(stack: Stack) -> str:
    return _kill_and_heal(stack, stack.worker(), signal.SIGKILL)


def gateway_kill(stack: Stack) -> str:
    return _kill_and_heal(stack, stack.gateway(), signal.SIGKILL)


def tritonserver_kill(stack: Stack) -> str:
    return _kill_and_heal(stack, stack.tritonserver(), signal.SIGKILL)


def tritonserver_stop(stack: Stack) -> str:
    """A hung tritonserver (SIGSTOP): the supervisor notices its silence and starts another."""
    return _kill_and_heal(stack, stack.tritonserver(), signal.SIGSTOP)


def _stop_and_heal(stack: Stack, pid: int) -> str:
    server = stack.tritonserver()
    note = _kill_and_heal(stack, pid, signal.SIGSTOP)
    time.sleep(4)  # a worker let run again crashed tritonserver about 3 s later
    kept = server == stack.tritonserver() and state_of(server) not in ("", "Z")
    return f"{note}; stopped pid {'gone' if state_of(pid) in ('', 'Z') else 'ALIVE'}; tritonserver pid kept: {kept}"


def gateway_stop(stack: Stack) -> str:
    return _stop_and_heal(stack, stack.gateway())


def worker_stop(stack: Stack) -> str:
    return _stop_and_heal(stack, stack.worker())


def second_death(stack: Stack) -> str:
    """Kill tritonserver, then the new one while the heal loads the models again."""
    heals, ups = stack.log_count(HEAL_LINE), stack.log_count(UP_AGAIN)
    os.kill(stack.tritonserver(), signal.SIGKILL)
    if not stack.wait_log(UP_AGAIN, ups):
        return "the first heal never started loading"
    second = time.monotonic()
    os.kill(stack.tritonserver(), signal.SIGKILL)
    healed = stack.wait_log(HEAL_LINE, heals)
    found = HEAL_LINE.findall(stack.log_path.read_text(errors="replace"))
    if not healed:
        return "NOT healed"
    return f"healed {time.monotonic() - second:.1f} s after the second kill (whole heal {found[-1][1]} s)"


# -- attacks, as a client makes them ---------------------------------------------------------------
def _post(url: str, body: bytes, headers: dict[str, str] | None = None, timeout_s: float = 30) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status), resp.read(200).decode(errors="replace")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read(200).decode(errors="replace")
    except OSError as e:
        return 0, repr(e)[:120]


def shm_cross(stack: Stack) -> str:
    """Victims send 64 KiB inputs through shared memory; an attacker (no key) names their regions in requests:
    as an input (reads the victim's tensor) and as an output (writes into it)."""
    grpc_url = f"grpc://127.0.0.1:{stack.grpc_port}"
    victims = Victims(grpc_url, threads=2).__enter__()
    try:
        deadline = time.monotonic() + 30
        prefix = f"{CLIENT_REGION_PREFIX}{os.getpid()}_"
        while not (names := sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))):
            if time.monotonic() > deadline:
                return "no client region to attack (the client sent tensors inline)"
            time.sleep(0.1)
        url = f"http://127.0.0.1:{stack.http_port}/v2/models/wide/infer"
        shape, region = [1, VICTIM_FLOATS], {"shared_memory_byte_size": VICTIM_FLOATS * 4}
        accepted = tried = 0
        end = time.monotonic() + stack.attack_s(8)
        while time.monotonic() < end:
            for name in names:
                read = {"inputs": [{"name": "x", "shape": shape, "datatype": "FP32",
                                    "parameters": {**region, "shared_memory_region": name}}]}  # fmt: skip
                into = {"name": "y", "parameters": {**region, "shared_memory_region": name}}
                write = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [-7.0] * 4}],
                         "outputs": [into]}  # fmt: skip
                for body in (read, write):
                    status, _ = _post(url, json.dumps(body).encode(), timeout_s=10)
                    tried += 1
                    accepted += status == 200
    finally:
        victims.__exit__()
    return (
        f"attacker: {accepted} of {tried} requests naming {len(names)} victim regions accepted; victims: "
        f"{victims.ok} answers, {victims.wrong} wrong, {len(victims.failures)} failed"
    )


VICTIM_FLOATS = 16384  # 64 KiB inputs: the Python client sends them through shared memory


class Victims(Loops):
    """Python-client threads predicting `wide` (y = 2x + 1) with 64 KiB random inputs; every answer checked."""

    def __init__(self, url: str, threads: int) -> None:
        ctx = mslite.Context()
        ctx.server_url = url
        self.model = mslite.Model()
        self.model.build_from_file("triton://wide", mslite.ModelType.MINDIR, ctx)
        self.ok = self.wrong = 0
        self.failures: list[str] = []
        super().__init__([self._loop] * threads, join_s=60)

    def _loop(self) -> None:
        rng = np.random.default_rng()
        while not self._stop.is_set():
            x = rng.random((1, VICTIM_FLOATS), dtype=np.float32)
            try:
                (y,) = self.model.predict([mslite.Tensor(x)])
                right = np.allclose(y.get_data_to_numpy(), 2 * x + 1)
                self.ok, self.wrong = self.ok + right, self.wrong + (not right)
            except Exception as e:  # counted
                self.failures.append(repr(e)[:200])


def _deep_json(depth: int = 150_000) -> bytes:
    return b"[" * depth + b"]" * depth


def deep_json(stack: Stack) -> str:
    before = stack.tritonserver()
    answers = []
    for route in ("generate", "generate_stream"):
        status, body = _post(f"http://127.0.0.1:{stack.http_port}/v2/models/tiny/{route}", _deep_json())
        answers.append(f"/{route}: {status} {body[:60]!r}")
    time.sleep(2)  # Triton's crash handler, if it crashed
    return f"{'; '.join(answers)}; tritonserver pid kept: {before == stack.tritonserver()}"


def crash_request(stack: Stack) -> str:
    """A request that crashed tritonserver, then its restart: which server answered it?"""
    before, heals = stack.tritonserver(), stack.log_count(HEAL_LINE)
    status, body = _post(f"http://127.0.0.1:{stack.http_port}/v2/models/tiny/generate", _deep_json(), timeout_s=60)
    restarted = stack.wait_log(HEAL_LINE, heals, timeout_s=5) or stack.tritonserver() != before
    if restarted:
        stack.wait_log(HEAL_LINE, heals)
    return f"answer {status} {body[:70]!r}; tritonserver restarted: {restarted}"


def _idle_http(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 67108864\r\n\r\n")  # fmt: skip
    return s


def _stalled_grpc(port: int, streams: int = 3) -> RawH2:
    """One connection, `streams` ModelInfer messages announcing 16 MiB each, a few bytes sent, then nothing."""
    h2 = RawH2(port, timeout_s=5)
    for k in range(streams):
        h2.open(2 * k + 1)
        h2.data(2 * k + 1, b"\x00" + (16 << 20).to_bytes(4, "big") + b"\0" * 1024)
    return h2


def slow_bodies(stack: Stack) -> str:
    """4 idle HTTP bodies announcing 64 MiB and 33 stalled gRPC messages, held while the load runs."""
    held: list[socket.socket | RawH2] = []
    try:
        held += [_idle_http(stack.http_port) for _ in range(4)]
        held += [_stalled_grpc(stack.grpc_port, 3) for _ in range(11)]
        time.sleep(stack.attack_s(15))
    finally:
        for conn in held:
            with contextlib.suppress(OSError):
                conn.close()
    return "4 HTTP bodies of 64 MiB and 33 gRPC messages of 16 MiB announced and stalled"


def gzip_bomb(stack: Stack) -> str:
    body = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[' + b"0," * (15 << 20) + b"0]}]}"
    packed = gzip.compress(body, 9)
    url = f"http://127.0.0.1:{stack.http_port}/v2/models/tiny/infer"
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    statuses: dict[int, int] = {}
    end = time.monotonic() + stack.attack_s(8)

    def send() -> None:
        while time.monotonic() < end:
            status, _ = _post(url, packed, headers)
            statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return f"{len(packed) >> 10} KiB inflating to {len(body) >> 20} MiB; answers by status: {statuses}"


def rapid_reset(stack: Stack) -> str:
    """HEADERS + RST_STREAM pairs on one HTTP/2 connection to the gRPC port, for a few seconds."""
    server = stack.tritonserver()
    before = _rss_mib(server)
    h2 = RawH2(stack.grpc_port, timeout_s=5)
    block = h2.header_block(MODEL_INFER)  # one block for every stream, as an attacker's tool would send
    sent, sid, end = 0, 1, time.monotonic() + stack.attack_s(5)
    with h2:  # 500 pairs a write, not one frame at a time
        while time.monotonic() < end and sent < 1_000_000 and not h2.closed.is_set():
            pairs = b"".join(
                frame(HEADERS, END_HEADERS, sid + 2 * k, block) + frame(RST_STREAM, 0, sid + 2 * k, U32.pack(8))
                for k in range(500)
            )
            if not h2.send(pairs):
                break
            sid, sent = sid + 1000, sent + 500
        closed = h2.closed.is_set()
    note = f"{sent} resets sent" + ("; the server closed the connection" if closed else "")
    time.sleep(2)
    kept = server == stack.tritonserver()
    return f"{note}; tritonserver RSS {before:.0f} -> {_rss_mib(server):.0f} MiB; pid kept: {kept}"


FAULTS: dict[str, Callable[[Stack], str]] = {
    "worker-kill": worker_kill,
    "gateway-kill": gateway_kill,
    "tritonserver-kill": tritonserver_kill,
    "tritonserver-stop": tritonserver_stop,
    "gateway-stop": gateway_stop,
    "worker-stop": worker_stop,
    "second-death": second_death,
    "shm-cross": shm_cross,
    "deep-json": deep_json,
    "slow-bodies": slow_bodies,
    "gzip-bomb": gzip_bomb,
    "crash-request": crash_request,
    "rapid-reset": rapid_reset,
}


# -- the campaign ----------------------------------------------------------------------------------
def _start_stack(work: Path, quick: bool) -> Stack:
    repo = work / "repo"
    shutil.copytree(ROOT / "model_repository" / "tiny", repo / "tiny")
    (repo / "wide" / "1").mkdir(parents=True)
    (repo / "wide" / "1" / "model.onnx").write_bytes(_wide_tiny().SerializeToString())
    (repo / "wide" / "config.pbtxt").write_text('backend: "mslite"\n')
    http, grpc, metrics = pick_ports([("127.0.0.1", 0, "free")] * 3)
    env = {**os.environ, KEY_DIR_ENV: str(work / "keys")}
    log_path = work / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mslite_server.cli", "serve", "--model-repository", str(repo),
             "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
             "--exit-timeout-s", "5"],
            env=env, stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    assert proc.stdout is not None
    while not proc.stdout.readline().startswith("serving"):
        if proc.poll() is not None:
            raise RuntimeError("serve did not start:\n" + log_path.read_text()[-3000:])
    os.environ[KEY_DIR_ENV] = env[KEY_DIR_ENV]  # the Python client sends the key
    runner = build_updated(f"grpc://127.0.0.1:{grpc}", work)
    time.sleep(2)  # the supervisor learns the uploaded model at its next poll
    return Stack(proc, log_path, http, grpc, runner, quick)


def _wide_tiny() -> onnx.ModelProto:
    """`tiny` (y = 2x + 1) on [N, T] instead of [N, 4]: inputs large enough for the client's shared memory."""
    model = generate_models.build_tiny()
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[1].ClearField("dim_value")
        value.type.tensor_type.shape.dim[1].dim_param = "T"
    return model


def faults_campaign(selected: list[str], quick: bool) -> int:
    work = Path(tempfile.mkdtemp(prefix="chaos-faults-"))
    stack = _start_stack(work, quick)
    settle = 10 if quick else 40
    print(f"{'fault':18s} {'kind':6s} {'outage s':>8s} {'ok':>6s} {'failed':>6s} {'wrong':>5s}  note", flush=True)
    bad = 0
    try:
        with Load(stack.runner, f"http://127.0.0.1:{stack.http_port}") as load:
            load.wait_served(time.monotonic() - 1, settle, FAULT_DEADLINE_S)
            for name in selected:
                start = time.monotonic()
                wrong0 = dict(load.wrong)
                try:
                    note = FAULTS[name](stack)
                except Exception as e:  # a fault that could not be made is reported, the campaign goes on
                    note = f"fault not made: {e!r}"[:200]
                back = load.wait_served(time.monotonic(), settle, FAULT_DEADLINE_S)
                end = time.monotonic()
                rows = load.window(start, end)
                for kind in KINDS:
                    outage, ok, failed, wrong = rows[kind]
                    wrong -= wrong0[kind]
                    text = note if kind == KINDS[0] else ("" if back else "NOT served again")
                    print(f"{name:18s} {kind:6s} {outage:8.1f} {ok:6d} {failed:6d} {wrong:5d}  {text}", flush=True)
                    bad += failed + wrong
                for failure in load.first_failures(start, end):
                    print(f"{'':18s}   first failures: {failure}", flush=True)
    finally:
        stack.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            stack.proc.wait(timeout=120)
        if stack.proc.poll() is None:
            stack.proc.kill()
        os.environ.pop(KEY_DIR_ENV, None)
        codes = re.findall(r"tritonserver exited \(code (-?\d+)\)", stack.log_path.read_text(errors="replace"))
        print(f"tritonserver exits the supervisor saw, by code (-9: our kills): {codes}; serve log: {stack.log_path}")
    return 1 if bad else 0
