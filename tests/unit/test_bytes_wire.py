"""`bytes_wire` converts BYTES tensors as Triton's own functions do, byte for byte (Triton's module, no server)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import pytriton

from mslite_backend import bytes_wire

ELEMENTS = [b"", b"a", b"\x00", b"he\x00llo", b"end\x00", b"\xff\xfe", "\u00e9\U0001f600".encode(), bytes(range(256))]


@pytest.fixture(scope="module")
def triton() -> ModuleType:
    """Triton's `triton_python_backend_utils`, from the server the wheel ships (importable outside the stub)."""
    path = Path(pytriton.__file__).parent / "tritonserver" / "backends" / "python" / "triton_python_backend_utils.py"
    spec = importlib.util.spec_from_file_location("triton_utils_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _objects(values: list, shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array.reshape(shape)


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    mixed = [ELEMENTS[i] for i in rng.integers(0, len(ELEMENTS), 6000)]
    whole = _objects(mixed, (60, 100))
    return [_objects(ELEMENTS, (8,)), _objects(ELEMENTS, (2, 4)), whole, whole[:, ::3], whole.T, _objects([b""], (1,))]


@pytest.mark.parametrize("array", _cases(), ids=["flat", "2d", "large", "strided", "transposed", "one_empty"])
def test_serialize_and_deserialize_match_tritons_byte_for_byte(triton: ModuleType, array: np.ndarray) -> None:
    serialize = bytes_wire.serializer(triton.serialize_byte_tensor)
    wire = serialize(array)
    assert isinstance(wire, np.ndarray) and wire.dtype == np.uint8
    assert wire.tobytes() == triton.serialize_byte_tensor(array)
    back = bytes_wire.deserialize(wire)
    want = triton.deserialize_bytes_tensor(wire)
    assert back.dtype == object and back.shape == want.shape == (array.size,)
    assert back.tolist() == want.tolist() == array.ravel().tolist()
    assert [type(v) for v in back] == [bytes] * array.size


def test_what_only_tritons_serializer_defines_goes_to_it(triton: ModuleType) -> None:
    serialize = bytes_wire.serializer(triton.serialize_byte_tensor)
    texts = _objects(["text", b"bytes", 7], (3,))  # not all bytes: each written as its str() in UTF-8
    assert serialize(texts) == triton.serialize_byte_tensor(texts)
    fixed = np.array([b"ab", b"c"], dtype=np.bytes_)
    assert serialize(fixed) == triton.serialize_byte_tensor(fixed)
    empty = np.empty((0, 3), dtype=object)
    assert serialize(empty) == triton.serialize_byte_tensor(empty)


def test_deserializing_data_cut_short_is_refused() -> None:
    wire = np.frombuffer(b"\x03\x00\x00\x00ab", dtype=np.uint8)
    with pytest.raises(ValueError, match="runs past the data's 6 bytes"):
        bytes_wire.deserialize(wire)
    with pytest.raises(ValueError, match="inside an element's length"):
        bytes_wire.deserialize(np.frombuffer(b"\x01\x00\x00\x00a\x02\x00", dtype=np.uint8))
    assert bytes_wire.deserialize(np.zeros(0, dtype=np.uint8)).shape == (0,)
