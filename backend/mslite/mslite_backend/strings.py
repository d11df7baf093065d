"""String (Triton BYTES, ONNX `tensor(string)`) tensors through ONNX Runtime's Python API: the fallback path.

A CPU model with string tensors normally runs through ORT's C API (`ort_c_strings`), which carries every
string as bytes. This module is what runs when that API cannot be loaded, and on other providers.

Triton hands a BYTES tensor over as a numpy object array of `bytes`; ONNX Runtime's Python API takes
an object array of `str` (it stores anything else as its `str()`, so `b'hi'` would become the text
"b'hi'") and encodes each as UTF-8 into its std::string; outputs come back as `str`, decoded from
UTF-8. So UTF-8 text, embedded NULs and empty strings included, goes through unchanged, and bytes
that are not UTF-8 cannot reach the model through this API at all: such an element is refused,
named, rather than altered.
"""

from __future__ import annotations

import numpy as np

from .errors import RequestError

_decode = np.frompyfunc(bytes.decode, 1, 1)
_encode = np.frompyfunc(str.encode, 1, 1)


def to_ort(where: str, name: str, array: np.ndarray) -> np.ndarray:
    """The `str` array ONNX Runtime takes for a BYTES input `name` (an object array of `bytes`).

    Raises:
        RequestError: an element is not bytes of valid UTF-8 (naming the first such element).
    """
    try:
        return np.asarray(_decode(array), dtype=object)
    except (UnicodeDecodeError, TypeError):
        pass
    for index, value in enumerate(array.flat):
        if not isinstance(value, bytes):
            raise RequestError(f"{where}, input '{name}': element {index} is {type(value).__name__}, not bytes")
        try:
            value.decode()
        except UnicodeDecodeError as e:
            raise RequestError(
                f"{where}, input '{name}': element {index} is not valid UTF-8 (byte 0x{value[e.start]:02x} at "
                f"offset {e.start}); this backend passes strings to ONNX Runtime as UTF-8 text, so only UTF-8 "
                "strings can be sent"
            ) from None
    raise RequestError(f"{where}, input '{name}': the strings could not be read")  # not reached: one failed above


def from_ort(array: np.ndarray) -> np.ndarray:
    """The object array of `bytes` Triton sends for a string output ONNX Runtime returned as `str`."""
    return np.asarray(_encode(array), dtype=object)


def placeholder(shape: list[int]) -> np.ndarray:
    """A BYTES input for the warm-up run: "0" everywhere, which a string -> number cast accepts too."""
    return np.full(shape, b"0", dtype=object)
