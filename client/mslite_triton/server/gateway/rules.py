"""What the gateway refuses before a request reaches Triton: the rules both protocols share.

Triton 2.51 keeps a batch size as uint32 (a batch dim of 2^32 + 1 is served as batch 1), allocates a JSON
input's declared size before reading it (shape [2^40, 4] aborts the server), reads gRPC versions with
`std::stol` ('1abc' is version 1) and has no size cap at all. So every tensor a request declares is checked
here: a known datatype, every dim an integer in [0, 2^31), and the bytes it needs, added up over the whole
request, within the gateway's cap. A refusal is a `Refusal` carrying a message that names the input and the
problem; the fronts turn it into HTTP 400/413 or gRPC INVALID_ARGUMENT/RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from mslite_backend.protocol import GATEWAY_REGION_PREFIX

#: Bytes per element of every KServe v2 datatype; BYTES is variable (4-byte length prefix per element).
ELEMENT_SIZE: dict[str, int] = {
    "BOOL": 1,
    "UINT8": 1,
    "UINT16": 2,
    "UINT32": 4,
    "UINT64": 8,
    "INT8": 1,
    "INT16": 2,
    "INT32": 4,
    "INT64": 8,
    "FP16": 2,
    "BF16": 2,
    "FP32": 4,
    "FP64": 8,
    "BYTES": 4,
}
MAX_DIM = (1 << 31) - 1  # Triton 2.51 wraps batch dims >= 2^32; 2^31 keeps every dim a positive int32
MAX_VERSION_DIGITS = 18  # < 2^63: Triton parses versions as int64
_DIGITS = re.compile(r"[0-9]+")


class Refusal(Exception):
    """A request the gateway answers itself: a client error (`too_large` = over the size cap)."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.too_large = too_large


def check_version(version: str, *, allow_empty: bool) -> None:
    """A model version is empty (latest, where allowed) or a decimal integer below 2^63.

    Raises:
        Refusal: anything else ('1.0', '+1', ' 1', '1abc', '-1', 20 digits).
    """
    if version == "" and allow_empty:
        return
    if not (_DIGITS.fullmatch(version) and len(version) <= MAX_VERSION_DIGITS):
        raise Refusal(f"model version {version[:40]!r} is not valid: it must be a decimal integer (digits only)")


def check_datatype(name: str, datatype: object) -> int:
    """The element size of `datatype`.

    Raises:
        Refusal: not a KServe v2 datatype name.
    """
    size = ELEMENT_SIZE.get(datatype) if isinstance(datatype, str) else None
    if size is None:
        shown = repr(datatype)[:40]
        raise Refusal(f"input '{name}': unknown datatype {shown}; expected one of {', '.join(ELEMENT_SIZE)}")
    return size


def element_count(name: str, shape: Sequence[object]) -> int:
    """The number of elements of `shape`, every dim checked.

    Raises:
        Refusal: a dim that is not an integer in [0, 2^31).
    """
    count = 1
    for k, d in enumerate(shape):
        if type(d) is not int or not 0 <= d <= MAX_DIM:
            shown = ", ".join(repr(x)[:24] for x in shape)
            raise Refusal(
                f"input '{name}': dim {k} of shape [{shown}] is {repr(d)[:24]}; every dim must be an integer "
                f"in [0, {MAX_DIM}]"
            )
        count *= d
    return count


class SizeBudget:
    """Adds up the bytes a request's tensors need and refuses the request once they pass the cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.used = 0

    def add(self, name: str, shape: Sequence[int], datatype: str, nbytes: int) -> None:
        """Count `nbytes` for input `name`.

        Raises:
            Refusal (too_large): the request now needs more than the cap.
        """
        self.used += nbytes
        if self.used > self.cap:
            raise Refusal(
                f"input '{name}' (shape {list(shape)}, {datatype}) brings the request to {self.used} bytes of "
                f"tensor data, over this server's limit of {self.cap} bytes per request",
                too_large=True,
            )


def byte_size_mismatch(name: str, model: str, expected: int, got: int) -> Refusal:
    """Triton's own wording for a tensor whose bytes do not match its shape, so clients see one message."""
    return Refusal(f"input byte size mismatch for input '{name}' for model '{model}'. Expected {expected}, got {got}")


def check_region_name(name: str, region: str) -> None:
    """A client's request may name its own shared-memory regions, never the gateway's staging regions.

    Raises:
        Refusal: a region name with the gateway's prefix (reading or writing another request's tensors).
    """
    if region.startswith(GATEWAY_REGION_PREFIX):
        raise Refusal(f"{name}: shared-memory regions named '{GATEWAY_REGION_PREFIX}...' are the server's own")


def check_bool_bytes(name: str, data: bytes | bytearray | memoryview) -> None:
    """BOOL tensors hold one byte per element, 0 or 1; other bytes would reach the model as non-bools.

    Raises:
        Refusal: a byte other than 0 and 1.
    """
    if bytes(data).translate(None, b"\x00\x01"):
        raise Refusal(f"input '{name}': BOOL data holds bytes other than 0 and 1")


def inflate_bounded(data: bytes, cap: int, *, wbits: int, what: str, form: str) -> bytes:
    """`data` decompressed, at most `cap` bytes (a small compressed `what` may inflate to gigabytes in Triton).

    Raises:
        Refusal: not valid `form` data, or over `cap` once inflated (`too_large`).
    """
    inflater = zlib.decompressobj(wbits=wbits)
    try:
        out = inflater.decompress(data, cap + 1)
    except zlib.error as e:
        raise Refusal(f"the {what} is not valid {form} data: {e}") from None
    if len(out) > cap or inflater.unconsumed_tail:
        raise Refusal(f"the decompressed {what} is over this server's limit of {cap} bytes", too_large=True)
    return out
