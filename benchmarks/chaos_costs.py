"""`python -m benchmarks.chaos costs`: requests that cost everyone else, against the gateway, one row per attack.

The stack is a local server with its gateway, admin key and supervisor (as `mslite-triton serve` runs it)
on a repository of `seq` (the zoo's variable_seq: [N, T] float, batching), `strings` ([N, T] BYTES) and `tiny`.
Each attack runs while another client uses the same model, loopback only, bounded in time:

  zero-batch: 300 inference requests of shape [0, 0] to `seq` (100 each over HTTP JSON, HTTP binary and
              gRPC, 6 threads, 5 s client time-out); bar: each answered 4xx within 5 s, the other client's
              predicts of `seq` all succeed, tritonserver's RSS does not grow.
  strings:    one request of 4,000,000 two-byte strings to `strings` (HTTP binary); bar: refused within 3 s
              naming the limit, while another client's 1-string request is answered within 5 s, and the
              model's workers grow by < 1.5 GB.
  gzip-bomb:  8 threads post 30 KiB gzip bodies that inflate to ~30 MiB of JSON for 15 s, while another
              client posts 400 KiB JSON predicts to `seq`; bar: >= 90 % of those answered 200 within 2 s each.
  execute-deadline: keyless requests that would run for ever to `spin`, one a second for 30 s, while another
              client predicts `tiny`; bar: all of those answered, the slowest within 2 s, tritonserver not
              restarted (`chaos_deadline.py`).
  idle-connections, zero-window, error-answers, streams-left: `raw_h2`'s attackers for 20 s, another client predicting
              tiny; bar: all answered within 2 s, gateway and tritonserver RSS growth < 256 MiB each, no restart.

Run: .venv/bin/python -m benchmarks.chaos costs [--attacks zero-batch,execute-deadline,idle-connections,...]
"""

from __future__ import annotations

import gzip
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from mslite_server import LocalServer, ServerConfig
from mslite_server.workers import workers_of
from tests.support import model_zoo, raw_h2
from tests.support.badinput.memory import rss_kib
from tests.support.repository import GEN, add_model
from tests.support.sockets import http_answer
from tests.support.traffic import Loops

BOUNDS = ("idle-connections", "zero-window", "error-answers", "streams-left")  # `raw_h2`'s attackers
ATTACKS = ("zero-batch", "strings", "gzip-bomb", "execute-deadline", *BOUNDS)


def _rss_mib(pids: list[int]) -> float:
    return sum(rss_kib(pid) or 0 for pid in pids) / 1024


