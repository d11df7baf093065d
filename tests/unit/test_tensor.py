from __future__ import annotations

import numpy as np
import pytest

from mslite_triton.tensor import (
    DataType,
    Format,
    ModelType,
    Tensor,
    TensorMeta,
    from_numpy_dtype,
    from_triton_dtype,
    to_numpy_dtype,
)

ALL_DTYPES = [
    (DataType.BOOL, np.bool_, "BOOL"),
    (DataType.INT8, np.int8, "INT8"),
    (DataType.INT16, np.int16, "INT16"),
    (DataType.INT32, np.int32, "INT32"),
    (DataType.INT64, np.int64, "INT64"),
    (DataType.UINT8, np.uint8, "UINT8"),
    (DataType.UINT16, np.uint16, "UINT16"),
    (DataType.UINT32, np.uint32, "UINT32"),
    (DataType.UINT64, np.uint64, "UINT64"),
    (DataType.FLOAT16, np.float16, "FP16"),
    (DataType.FLOAT32, np.float32, "FP32"),
    (DataType.FLOAT64, np.float64, "FP64"),
]


def _sample(np_type: type, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    n = int(np.prod(shape))
    if np_type is np.bool_:
        return (np.arange(n) % 2 == 0).reshape(shape)
    return np.arange(n).astype(np_type).reshape(shape)


# --- enums -----------------------------------------------------------------------------------


def test_enum_values() -> None:
    assert {m.name: int(m) for m in DataType} == {
        "UNKNOWN": 0, "BOOL": 30, "INT8": 32, "INT16": 33, "INT32": 34, "INT64": 35, "UINT8": 37,
        "UINT16": 38, "UINT32": 39, "UINT64": 40, "FLOAT16": 42, "FLOAT32": 43, "FLOAT64": 44,
        "INVALID": 2147483647,
    }  # fmt: skip
    assert {m.name: int(m) for m in Format} == {
        "DEFAULT": -1, "NCHW": 0, "NHWC": 1, "NHWC4": 2, "HWKC": 3, "HWCK": 4, "KCHW": 5, "CKHW": 6,
        "KHWC": 7, "CHWK": 8, "HW": 9, "HW4": 10, "NC": 11, "NC4": 12, "NC4HW4": 13, "NCDHW": 15,
        "NWC": 16, "NCW": 17, "NDHWC": 18, "NC8HW8": 19,
    }  # fmt: skip
    assert ModelType.MINDIR == 0 and ModelType.MINDIR_LITE == 4
    assert len(ModelType) == 2


def test_enum_str_forms() -> None:
    assert str(DataType.FLOAT32) == "DataType.FLOAT32"
    assert f"{DataType.INT8}" == "DataType.INT8"
    assert str(Format.NHWC) == "Format.NHWC"
    assert f"{Format.DEFAULT}" == "Format.DEFAULT"
    assert str(ModelType.MINDIR_LITE) == "ModelType.MINDIR_LITE"


@pytest.mark.parametrize(("dt", "np_type", "triton"), ALL_DTYPES)
def test_dtype_mappings_round_trip(dt: DataType, np_type: type, triton: str) -> None:
    assert to_numpy_dtype(dt) == np.dtype(np_type)
    assert from_numpy_dtype(np_type) is dt
    assert from_numpy_dtype(np.dtype(np_type)) is dt
    assert from_triton_dtype(triton) is dt


def test_from_numpy_dtype_aliases() -> None:
    assert from_numpy_dtype(np.longlong) is DataType.INT64
    assert from_numpy_dtype(np.ulonglong) is DataType.UINT64
    assert from_numpy_dtype("float32") is DataType.FLOAT32


@pytest.mark.parametrize("bad", [np.complex64, np.object_, ">f4", "U3", np.float128])
def test_from_numpy_dtype_unsupported(bad: object) -> None:
    with pytest.raises(TypeError, match=r"^Unsupported numpy dtype value "):
        from_numpy_dtype(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("dt", [DataType.UNKNOWN, DataType.INVALID])
def test_unmapped_datatypes(dt: DataType) -> None:
    with pytest.raises(TypeError, match=f"^Unsupported DataType {dt}.$"):
        to_numpy_dtype(dt)


@pytest.mark.parametrize("name", ["BYTES", "BF16", "fp32", ""])
def test_from_triton_dtype_unsupported(name: str) -> None:
    with pytest.raises(TypeError, match="Unsupported Triton datatype"):
        from_triton_dtype(name)


# --- TensorMeta ------------------------------------------------------------------------------


def test_tensor_meta_defaults_and_str() -> None:
    meta = TensorMeta()
    assert meta.name == ""
    assert meta.dtype is DataType.UNKNOWN
    assert meta.shape == []
    assert meta.format is Format.DEFAULT
    assert meta.element_num == 0
    assert meta.data_size == 0
    assert str(meta) == (
        "name: ,\ndtype: DataType.UNKNOWN,\nshape: [],\nformat: Format.DEFAULT,\nelement_num: 0,\ndata_size: 0."
    )


# --- Tensor construction ---------------------------------------------------------------------


def test_default_tensor() -> None:
    t = Tensor()
    assert t.name == ""
    assert t.dtype is DataType.FLOAT32
    assert t.shape == []
    assert t.format is Format.NCHW
    assert t.element_num == 1
    assert t.data_size == 4
    assert t.device == "None:-1"
    assert str(t) == (
        "name: ,\ndtype: DataType.FLOAT32,\nshape: [],\nformat: Format.NCHW,\n"
        "element_num: 1,\ndata_size: 4.\ndevice: None:-1."
    )


def test_shape_and_dtype_give_empty_tensor() -> None:
    t = Tensor(shape=(2, 3), dtype=DataType.INT32)
    assert t.shape == [2, 3]
    assert t.dtype is DataType.INT32
    assert t.format is Format.NCHW
    assert t.element_num == 6
    assert t.data_size == 24
    assert t.get_data_to_numpy().tolist() == [[0, 0, 0], [0, 0, 0]]  # zeros, allocated as MindSpore Lite does


@pytest.mark.parametrize("kwargs", [{"shape": [2, 3]}, {"dtype": DataType.INT8}])
def test_lone_shape_or_dtype_is_ignored(kwargs: dict) -> None:
    t = Tensor(**kwargs)
    assert t.dtype is DataType.FLOAT32
    assert t.shape == []


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        (3, "shape must be list or tuple, but got <class 'int'>."),
        ("23", "shape must be list or tuple, but got <class 'str'>."),
        ([1, "a"], "shape element must be int, but got <class 'str'> at index 1."),
        ((1, 2.0), "shape element must be int, but got <class 'float'> at index 1."),
    ],
)
def test_bad_shape_argument(shape: object, message: str) -> None:
    with pytest.raises(TypeError) as exc:
        Tensor(shape=shape, dtype=DataType.FLOAT32)  # type: ignore[arg-type]
    assert str(exc.value) == message


