"""Compressed-stream bombers: keyless gRPC clients whose ModelStreamInfer messages are small gzip that inflate big.

Each bomber is one connection with one `ModelStreamInfer` call (grpc-encoding gzip) that sends the same
message again and again until stopped: ~65 KB on the wire, 64 MiB (the gateway's default request cap) once
inflated. Used by the gateway's test (its event loop must keep answering) and `benchmarks.chaos costs`.
"""

from __future__ import annotations

import gzip
import threading
from functools import cache

from tritonclient.grpc import service_pb2 as pb

from mslite_contract.settings import GATEWAY_MAX_REQUEST_BYTES
from mslite_gateway.grpc.frames import END_HEADERS, HEADERS, U32, frame
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
