"""Scrubbing grpc-message in an HPACK trailers block, every other byte (and the dynamic table) unchanged."""

from __future__ import annotations

import hpack

from mslite_contract.scrub import scrub
from mslite_gateway.grpc.trailers import scrub_grpc_message

MESSAGE = (
    "load failed for model 'bad1': Internal: TritonModelException: model 'bad1': model file 'model.onnx' is not "
    "a valid ONNX model (DecodeError)%0A%0AAt:%0A  /tmp/mslite-triton-x/backends/mslite/model.py(124): "
    "auto_complete_config%0A;%0A"
)


def _triton_block(message: str, first: bool) -> bytes:
    """Trailers as Triton 2.51's gRPC core encodes them (captured): grpc-status indexed, grpc-message not."""
    literal = b"\x00\x0cgrpc-message" + _length(len(message)) + message.encode()
    if first:  # content-type and grpc-status enter the dynamic table
        return (
            bytes.fromhex(
                "88400c636f6e74656e742d74797065106170706c69636174696f6e2f67727063400b677270632d7374617475730133"
            )
            + literal
        )
    return bytes.fromhex("88bfbe") + literal  # then they are referenced by index


def _length(n: int) -> bytes:
    return bytes([n]) if n < 127 else bytes([127]) + _tail(n - 127)


def _tail(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_the_message_is_scrubbed_and_the_decoder_state_is_unchanged() -> None:
    decoder, reference = hpack.Decoder(), hpack.Decoder()
    for first in (True, False):
        block = _triton_block(MESSAGE, first)
        scrubbed = scrub_grpc_message(block, scrub)
        headers = dict(decoder.decode(scrubbed, raw=True))
        expected = dict(reference.decode(block, raw=True))
        assert headers[b"grpc-status"] == expected[b"grpc-status"] == b"3"
        message = headers[b"grpc-message"].decode()
        assert message.endswith("is not a valid ONNX model (DecodeError)") and "/tmp" not in message
        assert list(decoder.header_table.dynamic_entries) == list(reference.header_table.dynamic_entries)


def test_blocks_with_nothing_to_scrub_or_unreadable_pass_unchanged() -> None:
    clean = _triton_block("model 'm' is not found", True)
    assert scrub_grpc_message(clean, scrub) is clean
    truncated = _triton_block(MESSAGE, True)[:-40]
    assert scrub_grpc_message(truncated, scrub) is truncated
    encoded = hpack.Encoder().encode([("grpc-status", "0")])  # no grpc-message at all
    assert scrub_grpc_message(encoded, scrub) is encoded


def test_a_long_message_gets_a_multi_byte_length() -> None:
    long = "x" * 300 + "%0A%0AAt:%0A  /a/b/model.py(1): f"
    scrubbed = scrub_grpc_message(_triton_block(long, False), scrub)
    decoder = hpack.Decoder()
    decoder.decode(_triton_block("seed", True), raw=True)  # the table the second block refers to
    assert dict(decoder.decode(scrubbed, raw=True))[b"grpc-message"] == b"x" * 300


def test_our_trailers_and_scrubbed_ones_share_one_encoding():
    import urllib.parse

    import hpack

    from mslite_gateway.grpc.frames import trailers_only
    from mslite_gateway.grpc.trailers import grpc_message_value, literal_not_indexed

    message = 'input "x" <of> {shape} 100% wrong: ü ' * 8  # over 127 bytes: a length of more than one byte
    block = trailers_only(1, 3, message)[9:]
    decoder = hpack.Decoder()
    fields = dict(decoder.decode(block, raw=True))
    assert fields[b"grpc-message"] == grpc_message_value(message)
    assert urllib.parse.unquote(fields[b"grpc-message"].decode()) == message
    assert literal_not_indexed(b"grpc-message", grpc_message_value(message)) in block
    assert len(decoder.header_table.dynamic_entries) == 0  # no field of ours changes the client's table