def test_bad_dtype_argument() -> None:
    with pytest.raises(TypeError) as exc:
        Tensor(shape=[1], dtype=43)  # type: ignore[arg-type]
    assert str(exc.value) == "dtype must be DataType, but got <class 'int'>."
    with pytest.raises(TypeError) as exc:
        Tensor(shape=[1], dtype=Format.NCHW)  # type: ignore[arg-type]
    assert str(exc.value) == "dtype must be DataType, but got <enum 'Format'>."


@pytest.mark.parametrize(
    ("device", "expected"),
    [(None, "None:-1"), ("ascend", "ascend:-1"), ("ascend:0", "ascend:0"), ("ascend:7", "ascend:7")],
)
def test_device_accepted(device: str | None, expected: str) -> None:
    t = Tensor(np.zeros(2, np.float32), device=device)
    assert t.device == expected
    assert str(t).endswith(f"device: {expected}.")
    # Data stays on the host.
    assert np.array_equal(t.get_data_to_numpy(), np.zeros(2, np.float32))


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (0, "device must be str, but got <class 'int'>."),
        ("gpu", "now only support ascend device."),
        ("cpu", "now only support ascend device."),
        ("Ascend:0", "now only support ascend device."),
        ("ascend:0:1", "device must be 'ascend:index', eg: 'ascend:0'"),
        ("ascend:x", "device id should >= 0."),
        ("ascend:-1", "device id should >= 0."),
        ("ascend:", "device id should >= 0."),
    ],
)
def test_device_rejected(device: object, message: str) -> None:
    with pytest.raises(TypeError) as exc:
        Tensor(device=device)  # type: ignore[arg-type]
    assert str(exc.value) == message


