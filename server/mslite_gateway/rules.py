"""What the gateway refuses before a request reaches Triton: the rules both protocols share.

Triton 2.51 keeps a batch size as uint32 (a batch dim of 2^32 + 1 is served as batch 1), allocates a JSON
input's declared size before reading it (shape [2^40, 4] aborts the server), reads gRPC versions with
`std::stol` ('1abc' is version 1) and has no size cap at all. So every tensor a request declares is checked
here: a known datatype, every dim an integer in [0, 2^31), and the bytes it needs, added up over the whole
request, within the gateway's cap. A refusal is a `Refusal` carrying a message that names the input and the
problem; the fronts turn it into HTTP 400/413 or gRPC INVALID_ARGUMENT/RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import hmac
import re
import zlib
from collections.abc import Iterable, Sequence

from mslite_contract.protocol import ADMIN_KEY_GRPC_HEADER, ADMIN_KEY_HEADER, GATEWAY_REGION_PREFIX

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
REGION_NEEDS_KEY = (
    f"naming a shared-memory region needs the admin key (HTTP header '{ADMIN_KEY_HEADER}', gRPC metadata "
    f"'{ADMIN_KEY_GRPC_HEADER}'); without it, send the tensor data in the request"
)
STRING_LIMIT_OPTION = "--max-string-elements"  # the settings named in the answers
UPSTREAM_TIMEOUT_OPTION = "--upstream-timeout-s"
_DIGITS = re.compile(r"[0-9]+")
# What std::stol reads: blanks (isspace), an optional sign, decimal digits.
_STOL_PREFIX = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]+", re.ASCII)
_LONG_MAX = (1 << 63) - 1
_SHOWN_CHARS = 200  # of a client's text echoed in Triton's words


class Refusal(Exception):
    """A request the gateway answers itself: a client error (`too_large` = over the size cap).

    `status` is the HTTP status of the answer (413 when `too_large`, else 400 unless given: 403 for a
    request that needs the admin key, 404 where Triton itself answers 404); the gRPC front maps it to a
    status code (`grpc_code`).
    """

    def __init__(self, message: str, *, too_large: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.too_large = too_large
        self.status = status if status is not None else 413 if too_large else 400


def check_http_version(version: str) -> None:
    """The version in an HTTP inference URL: digits, as Triton's own route takes them.

    Raises:
        Refusal: not digits (Triton's route does not match: its 404 'Not Found'), or digits Triton
            cannot take as one version (`check_grpc_version`).
    """
    if not (version.isascii() and version.isdigit()):
        raise Refusal("Not Found", status=404)
    check_grpc_version(version)


def check_grpc_version(version: str) -> None:
    """A model version: empty (latest) or a decimal integer below 2^63, of at most MAX_VERSION_DIGITS digits.

    Triton 2.51 reads it with `std::stol`: what stol cannot read, and negative values, Triton refuses
    itself, and those get Triton's own words here; what stol reads only in part ('1abc', '+1', ' 1',
    '1.0' are served as version 1) is refused in ours.

    Raises:
        Refusal: anything else.
    """
    if version == "" or (_DIGITS.fullmatch(version) and len(version) <= MAX_VERSION_DIGITS):
        return
    lead = _STOL_PREFIX.match(version)
    value = int(lead.group(0)) if lead and len(lead.group(0)) <= 4000 else None  # int() stops at 4300 digits
    shown = version[:_SHOWN_CHARS]  # the whole answer must fit in one HTTP/2 frame
    if value is None or not -_LONG_MAX - 1 <= value <= _LONG_MAX:
        raise Refusal(
            f"failed to get model version from specified version string '{shown}' (details: stol), "
            "version should be an integral value > 0"
        )
    if value < 0:
        raise Refusal(f"invalid model version specified '{shown}' , version should be an integral value > 0")
    raise Refusal(
        f"model version {version[:40]!r} is not valid: it must be a decimal integer (digits only, at most "
        f"{MAX_VERSION_DIGITS}); the server would read it as version {value}"
    )


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
    """Adds up the bytes and string elements a request's tensors need; refuses the request past either cap."""

    def __init__(self, cap: int, max_strings: int) -> None:
        self.cap = cap
        self.used = 0
        self.max_strings = max_strings
        self.strings = 0

    def add_strings(self, name: str, shape: Sequence[int], count: int) -> None:
        """Count the `count` elements of BYTES input `name`: each costs the model's worker per element.

        Raises:
            Refusal (too_large): the request now declares more string elements than `max_strings`.
        """
        self.strings += count
        if self.strings > self.max_strings:
            raise Refusal(
                f"input '{name}' (shape {list(shape)}, BYTES) brings the request to {self.strings} string elements, "
                f"over this server's limit of {self.max_strings} per request (mslite-triton serve "
                f"{STRING_LIMIT_OPTION}); send fewer strings per request",
                too_large=True,
            )

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


