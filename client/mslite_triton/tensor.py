"""Tensor, TensorMeta and the DataType / Format / ModelType enums of MindSpore Lite.

Data always stays in host memory as a numpy array: models run on the Triton server, so
``device="ascend[:N]"`` is accepted and reported, but nothing is copied to a device.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from mslite_contract.dtypes import WIRE_TO_NUMPY

from ._checkparam import Checked, check_device, check_isinstance, check_shape, instance_of

# MindSpore Lite's `mindspore_lite.tensor` names; ModelType is defined here but exported by `.model`, as there.
__all__ = ["DataType", "Format", "Tensor", "TensorMeta"]


class _NamedIntEnum(IntEnum):
    # Python 3.11 made str()/format() of an IntEnum print the bare number; MindSpore Lite's
    # enums print "DataType.FLOAT32", and that text appears in Tensor.__str__ and messages.
    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, format_spec: str) -> str:
        return format(str(self), format_spec)


class DataType(_NamedIntEnum):
    """Data type of a Tensor; values are MindSpore Lite's (``TypeId``) numbers."""

    UNKNOWN = 0
    BOOL = 30
    INT8 = 32
    INT16 = 33
    INT32 = 34
    INT64 = 35
    UINT8 = 37
    UINT16 = 38
    UINT32 = 39
    UINT64 = 40
    FLOAT16 = 42
    FLOAT32 = 43
    FLOAT64 = 44
    INVALID = 2147483647


class Format(_NamedIntEnum):
    """Memory layout of a Tensor; values are MindSpore Lite's."""

    DEFAULT = -1
    NCHW = 0
    NHWC = 1
    NHWC4 = 2
    HWKC = 3
    HWCK = 4
    KCHW = 5
    CKHW = 6
    KHWC = 7
    CHWK = 8
    HW = 9
    HW4 = 10
    NC = 11
    NC4 = 12
    NC4HW4 = 13
    NCDHW = 15
    NWC = 16
    NCW = 17
    NDHWC = 18
    NC8HW8 = 19


class ModelType(_NamedIntEnum):
    """Model file type: ``MINDIR`` (.mindir) or ``MINDIR_LITE`` (.ms)."""

    MINDIR = 0
    MINDIR_LITE = 4


# DataType <-> the Triton datatype string; the numpy dtype of each is the backend's dtype table's (dtypes.py).
_TO_TRITON: dict[DataType, str] = {
    DataType.BOOL: "BOOL",
    DataType.INT8: "INT8",
    DataType.INT16: "INT16",
    DataType.INT32: "INT32",
    DataType.INT64: "INT64",
    DataType.UINT8: "UINT8",
    DataType.UINT16: "UINT16",
    DataType.UINT32: "UINT32",
    DataType.UINT64: "UINT64",
    DataType.FLOAT16: "FP16",
    DataType.FLOAT32: "FP32",
    DataType.FLOAT64: "FP64",
}
_FROM_TRITON = {name: dt for dt, name in _TO_TRITON.items()}
_TO_NUMPY = {dt: WIRE_TO_NUMPY[name] for dt, name in _TO_TRITON.items()}
# Keyed by (kind, itemsize) so aliases such as np.longlong vs np.int64 map alike.
_FROM_NUMPY = {(npd.kind, npd.itemsize): dt for dt, npd in _TO_NUMPY.items()}


def to_numpy_dtype(dtype: DataType) -> np.dtype[Any]:
    """Return the numpy dtype of a DataType.

    Raises:
        TypeError: ``dtype`` has no numpy equivalent (UNKNOWN, INVALID).
    """
    try:
        return _TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"Unsupported DataType {dtype}.") from None


def from_numpy_dtype(dtype: npt.DTypeLike) -> DataType:
    """Return the DataType of a numpy dtype (or anything ``numpy.dtype()`` accepts).

    Raises:
        TypeError: the dtype is not bool, a sized int/uint or float16/32/64 in native byte order.
    """
    npd = np.dtype(dtype)
    found = _FROM_NUMPY.get((npd.kind, npd.itemsize)) if npd.isnative else None
    if found is None:
        raise TypeError(f"Unsupported numpy dtype value {npd}")
    return found


def from_triton_dtype(name: str) -> DataType:
    """Return the DataType of a Triton datatype string.

    Raises:
        TypeError: ``name`` is not one of BOOL, INT8..INT64, UINT8..UINT64, FP16, FP32, FP64
            (e.g. BYTES or BF16).
    """
    try:
        return _FROM_TRITON[name]
    except KeyError:
        raise TypeError(f"Unsupported Triton datatype {name!r}.") from None