def test_validation_order_shape_device_dtype_tensor() -> None:
    with pytest.raises(TypeError, match="^shape must be"):
        Tensor("x", shape="bad", dtype="bad", device=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^device must be str"):
        Tensor("x", dtype="bad", device=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^dtype must be DataType"):
        Tensor("x", dtype="bad")  # type: ignore[arg-type]


def test_bad_tensor_argument() -> None:
    with pytest.raises(TypeError) as exc:
        Tensor([1, 2])  # type: ignore[arg-type]
    assert str(exc.value) == (
        "tensor must be MindSpore Lite's Tensor._tensor or numpy ndarray, but got <class 'list'>."
    )


def test_numpy_wrap_is_zero_copy() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor(arr)
    assert t.shape == [2, 3]
    assert t.dtype is DataType.FLOAT32
    assert t.format is Format.NCHW
    assert t.element_num == 6 and t.data_size == 24
    arr[0, 0] = 42.0
    out = t.get_data_to_numpy()
    assert out[0, 0] == 42.0
    assert np.shares_memory(out, arr)
    # Writing through the returned array writes the tensor (and the user's array).
    out[1, 2] = -1.0
    assert arr[1, 2] == -1.0


def test_numpy_wrap_with_matching_shape_and_dtype() -> None:
    arr = np.ones((2, 3), np.int64)
    t = Tensor(arr, shape=(2, 3), dtype=DataType.INT64)
    assert t.shape == [2, 3] and t.dtype is DataType.INT64


def test_numpy_non_contiguous_is_made_contiguous() -> None:
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    view = base[:, ::2]
    t = Tensor(view)
    assert t.shape == [3, 2]
    assert t.get_data_to_numpy().flags.c_contiguous
    assert np.array_equal(t.get_data_to_numpy(), view)
    fortran = np.asfortranarray(base)
    t2 = Tensor(fortran)
    assert t2.get_data_to_numpy().flags.c_contiguous
    assert np.array_equal(t2.get_data_to_numpy(), base)


def test_numpy_zero_dim_array() -> None:
    t = Tensor(np.array(3.5, dtype=np.float64))
    assert t.shape == []
    assert t.element_num == 1 and t.data_size == 8
    assert t.get_data_to_numpy().shape == ()
    assert t.get_data_to_numpy() == 3.5


def test_numpy_shape_disagreement() -> None:
    with pytest.raises(TypeError) as exc:
        Tensor(np.zeros((2, 3), np.float32), shape=[3, 2])
    assert str(exc.value) == ("user set shape is not equal numpy shape, user shape: [3, 2], numpy shape is: (2, 3).")


def test_numpy_dtype_disagreement() -> None:
    with pytest.raises(TypeError) as exc:
        Tensor(np.zeros((2, 3), np.float32), dtype=DataType.INT32)
    assert str(exc.value) == (
        "user set dtype is not equal numpy dtype, user dtype: DataType.INT32, numpy dtype is: float32."
    )


def test_numpy_unsupported_dtype() -> None:
    with pytest.raises(TypeError) as exc:
        Tensor(np.zeros(2, np.complex64))
    assert str(exc.value) == "Unsupported numpy dtype value complex64"
    with pytest.raises(TypeError, match="^Unsupported numpy dtype value <U1$"):
        Tensor(np.array(["a"]))


def test_tensor_copy() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    src = Tensor(arr)
    src.name = "src"
    src.format = Format.NHWC
    dst = Tensor(src, shape=[2, 3], dtype=DataType.FLOAT32)
    assert dst.shape == [2, 3]
    assert dst.dtype is DataType.FLOAT32
    assert dst.name == ""
    assert dst.format is Format.NCHW
    arr[0, 0] = 100.0
    assert dst.get_data_to_numpy()[0, 0] == 0.0
    assert not np.shares_memory(dst.get_data_to_numpy(), arr)


def test_tensor_copy_of_tensor_without_data() -> None:
    src = Tensor(shape=[4], dtype=DataType.UINT8)
    dst = Tensor(src)
    assert dst.shape == [4] and dst.dtype is DataType.UINT8
    # and neither has data: predict says so for both (tests/integration/test_resize.py)


def test_tensor_copy_disagreement() -> None:
    src = Tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError) as exc:
        Tensor(src, shape=[6])
    assert str(exc.value) == ("user set shape is not equal numpy shape, user's shape: [6], tensor shape is: [2, 3].")
    with pytest.raises(TypeError) as exc:
        Tensor(src, dtype=DataType.INT8)
    assert str(exc.value) == (
        "user set dtype is not equal tensor dtype, user's dtype: DataType.INT8, tensor dtype is: DataType.FLOAT32."
    )


# --- properties ------------------------------------------------------------------------------


def test_property_setters() -> None:
    t = Tensor()
    t.name = "tensor1"
    t.dtype = DataType.FLOAT32
    t.shape = [1, 3, 2, 2]
    t.format = Format.NCHW
    assert t.name == "tensor1"
    assert t.shape == [1, 3, 2, 2]
    assert t.element_num == 12
    assert t.data_size == 48
    assert str(t) == (
        "name: tensor1,\ndtype: DataType.FLOAT32,\nshape: [1, 3, 2, 2],\nformat: Format.NCHW,\n"
        "element_num: 12,\ndata_size: 48.\ndevice: None:-1."
    )


@pytest.mark.parametrize(
    ("attr", "value", "message"),
    [
        ("name", 1, "name must be str, but got <class 'int'>."),
        ("dtype", "float32", "dtype must be DataType, but got <class 'str'>."),
        ("dtype", 43, "dtype must be DataType, but got <class 'int'>."),
        ("format", 0, "format must be Format, but got <class 'int'>."),
        ("format", DataType.UNKNOWN, "format must be Format, but got <enum 'DataType'>."),
        ("shape", None, "shape must be list or tuple, but got <class 'NoneType'>."),
        ("shape", [1, None], "shape element must be int, but got <class 'NoneType'> at index 1."),
        ("shape", [np.int64(2)], "shape element must be int, but got <class 'numpy.int64'> at index 0."),
    ],
)
def test_property_setter_errors(attr: str, value: object, message: str) -> None:
    t = Tensor()
    with pytest.raises(TypeError) as exc:
        setattr(t, attr, value)
    assert str(exc.value) == message


def test_shape_getter_returns_a_copy_list() -> None:
    t = Tensor(shape=(2, 3), dtype=DataType.FLOAT32)
    shape = t.shape
    assert isinstance(shape, list)
    shape.append(9)
    assert t.shape == [2, 3]
    t.shape = (4,)
    assert t.shape == [4]


def test_dynamic_dimension() -> None:
    t = Tensor(shape=[-1, 3], dtype=DataType.FLOAT32)
    assert t.element_num == 0
    assert t.data_size == 0
    assert t.get_data_to_numpy().size == 0
    with pytest.raises(RuntimeError, match=r"^data size not equal! Numpy size: 24, Tensor size: 0 \("):
        t.set_data_from_numpy(np.zeros((2, 3), np.float32))
    t.shape = [2, 3]
    t.set_data_from_numpy(np.ones((2, 3), np.float32))
    assert t.get_data_to_numpy().shape == (2, 3)


# --- data ------------------------------------------------------------------------------------


def test_set_data_from_numpy_not_ndarray() -> None:
    t = Tensor(shape=[2], dtype=DataType.FLOAT32)
    with pytest.raises(TypeError) as exc:
        t.set_data_from_numpy([1.0, 2.0])  # type: ignore[arg-type]
    assert str(exc.value) == "numpy_obj must be numpy.ndarray, but got <class 'list'>."


def test_set_data_from_numpy_dtype_mismatch() -> None:
    t = Tensor(shape=[2, 3], dtype=DataType.FLOAT32)
    with pytest.raises(RuntimeError) as exc:
        t.set_data_from_numpy(np.zeros((2, 3), np.float64))
    assert str(exc.value) == (
        "data type not equal! Numpy type: <class 'numpy.float64'>, Tensor type: DataType.FLOAT32 "
        "(tensor shape [2, 3], numpy shape [2, 3])"
    )


def test_set_data_from_numpy_size_mismatch() -> None:
    t = Tensor(shape=[2, 3], dtype=DataType.FLOAT32)
    with pytest.raises(RuntimeError) as exc:
        t.set_data_from_numpy(np.zeros(2, np.float32))
    assert str(exc.value) == (
        "data size not equal! Numpy size: 8, Tensor size: 24 (tensor shape [2, 3], numpy shape [2])"
    )


def test_set_data_from_numpy_size_mismatch_names_the_tensor() -> None:
    # MindSpore Lite's text first (code may match on it), then which tensor and both shapes.
    t = Tensor(shape=[1, 3, 224, 224], dtype=DataType.FLOAT32)
    t.name = "input"
    with pytest.raises(RuntimeError) as exc:
        t.set_data_from_numpy(np.zeros((1, 3, 112, 112), np.float32))
    assert str(exc.value) == (
        "data size not equal! Numpy size: 150528, Tensor size: 602112 "
        "(tensor 'input' shape [1, 3, 224, 224], numpy shape [1, 3, 112, 112])"
    )


def test_set_data_from_numpy_unsupported_dtype() -> None:
    t = Tensor(shape=[2], dtype=DataType.FLOAT32)
    with pytest.raises(TypeError, match="^Unsupported numpy dtype value complex128$"):
        t.set_data_from_numpy(np.zeros(2, np.complex128))


def test_set_data_from_flat_numpy_keeps_tensor_shape() -> None:
    # The MindSpore Lite quick start: tensor.shape = [...]; set_data_from_numpy(np.fromfile(...)).
    t = Tensor()
    t.shape = [1, 3, 2, 2]
    t.dtype = DataType.FLOAT32
    flat = np.arange(12, dtype=np.float32)
    t.set_data_from_numpy(flat)
    assert t.shape == [1, 3, 2, 2]
    data = t.get_data_to_numpy()
    assert data.shape == (1, 3, 2, 2)
    assert np.array_equal(data.ravel(), flat)
    # Zero copy: the tensor references the user's buffer.
    flat[0] = 7.0
    assert t.get_data_to_numpy()[0, 0, 0, 0] == 7.0
    assert str(t) == (
        "name: ,\ndtype: DataType.FLOAT32,\nshape: [1, 3, 2, 2],\nformat: Format.NCHW,\n"
        "element_num: 12,\ndata_size: 48.\ndevice: None:-1."
    )


def test_set_data_from_numpy_with_other_shape_same_size() -> None:
    t = Tensor(shape=[2, 3], dtype=DataType.INT32)
    t.set_data_from_numpy(np.arange(6, dtype=np.int32).reshape(3, 2))
    assert t.shape == [2, 3]
    assert t.get_data_to_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_get_data_to_numpy_without_data_gives_zeros() -> None:
    t = Tensor(shape=[2, 2], dtype=DataType.INT16)
    out = t.get_data_to_numpy()
    assert out.shape == (2, 2) and out.dtype == np.int16
    assert not out.any()
    # The memory now belongs to the tensor: filling it in place fills the tensor.
    out[:] = 5
    assert t.get_data_to_numpy().tolist() == [[5, 5], [5, 5]]


def test_get_data_to_numpy_unknown_dtype() -> None:
    t = Tensor(shape=[2], dtype=DataType.UNKNOWN)
    assert t.data_size == 0
    with pytest.raises(TypeError, match="^Unsupported DataType DataType.UNKNOWN.$"):
        t.get_data_to_numpy()


def test_get_data_to_numpy_reshape_in_place_does_not_touch_tensor() -> None:
    t = Tensor(np.zeros((2, 3), np.float32))
    out = t.get_data_to_numpy()
    out.shape = (6,)
    assert t.get_data_to_numpy().shape == (2, 3)


def test_reshape_keeps_data_of_same_size_and_drops_otherwise() -> None:
    t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    t.shape = [3, 2]
    assert t.get_data_to_numpy().tolist() == [[0, 1], [2, 3], [4, 5]]
    t.shape = [4, 4]  # resize before set_data_from_numpy: allowed, old data dropped
    assert t.element_num == 16
    assert not t.get_data_to_numpy().any()
    t.set_data_from_numpy(np.ones(16, np.float32))
    assert t.get_data_to_numpy().shape == (4, 4)


def test_dtype_change_drops_data() -> None:
    t = Tensor(np.ones(4, np.float32))
    t.dtype = DataType.FLOAT32
    assert t.get_data_to_numpy().sum() == 4
    t.dtype = DataType.INT32
    assert t.get_data_to_numpy().tolist() == [0, 0, 0, 0]  # dropped: fresh zeros of the new type


@pytest.mark.parametrize(("dt", "np_type", "triton"), ALL_DTYPES)
def test_all_dtypes_round_trip(dt: DataType, np_type: type, triton: str) -> None:
    arr = _sample(np_type)
    wrapped = Tensor(arr)
    assert wrapped.dtype is dt
    assert wrapped.data_size == arr.nbytes
    out = wrapped.get_data_to_numpy()
    assert out.dtype == np.dtype(np_type)
    assert np.array_equal(out, arr)

    t = Tensor(shape=[2, 3], dtype=from_triton_dtype(triton))
    assert t.data_size == arr.nbytes
    t.set_data_from_numpy(arr.ravel())
    assert np.array_equal(t.get_data_to_numpy(), arr)
    assert t.get_data_to_numpy().dtype == np.dtype(np_type)

    back = Tensor(t.get_data_to_numpy())
    assert back.dtype is dt
    assert np.array_equal(back.get_data_to_numpy(), arr)
