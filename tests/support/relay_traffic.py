"""Recorded traffic of one relayed connection, for the relays' golden tests and the replay benchmark.

gRPC (`perf_analyzer_tiny`, `tritonclient_tiny`: `grpc.core`'s tests) and HTTP/1.1 (`perf_analyzer_tiny_http`:
`http.connection`'s and `http.responses`' tests, `relay_replay --protocol http`).

A recording is the reads of one connection in their order, each from the client (`c`) or from tritonserver
(`t`); on disk, each read is its side's letter, its length (4 bytes, big-endian) and its bytes.
`benchmarks/relay_replay.py` records them (perf_analyzer or tritonclient through a pass-through relay).
"""

from __future__ import annotations

import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent / "relay_traffic"
_READ = struct.Struct(">cI")
_SIDES = {b"c": "client", b"t": "server"}  # the pass-through relay's names of the two sides
_LETTERS = {v: k for k, v in _SIDES.items()}


def save(path: Path, reads: list[tuple[str, bytes]]) -> None:
    """Write `reads` ((side, bytes), side "client" or "server") to `path`."""
    path.write_bytes(b"".join(_READ.pack(_LETTERS[side], len(data)) + data for side, data in reads))


def load(path: Path) -> list[tuple[str, bytes]]:
    """The reads saved in `path`."""
    raw, pos, reads = path.read_bytes(), 0, []
    while pos < len(raw):
        letter, n = _READ.unpack_from(raw, pos)
        pos += _READ.size
        reads.append((_SIDES[letter], raw[pos : pos + n]))
        pos += n
    return reads
