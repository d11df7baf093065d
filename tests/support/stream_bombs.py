"""Compressed-stream bombers: keyless gRPC clients whose ModelStreamInfer messages are small gzip that inflate big.

Each bomber is one connection with one `ModelStreamInfer` call (grpc-encoding gzip) that sends the same
message again and again until stopped: ~65 KB on the wire, 64 MiB (the gateway's default request cap) once
inflated. `bomb_while_serving` runs them against a server while its gateway is probed and another client
predicts: the gateway's test asserts on what it returns (its event loop must keep answering), and
`benchmarks.chaos costs --attacks stream-gzip` reports it.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from mslite_contract.settings import GATEWAY_MAX_REQUEST_BYTES
from mslite_gateway.grpc.frames import END_HEADERS, HEADERS, U32, frame
from mslite_server import LocalServer
from tests.support.raw_h2 import RawH2

STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"


@cache
def bomb(inflated: int = GATEWAY_MAX_REQUEST_BYTES) -> bytes:
    """A compressed gRPC message (prefix included) of a ModelInferRequest of `inflated` bytes."""
    head = pb.ModelInferRequest(model_name="tiny", raw_input_contents=[b""]).ByteSize() + 8  # the length's varint
    body = pb.ModelInferRequest(model_name="tiny", raw_input_contents=[bytes(inflated - head)]).SerializeToString()
    packed = gzip.compress(body, 9)
    return b"\1" + U32.pack(len(packed)) + packed


class StreamBombers:
    """`count` bomber connections to the gRPC port `port`, sending until `stop()`; `sent` counts messages."""

    def __init__(self, port: int, count: int = 4) -> None:
        self.port = port
        self.message = bomb()
        self.sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def start(self) -> StreamBombers:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _run(self) -> None:
        sid = 1
        while not self._stop.is_set():  # a call the gateway ends (or a lost connection) is opened again
            try:
                with RawH2(self.port) as h2:
                    block = h2.encoder.encode(
                        [(":method", "POST"), (":scheme", "http"), (":path", STREAM_INFER), (":authority", "x"),
                         ("content-type", "application/grpc"), ("te", "trailers"), ("grpc-encoding", "gzip")]
                    )  # fmt: skip
                    with h2.lock:
                        h2.windows[sid] = h2.initial
                    h2.send(frame(HEADERS, END_HEADERS, sid, block))
                    while not self._stop.is_set() and h2.data(sid, self.message, timeout_s=5):
                        with self._lock:
                            self.sent += 1
            except OSError:
                pass


@dataclass
class BombRun:
    """What happened while the bombers ran: each probe's and predict's seconds (inf: no answer / failed)."""

    sent: int
    probes: list[float]
    predicts: list[float]
    restarted: bool


def bomb_while_serving(server: LocalServer, seconds: float, count: int = 4) -> BombRun:
    """`count` bombers for `seconds` at `server`'s gRPC port while its gateway's probe is asked every 0.2 s (with
    the supervisor's patience) and another client predicts `tiny` ([1, 4] FP32, y = 2x + 1) over gRPC."""
    pid = server.gateway.pid if server.gateway is not None else None
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

    def predict() -> bool:
        item = grpcclient.InferInput("x", [1, 4], "FP32")
        item.set_data_from_numpy(x)
        try:
            return bool(np.array_equal(client.infer("tiny", [item], client_timeout=60).as_numpy("y"), x * 2 + 1))
        except grpcclient.InferenceServerException:
            return False

    probes: list[float] = []
    predicts: list[float] = []
    done = threading.Event()

    def timed(call: Callable[[], bool], into: list[float], pause_s: float) -> None:
        while not done.is_set():
            started = time.monotonic()
            into.append(time.monotonic() - started if call() else float("inf"))
            time.sleep(pause_s)

    bombers = StreamBombers(server.grpc_port, count).start()
    prober = threading.Thread(
        target=timed, args=(lambda: server.gateway_answers_live(server.config.hang_s), probes, 0.2)
    )
    prober.start()
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            timed_once = time.monotonic()
            predicts.append(time.monotonic() - timed_once if predict() else float("inf"))
    finally:
        done.set()
        bombers.stop()
        prober.join(timeout=60)
        client.close()
    restarted = server.gateway is None or server.gateway.pid != pid
    return BombRun(bombers.sent, probes, predicts, restarted)
