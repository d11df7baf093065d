"""Sending: a worker's connections to the server, `run_cases` over worker threads, and the one fatal request.

HTTP requests go over a keep-alive connection, `RawHttp` bytes over a fresh socket each, gRPC bytes through
a raw unary call (bytes in, bytes out), so corrupt messages reach the server as they are.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from tests.support.badinput.bar import OK_STATUSES, Outcome, Tally
from tests.support.badinput.cases import Case
from tests.support.badinput.encoding import NUMPY, HttpRequest, RawHttp, clip, infer_path

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def _error_text(body: bytes) -> str:
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and "error" in doc:
            return str(doc["error"])
    except ValueError:
        pass
    return body.decode("utf-8", "replace")[:1000]


def _http_outputs(body: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    n = int(header_length) if header_length else len(body)
    doc = json.loads(body[:n])
    out, offset = {}, n
    for o in doc["outputs"]:
        dtype = NUMPY[o["datatype"]]
        if "data" in o:
            out[o["name"]] = np.array(o["data"], dtype=dtype).reshape(o["shape"])
        else:
            size = int(o["parameters"]["binary_data_size"])
            out[o["name"]] = np.frombuffer(body[offset : offset + size], dtype=dtype).reshape(o["shape"])
            offset += size
    return out


def _grpc_outputs(data: bytes) -> dict[str, np.ndarray]:
    resp = pb.ModelInferResponse.FromString(data)
    return {
        o.name: np.frombuffer(raw, dtype=NUMPY[o.datatype]).reshape(list(o.shape))
        for o, raw in zip(resp.outputs, resp.raw_output_contents)
    }


class Sender:
    """One worker's connections: a keep-alive HTTP connection, a gRPC channel, fresh sockets for raw HTTP."""

    def __init__(self, http_url: str, grpc_url: str, *, timeout_s: float = 30.0) -> None:
        host, port = urllib.parse.urlsplit(http_url).netloc.rsplit(":", 1)
        self.http_addr = (host, int(port))
        self.timeout_s = timeout_s
        self.conn: http.client.HTTPConnection | None = None
        self.reused = False
        target = grpc_url.split("://", 1)[-1]
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        self.channel = grpc.insecure_channel(target, options=options)
        self.infer = self.channel.unary_unary(MODEL_INFER)  # bytes in, bytes out: corrupt messages go through

    def close(self) -> None:
        self._drop()
        self.channel.close()

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.reused = None, False

    def send(self, case: Case) -> Outcome:
        t0 = time.monotonic()
        r = case.request
        outputs: dict[str, np.ndarray] | None = None
        if isinstance(r, HttpRequest):
            status, body, header_length = self._http(r)
            message = "" if status in OK_STATUSES else _error_text(body)
            if case.valid and status == "200":
                outputs = _http_outputs(body, header_length)
        elif isinstance(r, RawHttp):
            status, message = self._raw(r)
        else:
            status, message, data = self._grpc(r)
            if case.valid and data is not None:
                outputs = _grpc_outputs(data)
        outcome = Outcome(case, status, message, time.monotonic() - t0)
        if case.valid and outputs is not None and case.check is not None:
            outcome.problem = case.check(outputs)
        return outcome

    def _http(self, r: HttpRequest) -> tuple[str, bytes, str | None]:
        for _ in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(*self.http_addr, timeout=self.timeout_s)
            reused, self.reused = self.reused, True
            try:
                self.conn.request(r.method, r.path, body=r.body, headers=r.headers)
                resp = self.conn.getresponse()
                body = resp.read()
            except TimeoutError:
                self._drop()
                return "TIMEOUT", b"", None
            except (http.client.RemoteDisconnected, ConnectionError, http.client.BadStatusLine) as e:
                self._drop()
                if reused:  # the server may close an idle keep-alive connection: try once on a fresh one
                    continue
                return "NO_ANSWER", repr(e).encode(), None
            if resp.will_close:
                self._drop()
            return str(resp.status), body, resp.getheader("Inference-Header-Content-Length")
        return "NO_ANSWER", b"", None

    def _raw(self, r: RawHttp) -> tuple[str, str]:
        data = b""
        with socket.create_connection(self.http_addr, timeout=10) as s:
            try:
                s.sendall(r.data)
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server may stop reading and close first: what it answered is still read below
            try:
                while chunk := s.recv(65536):
                    data += chunk
            except TimeoutError:
                if not data:
                    return "TIMEOUT", ""
            except OSError:
                pass
        m = re.match(rb"HTTP/\d\.\d (\d{3}) ?([^\r\n]*)\r\n", data)
        if not m:
            return "NO_ANSWER", clip(data, 200) if data else ""
        body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
        return m.group(1).decode(), _error_text(body) or m.group(2).decode(errors="replace")

    def _grpc(self, data: bytes) -> tuple[str, str, bytes | None]:
        try:
            return "OK", "", self.infer(data, timeout=self.timeout_s)
        except grpc.RpcError as e:
            code = e.code()  # type: ignore[attr-defined]
            status = "TIMEOUT" if code == grpc.StatusCode.DEADLINE_EXCEEDED else code.name
            return status, e.details() or "", None  # type: ignore[attr-defined]


def run_cases(
    cases: Iterable[Case],
    http_url: str,
    grpc_url: str,
    *,
    threads: int = 4,
    tally: Tally | None = None,
    deadline: float | None = None,
) -> Tally:
    """Send every case from `threads` workers (each with its own connections); stops early at `deadline`."""
    tally = tally or Tally()
    source = iter(cases)
    lock = threading.Lock()
    errors: list[BaseException] = []
    t0 = time.monotonic()

    def worker() -> None:
        sender = Sender(http_url, grpc_url)
        try:
            while deadline is None or time.monotonic() < deadline:
                with lock:
                    case = next(source, None)
                if case is None:
                    return
                tally.add(sender.send(case))
        except BaseException as e:  # noqa: BLE001  (re-raised in the caller's thread)
            errors.append(e)
        finally:
            sender.close()

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    tally.seconds += time.monotonic() - t0
    if errors:
        raise errors[0]
    return tally


def crash_probe(http_url: str, timeout_s: float = 30.0) -> tuple[str, str]:
    """POST a 90-byte JSON request to `tiny` declaring shape [2^40, 4]: Triton 2.51 tries to allocate 16 TiB first.

    Returns (status, message): today ("NO_ANSWER", ...) and the server has aborted with std::bad_alloc.
    Only ever run it against a server of your own.
    """
    doc = {"inputs": [{"name": "x", "shape": [2**40, 4], "datatype": "FP32", "data": [1.0]}]}
    request = HttpRequest(infer_path("tiny"), json.dumps(doc).encode(), {"Content-Type": "application/json"})
    sender = Sender(http_url, "127.0.0.1:9", timeout_s=timeout_s)  # the gRPC channel is never used
    try:
        o = sender.send(Case(0, "http", "crash_probe", "tiny", "declares 16 TiB of JSON data", request))
    finally:
        sender.close()
    return o.status, o.message
