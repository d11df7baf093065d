"""A raw HTTP/2 client connection for the gateway's abuse tests and benchmark: frames written exactly as asked.

The attackers at the end (`Silent` connections, which never read) are `benchmarks.chaos costs`' on what one
client's connections may hold.

grpcio cannot stop a message half-way or reset a call the instant it opens it; this can. It keeps the
peer's flow-control windows (so what it sends is legal HTTP/2 and only stalls where a test wants it to),
acknowledges SETTINGS and PING, and keeps every frame it reads for the test to look at.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import hpack

from mslite_gateway.grpc.frames import (
    ACK,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    U32,
    WINDOW_UPDATE,
    frame,
)

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
_INITIAL_WINDOW = 0x4
_FRAME_BYTES = 16384  # the smallest max frame size: every peer takes it


@dataclass
class Frame:
    """One frame read from the peer."""

    kind: int
    flags: int
    sid: int
    payload: bytes


class RawH2:
    """One client connection (context manager); a thread reads the peer's frames."""

    def __init__(self, port: int, *, timeout_s: float = 30.0, settings: bytes = b"") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.encoder = hpack.Encoder()
        self.frames: list[Frame] = []
        self.closed = threading.Event()  # the peer closed the connection
        self.lock = threading.Condition()
        self.window = 65535  # the connection's send window
        self.initial = 65535  # each new stream's
        self.windows: dict[int, int] = {}
        self.ended: set[int] = set()  # streams the peer ended (trailers or RST_STREAM)
        self._wlock = threading.Lock()
        self.send(PREFACE + frame(SETTINGS, 0, 0, settings))  # `settings`: this client's, as the payload
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __enter__(self) -> RawH2:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket and stop the reader."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader's recv, which a close alone would not
        except OSError:
            pass  # the peer closed it first
        self.sock.close()
        self._reader.join(timeout=10)

    def send(self, data: bytes) -> bool:
        """Write bytes; False once the peer has closed the connection."""
        try:
            with self._wlock:
                self.sock.sendall(data)
        except OSError:
            return False
        return True

    def header_block(self, path: str) -> bytes:
        """A gRPC request's header block (HPACK, this connection's encoder)."""
        return self.encoder.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "x"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )

    def open(self, sid: int, path: str = MODEL_INFER) -> None:
        """Open stream `sid` (HEADERS, the request not ended)."""
        with self.lock:
            self.windows[sid] = self.initial
        self.send(frame(HEADERS, END_HEADERS, sid, self.header_block(path)))

    def data(self, sid: int, payload: bytes, *, end_stream: bool = False, timeout_s: float = 30.0) -> bool:
        """Send `payload` on `sid` as the windows allow; False when the stream or connection ended first."""
        view = memoryview(payload)
        deadline = time.monotonic() + timeout_s
        while view:
            with self.lock:
                while min(self.window, self.windows.get(sid, 0)) <= 0:
                    if sid in self.ended or self.closed.is_set() or time.monotonic() > deadline:
                        return False
                    self.lock.wait(0.1)
                if sid in self.ended:
                    return False
                n = min(len(view), self.window, self.windows[sid], _FRAME_BYTES)
                self.window -= n
                self.windows[sid] -= n
            last = end_stream and n == len(view)
            if not self.send(frame(DATA, END_STREAM if last else 0, sid, bytes(view[:n]))):
                return False
            view = view[n:]
        return True

    def ping(self, payload: bytes = b"in order", timeout_s: float = 30.0) -> bool:
        """PING and wait for its ACK: the peer has read every frame sent before it (frames are read in order)."""
        self.send(frame(PING, 0, 0, payload))
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while not any(f.kind == PING and f.flags & ACK and f.payload == payload for f in self.frames):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed.is_set():
                    return False
                self.lock.wait(min(left, 0.1))
        return True

    def reset(self, sid: int, code: int = 0x8) -> None:
        """RST_STREAM (CANCEL by default)."""
        self.send(frame(RST_STREAM, 0, sid, U32.pack(code)))

    def wait_for(self, kind: int, sid: int | None = None, timeout_s: float = 30.0) -> Frame | None:
        """The first frame of `kind` (on `sid`) read so far or within `timeout_s`; None if none came."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while True:
                for f in self.frames:
                    if f.kind == kind and (sid is None or f.sid == sid):
                        return f
                left = deadline - time.monotonic()
                if left <= 0 or self.closed.is_set():
                    return None
                self.lock.wait(min(left, 0.1))

    @staticmethod
    def answer(f: Frame) -> dict[bytes, bytes]:
        """The fields of a HEADERS frame the gateway wrote itself (literals only: no decoder state needed)."""
        return dict(hpack.Decoder().decode(f.payload, raw=True))

    def _read(self) -> None:
        buf = b""
        try:
            while True:
                try:
                    chunk = self.sock.recv(1 << 16)
                except TimeoutError:  # a quiet peer is not a closed one (the timeout bounds the writes)
                    continue
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                    length = int.from_bytes(buf[:3], "big")
                    f = Frame(buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9 : 9 + length])
                    buf = buf[9 + length :]
                    self._got(f)
        except OSError:
            pass
        finally:
            with self.lock:
                self.closed.set()
                self.lock.notify_all()

    def _got(self, f: Frame) -> None:
        if f.kind == SETTINGS and not f.flags & ACK:
            self.send(frame(SETTINGS, ACK, 0))
        elif f.kind == PING and not f.flags & ACK:
            self.send(frame(PING, ACK, 0, f.payload))
        with self.lock:
            if f.kind == SETTINGS and not f.flags & ACK:
                for i in range(0, len(f.payload) - 5, 6):
                    key, value = struct.unpack(">HI", f.payload[i : i + 6])
                    if key == _INITIAL_WINDOW:
                        for sid in self.windows:
                            self.windows[sid] += value - self.initial
                        self.initial = value
            elif f.kind == WINDOW_UPDATE:
                n = int.from_bytes(f.payload[:4], "big") & 0x7FFFFFFF
                if f.sid == 0:
                    self.window += n
                elif f.sid in self.windows:
                    self.windows[f.sid] += n
            elif (f.kind == HEADERS and f.flags & END_STREAM) or f.kind == RST_STREAM:
                self.ended.add(f.sid)
            self.frames.append(f)
            self.lock.notify_all()


def goaway_code(f: Frame) -> int:
    """A GOAWAY frame's error code."""
    assert f.kind == GOAWAY
    return int.from_bytes(f.payload[4:8], "big")