def empty_batches(inputs: Iterable[tuple[str, Sequence[int]]]) -> list[tuple[str, list[int]]]:
    """The inputs (name, shape) whose first dim is 0: an empty batch, if the model batches (`check_batches`)."""
    return [(name, list(shape)) for name, shape in inputs if len(shape) and shape[0] == 0]


def check_batches(model: str, empty: Sequence[tuple[str, Sequence[int]]], max_batch_size: int) -> None:
    """Refuse a request of batch size 0 to a model that batches.

    Triton 2.51 takes a batching model's first dim as the batch size and, when it is 0, checks the rest of the
    shape as one item's: a request whose item has no elements (a variable dim of 0, as in [0, 0]) passes, is
    counted as a success and is never answered, over HTTP and gRPC alike, holding its connection and
    tritonserver's memory for good. A model without batching (max_batch_size 0) answers such shapes.

    Raises:
        Refusal: `max_batch_size` > 0 and an input in `empty` (`empty_batches`).
    """
    if max_batch_size > 0 and empty:
        raise empty_batch_refusal(model, empty, f"the model batches up to {max_batch_size}")


def empty_batch_refusal(model: str, empty: Sequence[tuple[str, Sequence[int]]], why: str) -> Refusal:
    """The refusal of a request of batch size 0 (`empty`: its inputs whose first dim is 0), in Triton's words."""
    name, shape = empty[0]
    return Refusal(
        f"inference request batch-size must be >= 1 for '{model[:200]}': input '{name[:200]}' has shape "
        f"{list(shape)}, a batch of 0 ({why})"
    )


def no_answer(timeout_s: float) -> str:
    """What a client is told when Triton did not answer its request within the gateway's upstream timeout."""
    return (
        f"no answer from the inference server within {timeout_s:g} s (this server's limit: mslite-triton serve "
        f"{UPSTREAM_TIMEOUT_OPTION})"
    )


def byte_size_mismatch(name: str, model: str, expected: int, got: int) -> Refusal:
    """Triton's own wording for a tensor whose bytes do not match its shape, so clients see one message."""
    return Refusal(f"input byte size mismatch for input '{name}' for model '{model}'. Expected {expected}, got {got}")


def check_region_name(name: str, region: str, *, keyed: bool) -> None:
    """A request may name the gateway's staging regions never, and other shared-memory regions with the key.

    Triton lets any request that names a registered region read and write it (only registering needs the
    key), and region names can be guessed: without the key, naming one is refused before Triton looks
    it up, so the answer says nothing about which regions exist.

    Raises:
        Refusal: a region name with the gateway's prefix (400), or any region without the admin key (403).
    """
    if region.startswith(GATEWAY_REGION_PREFIX):
        raise Refusal(f"{name}: shared-memory regions named '{GATEWAY_REGION_PREFIX}...' are the server's own")
    if not keyed:
        raise Refusal(f"{name}: {REGION_NEEDS_KEY}", status=403)


# what a private server's gateway answers a request without the key (`GatewayOptions.key_on_every_request`)
KEY_REQUIRED = f"this server serves one program only: every request needs its admin key (header '{ADMIN_KEY_HEADER}')"


def holds_key(sent: bytes | None, admin_key: str | None) -> bool:
    """Whether a request came with the admin key: `sent` (the header's value) is it, or the server has none."""
    if not admin_key:
        return True
    return sent is not None and hmac.compare_digest(sent, admin_key.encode())


def check_own_region(region: str, what: str) -> None:
    """A shared-memory call may not register or unregister one of the gateway's staging regions by name.

    Raises:
        Refusal: `region` has the gateway's prefix.
    """
    if region.startswith(GATEWAY_REGION_PREFIX):
        raise Refusal(
            f"shared-memory region '{region[:80]}' is the server's own (names '{GATEWAY_REGION_PREFIX}...'): "
            f"it cannot be {what} by clients"
        )


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
