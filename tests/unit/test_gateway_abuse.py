"""The gateway's defences against clients that hold or churn (no server): per-connection shares, bytes counted
as they arrive, and the gRPC relay's reset budget, fed frames directly as the replay benchmark does."""

from __future__ import annotations

import hpack
import pytest

from mslite_contract.gateway_options import GatewayLimits, GatewayOptions
from mslite_gateway.admission import Account, Admission, Overloaded
from mslite_gateway.grpc.core import MAX_RESETS_PER_WINDOW
from mslite_gateway.grpc.frames import (
    DATA,
    END_HEADERS,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    HEADERS,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    U32,
    frame,
)
from tests.support.relay_wire import End, Wire, frames_of


def test_one_connection_holds_at_most_its_share():
    admission = Admission(max_inflight_per_model=10, max_inflight_bytes=1000, max_inflight_bytes_per_connection=300)
    a, b = Account(), Account()
    admission.take_bytes(200, a)
    with pytest.raises(Overloaded, match="kLiteServiceDeny: this connection's requests .* per connection"):
        admission.take_bytes(200, a)  # another request of the same connection
    admission.take_bytes(500, a, own=200)  # the same request grows: a request alone always fits its connection
    admission.take_bytes(250, b)  # another connection has its own share
    with pytest.raises(Overloaded, match="the server is busy"):
        admission.take_bytes(100, b, own=250)  # ... within the budget of all
    admission.give_bytes(700, a)
    admission.give_bytes(250, b)
    assert admission.bytes == a.bytes == b.bytes == 0 and admission.denied == 2


def test_admission_counts_what_arrives_after_it_admitted_more():
    admission = Admission(max_inflight_per_model=10, max_inflight_bytes=1000)
    a = Account()
    admission.take_bytes(100, a, admit=900)  # a frame of 900 bytes fits; 100 of them came so far
    assert admission.bytes == a.bytes == 100
    admission.take_bytes(800, Account())  # another connection's bytes that did come
    with pytest.raises(Overloaded):
        admission.take_bytes(10, Account(), admit=200)  # a frame that would not fit: nothing counted
    admission.count_bytes(800, a)  # the rest of the first frame
    assert admission.bytes == 1700 and a.bytes == 900
    with pytest.raises(ValueError, match="body_stall_timeout_s"):
        Admission(max_inflight_per_model=1, max_inflight_bytes=1, body_stall_timeout_s=0)


def _relay() -> tuple[Wire, End, End]:
    client = Wire()
    client.from_client(PREFACE + frame(SETTINGS, 0, 0))
    return client, client.client, client.triton


def _headers(encoder: hpack.Encoder, sid: int, path: str = "/inference.GRPCInferenceService/ServerLive") -> bytes:
    fields = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x")]
    return frame(HEADERS, END_HEADERS, sid, encoder.encode(fields))


def test_resets_of_streams_triton_never_had_open_are_not_relayed():
    client, _, to_triton = _relay()
    encoder = hpack.Encoder()
    client.from_client(frame(RST_STREAM, 0, 101, U32.pack(8)))  # a stream never opened
    client.from_client(_headers(encoder, 1) + frame(RST_STREAM, 0, 1, U32.pack(8)))  # opened, then cancelled
    client.from_client(frame(RST_STREAM, 0, 1, U32.pack(8)))  # the same one again: closed already
    resets = [sid for kind, _, sid, _ in frames_of(bytes(to_triton.data[len(PREFACE) :])) if kind == RST_STREAM]
    assert resets == [1]


def test_rapid_reset_ends_the_connection_with_enhance_your_calm():
    client, to_client, to_triton = _relay()
    encoder = hpack.Encoder()
    sid = 1
    for _ in range(MAX_RESETS_PER_WINDOW * 3 // 100):  # reads of 100 open-and-cancel pairs
        client.from_client(
            b"".join(_headers(encoder, s) + frame(RST_STREAM, 0, s, U32.pack(8)) for s in range(sid, sid + 200, 2))
        )
        sid += 200
    assert to_client.closed and to_triton.closed
    goaway = [f for f in frames_of(bytes(to_client.data)) if f[0] == GOAWAY]
    assert len(goaway) == 1 and int.from_bytes(goaway[0][3][4:8], "big") == ENHANCE_YOUR_CALM
    resets = sum(1 for f in frames_of(bytes(to_triton.data[len(PREFACE) :])) if f[0] == RST_STREAM)
    assert resets <= MAX_RESETS_PER_WINDOW  # what Triton saw of it: written at most up to the read that passed it
    assert client.rules.calmed == 1


def test_a_data_frame_counts_only_the_bytes_that_came():
    client, _, _ = _relay()
    encoder = hpack.Encoder()
    message = b"\0" + U32.pack(1 << 20) + bytes(1 << 20)
    head = frame(DATA, 0, 1, message[:16384])[:9]
    client.from_client(_headers(encoder, 1, "/inference.GRPCInferenceService/ModelInfer") + head + message[:1000])
    admission = client.rules.admission
    assert admission.bytes == client.core.account.bytes == 1000  # a 16 KiB frame announced, 1000 bytes of it came
    client.from_client(message[1000:5000])
    assert admission.bytes == 5000
    client.from_client(message[5000:16384])
    assert admission.bytes == 16384
    client.from_client(frame(RST_STREAM, 0, 1, U32.pack(8)))  # the client gives up: what the stream held is given back
    assert admission.bytes == client.core.account.bytes == 0


def test_the_stall_timeout_and_the_share_are_settings_down_to_the_gateway_process(tmp_path):
    from mslite_server.cli import build_parser
    from mslite_server.gateway_process import GatewayProcess

    args = build_parser().parse_args(
        ["serve", "--body-stall-timeout-s", "2.5", "--max-inflight-mib-per-connection", "16"]
    )
    assert args.body_stall_timeout_s == 2.5 and args.max_inflight_mib_per_connection == 16
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--body-stall-timeout-s", "0"])
    limits = GatewayLimits(max_inflight_bytes_per_connection=16 << 20, body_stall_timeout_s=2.5)
    options = GatewayOptions(
        http_port=1, grpc_port=2, upstream_http="127.0.0.1:3", upstream_grpc="127.0.0.1:4", limits=limits
    )
    argv = GatewayProcess(options, log_path=tmp_path / "gateway.log").options.to_argv()
    assert "--body-stall-timeout-s=2.5" in argv
    assert f"--max-inflight-bytes-per-connection={16 << 20}" in argv