def _post(port: int, model: str, body: bytes, *, headers: str = "", timeout_s: float) -> tuple[int, bytes]:
    """One HTTP inference request on a connection of its own: (status, body); status 0 when no answer came."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            head = f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {len(body)}\r\n\r\n"
            s.sendall(head.encode() + body)
            data = http_answer(s)
    except OSError:
        return 0, b""
    head_, _, rest = data.partition(b"\r\n\r\n")
    return (int(head_.split(b" ", 2)[1]) if head_.startswith(b"HTTP/") else 0), rest


class _Other(Loops):
    """Another client: calls `predict` in a loop until stopped; counts ok, failures and the longest wait."""

    def __init__(self, predict: Callable[[], bool]) -> None:
        self.predict = predict
        self.ok = self.failed = 0
        self.waits: list[float] = []
        self.errors: list[str] = []
        super().__init__([self._loop], join_s=60)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                good = self.predict()
            except Exception as e:  # counted: a failure of the other client is what the bar is about
                good = False
                self.errors.append(repr(e)[:200])
            self.waits.append(time.monotonic() - started)
            self.ok, self.failed = self.ok + good, self.failed + (not good)
            time.sleep(0.02)


def zero_batch(server: LocalServer) -> str:
    http_port, grpc_port = server.http_port, server.grpc_port
    tokens = np.arange(6, dtype=np.float32).reshape(2, 3)
    other_client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=10)

    def other() -> bool:
        inp = httpclient.InferInput("tokens", [2, 3], "FP32")
        inp.set_data_from_numpy(tokens)
        return bool(np.allclose(other_client.infer("seq", [inp]).as_numpy("total")[:, 0], [3, 12]))

    empty = np.zeros((0, 0), np.float32)
    json_body = b'{"inputs":[{"name":"tokens","shape":[0,0],"datatype":"FP32","data":[]}]}'
    answers: list[tuple[str, float, str]] = []  # (protocol, seconds, outcome)
    lock = threading.Lock()

    def attack(protocol: str, count: int) -> None:
        for _ in range(count):
            started = time.monotonic()
            try:
                if protocol == "json":
                    status, body = _post(http_port, "seq", json_body, timeout_s=5)
                    outcome = f"{status}" if status else "no answer"
                elif protocol == "binary":
                    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=5)
                    inp = httpclient.InferInput("tokens", [0, 0], "FP32")
                    inp.set_data_from_numpy(empty, binary_data=True)
                    client.infer("seq", [inp])
                    outcome = "200"
                else:
                    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
                    inp = grpcclient.InferInput("tokens", [0, 0], "FP32")
                    inp.set_data_from_numpy(empty)
                    client.infer("seq", [inp], client_timeout=5)
                    outcome = "OK"
            except Exception as e:  # the expected 4xx / INVALID_ARGUMENT, or a time-out
                text = str(e)
                outcome = "400" if "[400]" in text or "INVALID_ARGUMENT" in text else f"other: {text[:80]}"
                if "batch-size must be >= 1" not in text and outcome == "400":
                    outcome = "400 without the message"
            with lock:
                answers.append((protocol, time.monotonic() - started, outcome))

    triton_pids = [server.process.pid] if server.process else []
    rss_before = _rss_mib(triton_pids)
    with _Other(other) as watcher:
        threads = [threading.Thread(target=attack, args=(p, 50)) for p in ("json", "binary", "grpc") for _ in range(2)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        took = time.monotonic() - started
        time.sleep(1)
    rss_after = _rss_mib(triton_pids)
    refused = [a for a in answers if a[2] == "400" and a[1] <= 5]
    worst = max(a[1] for a in answers)
    odd = sorted({a[2] for a in answers if a[2] != "400"})
    return (
        f"zero-batch: {len(answers)} requests of [0, 0] in {took:.1f} s (HTTP JSON, binary, gRPC): {len(refused)} "
        f"answered 400 / INVALID_ARGUMENT naming the batch size within 5 s (bar: all), slowest {worst:.2f} s"
        f"{'; other outcomes ' + str(odd) if odd else ''}; the other client's predicts of seq: {watcher.ok} ok, "
        f"{watcher.failed} failed (bar: 0), longest {max(watcher.waits):.2f} s; tritonserver RSS "
        f"{rss_before:.0f} -> {rss_after:.0f} MiB"
    )


def strings(server: LocalServer) -> str:
    http_port = server.http_port
    count = 4_000_000
    payload = (b"\x02\x00\x00\x00ab") * count
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, count],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(payload)},
                }
            ]
        }
    ).encode()
    body = header + payload
    extra = f"Inference-Header-Content-Length: {len(header)}\r\n"
    one = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "BYTES", "data": ["ab"]}]}).encode()
    workers = [w.pid for w in workers_of(server.process.pid)] if server.process else []
    rss_before = _rss_mib(workers)
    result: dict[str, tuple[float, int, bytes]] = {}

    def big() -> None:
        started = time.monotonic()
        status, answer = _post(http_port, "strings", body, headers=extra, timeout_s=60)
        result["big"] = (time.monotonic() - started, status, answer)

    attacker = threading.Thread(target=big)
    attacker.start()
    time.sleep(0.05)  # the big body is on its way
    started = time.monotonic()
    status, answer = _post(http_port, "strings", one, timeout_s=30)
    other_s = time.monotonic() - started
    attacker.join(timeout=120)
    rss_after = _rss_mib(workers)
    big_s, big_status, big_answer = result.get("big", (0.0, 0, b""))
    message = json.loads(big_answer).get("error", "") if big_answer.startswith(b"{") else big_answer[:120].decode()
    return (
        f"strings: {count:,} two-byte strings ({len(body) >> 20} MiB) answered {big_status} in {big_s:.2f} s "
        f"(bar: refused within 3 s): {message!r}; another client's 1-string request answered {status} in "
        f"{other_s:.2f} s (bar: within 5 s); the strings model's workers' RSS {rss_before:.0f} -> {rss_after:.0f} MiB"
    )


def gzip_bomb(server: LocalServer, seconds: float = 15.0) -> str:
    http_port = server.http_port
    values = 7_500_000  # "0," each: ~15 MiB of JSON, then padding to ~30 MiB, in ~30 KiB of gzip
    doc = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[' + b"0," * (values - 1) + b"0]}]}"
    bomb = gzip.compress(doc + b" " * ((30 << 20) - len(doc)), 9)
    count = 52_000  # 4-decimal values: ~400 KiB of JSON
    tokens = np.random.default_rng(0).random(count).round(4).tolist()
    legit = json.dumps({"inputs": [{"name": "tokens", "shape": [1, count], "datatype": "FP32", "data": tokens}]})
    legit_body = legit.encode()
    stop = threading.Event()
    bombs = {"sent": 0, "503": 0, "4xx": 0, "other": 0}
    lock = threading.Lock()

    def bomber() -> None:
        while not stop.is_set():
            status, _ = _post(http_port, "tiny", bomb, headers="Content-Encoding: gzip\r\n", timeout_s=60)
            with lock:
                bombs["sent"] += 1
                key = "503" if status == 503 else "4xx" if 400 <= status < 500 else "other"
                bombs[key] += 1

    threads = [threading.Thread(target=bomber) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(1)  # the bombs are in flight
    answers: list[tuple[int, float]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        status, _ = _post(http_port, "seq", legit_body, timeout_s=30)
        answers.append((status, time.monotonic() - started))
    stop.set()
    for t in threads:
        t.join(timeout=120)
    good = [s for status, s in answers if status == 200 and s <= 2.0]
    slowest = max(s for _, s in answers)
    statuses = sorted({status for status, _ in answers})
    return (
        f"gzip-bomb: 8 threads sent {bombs['sent']} bombs ({len(bomb) >> 10} KiB -> 30 MiB; {bombs['4xx']} refused "
        f"4xx, {bombs['503']} 503) over {seconds:.0f} s; another client's {len(legit_body) >> 10} KiB JSON predicts: "
        f"{len(good)} of {len(answers)} ({100 * len(good) / max(1, len(answers)):.0f} %) answered 200 within 2 s "
        f"(bar: >= 90 %), statuses {statuses}, slowest {slowest:.2f} s"
    )


def bound(name: str, server: LocalServer) -> str:
    """Attack `name` (`BOUNDS`) for 20 s, another client predicting `tiny` over gRPC and HTTP meanwhile."""
    ports, x = (server.grpc_port, server.http_port), np.arange(4, dtype=np.float32).reshape(1, 4)
    clients = [(m.InferenceServerClient(f"127.0.0.1:{p}"), m.InferInput("x", [1, 4], "FP32").set_data_from_numpy(x))
               for m, p in zip((grpcclient, httpclient), ports)]  # fmt: skip
    pids = lambda: [server.gateway.pid if server.gateway else 0, server.process.pid if server.process else 0]  # noqa: E731
    started, stop, held = pids(), threading.Event(), []
    before = peak = [_rss_mib([pid]) for pid in started]
    attack, args = getattr(raw_h2, name.replace("-", "_")), (server.grpc_port, server.http_port, stop, held)
    attacker = threading.Thread(target=attack, args=args, daemon=True)
    with _Other(lambda: all(np.allclose(c.infer("tiny", [i]).as_numpy("y"), x * 2 + 1) for c, i in clients)) as other:
        attacker.start()
        for _ in range(40):
            time.sleep(0.5)
            peak = [max(p, _rss_mib([pid])) for p, pid in zip(peak, started)]
        stop.set()
        attacker.join(timeout=60)
    closed, sent = sum(map(raw_h2.closed_by_peer, held)), sum(getattr(h, "sent", 0) for h in held)
    for h in held:
        h.close()
    return (
        f"{name}: 20 s, {len(held)} attacking connections ({closed} closed by the gateway), {sent} writes; the other "
        f"client's predicts of tiny (gRPC + HTTP): {other.ok} ok, {other.failed} failed (bar: 0), slowest "
        f"{max(other.waits):.2f} s (bar: 2 s){'; ' + other.errors[0] if other.errors else ''}; peak RSS: gateway "
        f"{before[0]:.0f} -> {peak[0]:.0f} MiB, tritonserver {before[1]:.0f} -> {peak[1]:.0f} MiB (bar: growth < 256 "
        f"each); restarted (pid changed): gateway, tritonserver {[a != b for a, b in zip(started, pids())]} (bar: no)"
    )


def costs_campaign(selected: list[str]) -> int:
    work = Path(tempfile.mkdtemp(prefix="chaos-costs-"))
    repo = work / "repo"
    repo.mkdir()
    add_model(repo, "seq", model_zoo.variable_seq())
    add_model(repo, "strings", model_zoo.string_identity())
    add_model(repo, "tiny", GEN.build_tiny())
    from benchmarks.chaos_deadline import SPIN, execute_deadline  # (it imports this module)

    add_model(repo, "spin", model_zoo.spin(), f'backend: "mslite"\n{SPIN}\n')
    runs = {"zero-batch": zero_batch, "strings": strings, "gzip-bomb": gzip_bomb, "execute-deadline": execute_deadline}
    runs.update({name: lambda server, name=name: bound(name, server) for name in BOUNDS})
    with LocalServer(ServerConfig(model_repository=repo, gateway=True, exit_timeout_s=5)) as server:
        for name in selected:
            print(runs[name](server), flush=True)
    return 0