def grpc_message(size: int, sent: int) -> bytes:
    """The first `sent` bytes of an uncompressed gRPC message announcing `size` bytes (zeros: never parsed)."""
    return (b"\0" + U32.pack(size) + bytes(max(0, sent - 5)))[:sent]


def announce(port: int, count: int, length: int) -> list[socket.socket]:
    """`count` HTTP connections that announce a body of `length` bytes and send none of it."""
    head = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length
    conns = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(head)
        conns.append(s)
    return conns


def stall_streams(port: int, streams: int, *, sent: int, size: int) -> tuple[RawH2, list[int]]:
    """One connection opening `streams` ModelInfer calls that each send `sent` bytes of a `size`-byte message
    and stop. Returns the connection (close it) and the calls the server had not ended once all were sent."""
    h2 = RawH2(port)
    for i in range(streams):
        sid = 2 * i + 1
        h2.open(sid)
        h2.data(sid, grpc_message(size, sent), timeout_s=5)
    with h2.lock:
        return h2, [sid for sid in h2.windows if sid not in h2.ended]


def rapid_reset(port: int, pairs: int, *, batch: int = 100) -> tuple[Frame | None, bool]:
    """One connection sending up to `pairs` ModelInfer HEADERS each followed by its RST_STREAM, `batch` pairs a
    write, until the peer hangs up. Returns the GOAWAY the peer sent (None if none came within 30 s) and whether
    it closed the connection."""
    with RawH2(port) as h2:
        sid = 1
        while sid < 2 * pairs and not h2.closed.is_set():
            block = b"".join(
                frame(HEADERS, END_HEADERS, s, h2.header_block(MODEL_INFER)) + frame(RST_STREAM, 0, s, U32.pack(8))
                for s in range(sid, sid + 2 * batch, 2)
            )
            if not h2.send(block):
                break
            sid += 2 * batch
        goaway = h2.wait_for(GOAWAY, timeout_s=30)
        return goaway, h2.closed.wait(30 if goaway is not None else 0)


# -- attackers at a fixed rate, for `benchmarks.chaos costs`: (gRPC port, HTTP port, stop, held), each appends
# what it opens to `held` ---------------------------------------------------------------------------------------
WINDOW_0 = struct.pack(">HI", _INITIAL_WINDOW, 0)  # a client's SETTINGS: a receive window of 0 on every stream