def _contiguous(array: np.ndarray) -> np.ndarray:
    # np.ascontiguousarray would turn a 0-d array into shape (1,); 0-d is always contiguous.
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def _element_num(shape: list[int]) -> int:
    # A dynamic (-1) dimension has no size yet; MindSpore Lite reports 0 elements for it.
    if any(d < 0 for d in shape):
        return 0
    return math.prod(shape)


class TensorMeta:
    """Description of a tensor without data, as returned by ``Model.get_outputs()``."""

    def __init__(self) -> None:
        self.name: str = ""
        self.dtype: DataType = DataType.UNKNOWN
        self.shape: list[int] = []
        self.format: Format = Format.DEFAULT
        self.element_num: int = 0
        self.data_size: int = 0

    def __str__(self) -> str:
        return (
            f"name: {self.name},\n"
            f"dtype: {self.dtype},\n"
            f"shape: {self.shape},\n"
            f"format: {self.format},\n"
            f"element_num: {self.element_num},\n"
            f"data_size: {self.data_size}."
        )


class Tensor:
    """A MindSpore Lite tensor backed by a host numpy array.

    Args:
        tensor: A numpy array (wrapped without a copy once C-contiguous) or another Tensor
            (its data is copied). ``None`` creates a tensor without data.
        shape: Expected shape; must equal the data's shape when ``tensor`` is given.
        dtype: Expected DataType; must equal the data's type when ``tensor`` is given.
            Without ``tensor``, ``shape`` and ``dtype`` are only used when both are given;
            otherwise the tensor is FLOAT32 with shape ``()``.
        device: ``None``, ``"ascend"`` or ``"ascend:N"``. Recorded only: data stays on the host.

    Raises:
        TypeError: ``shape`` is not a list/tuple of int, ``device`` is not a valid ascend device,
            ``dtype`` is not a DataType, ``tensor`` has an unsupported type or numpy dtype, or
            ``shape``/``dtype`` disagree with ``tensor``.
    """

    name = Checked("name", instance_of(str), "str: Name of the tensor.")
    format = Checked("format", instance_of(Format), "Format: Memory layout tag (not interpreted by this library).")

    def __init__(
        self,
        tensor: Tensor | np.ndarray | None = None,
        shape: list[int] | tuple[int, ...] | None = None,
        dtype: DataType | None = None,
        device: str | None = None,
    ) -> None:
        check_shape(shape)
        self._device_type, self._device_id = check_device(device)
        check_isinstance("dtype", dtype, DataType, True)
        self._name = ""
        self._format = Format.NCHW
        self._data: np.ndarray | None = None
        if tensor is None:
            if dtype is not None and shape is not None:
                self._dtype, self._shape = dtype, list(shape)
            else:
                self._dtype, self._shape = DataType.FLOAT32, []
        elif isinstance(tensor, Tensor):
            if shape is not None and list(shape) != tensor.shape:
                raise TypeError(
                    f"user set shape is not equal numpy shape, user's shape: {shape}, tensor shape is: {tensor.shape}."
                )
            if dtype is not None and tensor.dtype != dtype:
                raise TypeError(
                    f"user set dtype is not equal tensor dtype, user's dtype: {dtype}, tensor dtype is: {tensor.dtype}."
                )
            self._dtype, self._shape = tensor.dtype, tensor.shape
            if tensor._data is not None:
                self._data = np.array(tensor._array(), copy=True)
        elif isinstance(tensor, np.ndarray):
            array = _contiguous(tensor)
            ms_dtype = from_numpy_dtype(array.dtype)
            if shape is not None and list(shape) != list(array.shape):
                raise TypeError(
                    f"user set shape is not equal numpy shape, user shape: {shape}, numpy shape is: {array.shape}."
                )
            if dtype is not None and ms_dtype != dtype:
                raise TypeError(
                    f"user set dtype is not equal numpy dtype, user dtype: {dtype}, numpy dtype is: {array.dtype}."
                )
            self._dtype, self._shape, self._data = ms_dtype, list(array.shape), array
        else:
            raise TypeError(f"tensor must be MindSpore Lite's Tensor._tensor or numpy ndarray, but got {type(tensor)}.")

    @classmethod
    def _from_numpy(cls, name: str, array: np.ndarray) -> Tensor:
        """Wrap ``array`` (no copy when C-contiguous) as a named host tensor; used for outputs.

        Raises:
            TypeError: the array's dtype is not supported.
        """
        array = _contiguous(array)
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._dtype = from_numpy_dtype(array.dtype)
        tensor._shape = list(array.shape)
        tensor._format = Format.NCHW
        tensor._device_type, tensor._device_id = "", -1
        tensor._data = array
        return tensor

    def _array(self) -> np.ndarray:
        """Return the data to send, viewed with this tensor's shape.

        Raises:
            RuntimeError: no data was set on this tensor.
        """
        if self._data is None:
            raise RuntimeError(f"Tensor '{self._name}' has no data: call set_data_from_numpy() before predict.")
        if list(self._data.shape) == self._shape or any(d < 0 for d in self._shape):
            return self._data
        return self._data.reshape(self._shape)

    def __str__(self) -> str:
        return (
            f"name: {self.name},\n"
            f"dtype: {self.dtype},\n"
            f"shape: {self.shape},\n"
            f"format: {self.format},\n"
            f"element_num: {self.element_num},\n"
            f"data_size: {self.data_size}.\n"
            f"device: {self.device}."
        )

    @property
    def dtype(self) -> DataType:
        """DataType: Data type. Changing it drops data of another type.

        Raises:
            TypeError: set to something other than a DataType.
        """
        return self._dtype

    @dtype.setter
    def dtype(self, dtype: DataType) -> None:
        check_isinstance("dtype", dtype, DataType)
        if dtype != self._dtype:
            self._data = None
        self._dtype = dtype

    @property
    def shape(self) -> list[int]:
        """list[int]: Shape. Setting one with another element count drops the data.

        Raises:
            TypeError: set to something other than a list/tuple of int.
        """
        return list(self._shape)

    @shape.setter
    def shape(self, shape: list[int] | tuple[int, ...]) -> None:
        check_shape(shape, enable_none=False)
        new_shape = [int(d) for d in shape]
        # MindSpore Lite lets users resize a tensor before set_data_from_numpy.
        if self._data is not None and self._data.size != _element_num(new_shape):
            self._data = None
        self._shape = new_shape

    @property
    def element_num(self) -> int:
        """int: Number of elements (0 while a dimension is dynamic)."""
        return _element_num(self._shape)

    @property
    def data_size(self) -> int:
        """int: Size in bytes, ``element_num * itemsize``."""
        npd = _TO_NUMPY.get(self._dtype)
        return self.element_num * (npd.itemsize if npd is not None else 0)

    @property
    def device(self) -> str:
        """str: ``"<device>:<id>"``, ``"None:-1"`` for a host tensor."""
        return f"{self._device_type or 'None'}:{self._device_id}"

    def set_data_from_numpy(self, numpy_obj: np.ndarray) -> None:
        """Use ``numpy_obj`` as this tensor's data, without a copy once C-contiguous.

        Only the dtype and the byte size are compared; the tensor keeps its own shape, so a
        flat array of the right size is accepted.

        Args:
            numpy_obj: The data.

        Raises:
            TypeError: ``numpy_obj`` is not a numpy.ndarray or its dtype is unsupported.
            RuntimeError: its data type or byte size differs from the tensor's.
        """
        if not isinstance(numpy_obj, np.ndarray):
            raise TypeError(f"numpy_obj must be numpy.ndarray, but got {type(numpy_obj)}.")
        numpy_obj = _contiguous(numpy_obj)
        if from_numpy_dtype(numpy_obj.dtype) != self._dtype:
            raise RuntimeError(
                f"data type not equal! Numpy type: {numpy_obj.dtype.type}, Tensor type: {self.dtype}"
                f"{self._which(numpy_obj)}"
            )
        if numpy_obj.nbytes != self.data_size:
            raise RuntimeError(
                f"data size not equal! Numpy size: {numpy_obj.nbytes}, Tensor size: {self.data_size}"
                f"{self._which(numpy_obj)}"
            )
        self._data = numpy_obj

    def _which(self, array: np.ndarray) -> str:
        """MindSpore Lite's messages name neither the tensor nor the shapes: this suffix does."""
        name = f"tensor '{self._name}'" if self._name else "tensor"
        return f" ({name} shape {self._shape}, numpy shape {list(array.shape)})"

    def get_data_to_numpy(self) -> np.ndarray:
        """Return the data as a numpy array of the tensor's shape, viewing the tensor's memory.

        A tensor without data gets zero-filled memory first (as MindSpore Lite allocates it), so
        writing into the returned array fills the tensor. A tensor with a dynamic (-1) dimension
        and no data returns an empty array.

        Raises:
            TypeError: the tensor's dtype has no numpy equivalent.
        """
        if self._data is None:
            npd = to_numpy_dtype(self._dtype)
            if any(d < 0 for d in self._shape):
                return np.empty((0,), dtype=npd)
            self._data = np.zeros(self._shape, dtype=npd)
        # A fresh array object over the same memory: reshaping it in place must not touch ours.
        return self._array().view()