class Silent:
    """A raw HTTP/2 client connection that never reads: frames written at once, HPACK of its own."""

    def __init__(self, port: int, settings: bytes = b"") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.encoder, self.sid, self.sent = hpack.Encoder(), -1, 0
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))

    def open(self, method: str) -> int:
        """A new stream calling `method` of the inference service (HEADERS, not ended)."""
        self.sid += 2
        path = f"/inference.GRPCInferenceService/{method}"
        fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x"), ("te", "trailers")]
        block = self.encoder.encode([*fields, ("content-type", "application/grpc")])
        self.send(frame(HEADERS, END_HEADERS, self.sid, block))
        return self.sid

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
            self.sent += 1
        except OSError:  # closed by the peer, or its buffers full: the attacker goes on
            pass

    def close(self) -> None:
        self.sock.close()


def closed_by_peer(conn: socket.socket | Silent) -> bool:
    """Whether the peer closed this connection (what it sent is read and dropped)."""
    sock = conn.sock if isinstance(conn, Silent) else conn
    sock.setblocking(False)
    try:
        while sock.recv(1 << 20):
            pass
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


def infer_message(rows: int, *, short: bool = False, rid: str = "attack") -> bytes:
    """A ModelInfer request of `tiny` ([rows, 4] FP32) as a gRPC message; `short`: 4 bytes short (refused)."""
    from tritonclient.grpc import service_pb2 as pb

    req = pb.ModelInferRequest(model_name="tiny", id=rid)
    req.inputs.add(name="x", datatype="FP32", shape=[rows, 4])
    req.raw_input_contents.append(bytes(rows * 16 - (4 if short else 0)))
    body = req.SerializeToString()
    return b"\0" + U32.pack(len(body)) + body


def at_rate(per_s: float, stop: threading.Event, act: Callable[[int], None]) -> None:
    """`act(i)` `per_s` times a second until `stop`."""
    started, i = time.monotonic(), 0
    while not stop.is_set():
        act(i)
        i += 1
        stop.wait(max(0.0, started + i / per_s - time.monotonic()))


def idle_connections(grpc_port: int, http_port: int, stop: threading.Event, held: list) -> None:
    """150 gRPC connections (preface and settings, then nothing) and 150 HTTP ones (no byte) a second."""

    def one(_: int) -> None:
        for port, hello in ((grpc_port, PREFACE + frame(SETTINGS, 0, 0)), (http_port, b"")):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                held[-1].sendall(hello)
            except OSError:
                pass

    at_rate(150, stop, one)


def zero_window(port: int, _: int, stop: threading.Event, held: list) -> None:
    """One connection with a window of 0: 10 stream messages of 40 KB and 1 unary call a second, none read."""
    conn = Silent(port, WINDOW_0)
    held.append(conn)
    stream, message = conn.open("ModelStreamInfer"), infer_message(2500)
    size = len(message)

    def one(i: int) -> None:
        conn.send(b"".join(frame(DATA, 0, stream, message[a : a + _FRAME_BYTES]) for a in range(0, size, _FRAME_BYTES)))
        if i % 10 == 0:
            conn.send(frame(DATA, END_STREAM, conn.open("ModelInfer"), infer_message(1)))

    at_rate(10, stop, one)


def error_answers(port: int, _: int, stop: threading.Event, held: list) -> None:
    """One connection with a window of 0: 20 streams a second, 100 failing requests a second among them, each
    with a 16 KB id that its error answer repeats; none read."""
    conn = Silent(port, WINDOW_0)
    held.append(conn)
    streams: list[int] = []
    bad = infer_message(60, short=True, rid="e" * 16000)

    def one(i: int) -> None:
        if i % 5 == 0:
            streams.append(conn.open("ModelStreamInfer"))
        conn.send(frame(DATA, 0, streams[-1 - i % len(streams)], bad))

    at_rate(100, stop, one)


def streams_left(port: int, _: int, stop: threading.Event, held: list) -> None:
    """4 connections opening 500 streams a second each (ModelInfer and ServerLive by turns): headers only, never
    ended or reset."""
    conns = [Silent(port) for _ in range(4)]
    held.extend(conns)
    at_rate(2000, stop, lambda i: conns[i % 4].open("ServerLive" if i % 8 < 4 else "ModelInfer") and None)
