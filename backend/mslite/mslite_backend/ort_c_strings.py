"""A CPU session of ONNX Runtime through its C API, for models with string tensors: strings as raw bytes.

ORT's Python binding carries `tensor(string)` only as Python `str` (an object array of `bytes` is stored
as each element's `str()`, and every string output is decoded as UTF-8), so bytes that are not UTF-8 could
not reach such a model or come back from it. The C API takes and gives each string as bytes with an
explicit length, NULs and any byte included. This module calls it with `ctypes`, through the `OrtApi`
table of function pointers that `OrtGetApiBase()->GetApi(version)` returns. The table only ever grows at
its end, so a member's index is fixed for good: `_INDEX` holds the few used here (from the C header,
`onnxruntime_c_api.h`, of API version 19). Only models with string tensors pay for this path.

A request may carry millions of strings, so nothing here calls into C once per element: the inputs go in
with one `FillStringTensor` call over an array of pointers to the `bytes` objects' own buffers (which
CPython ends with a NUL), and only elements holding a NUL of their own, which that call cuts short, are
written again at their full length; the outputs come out with one `GetStringTensorContent` call.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from .errors import InferenceFailure, ModelLoadError, RequestError
from .ort_c_api import BYTES_DATA_OFFSET, SIZE, Api, CRunOptions, P, api
from .session import SessionSettings

_STRING = 8  # ONNXTensorElementDataType of tensor(string)
# ONNXTensorElementDataType <-> numpy, for the numeric tensors beside the strings
_ELEMENT_TYPES = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    4: np.uint16,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
}
_TYPE_OF = {np.dtype(t): code for code, t in _ELEMENT_TYPES.items()}


class CStringSession:
    """A CPU session run through the C API: `run(output_names, feeds)` as `OrtSession.run`, strings as bytes.

    String inputs are object arrays of `bytes`; string outputs come back as object arrays of `bytes`.
    """

    def __init__(self, model: str | bytes, settings: SessionSettings, *, where: str = "") -> None:
        """Open the session with `settings` (`session.session_settings`, which the Python API's sessions use too).

        Raises:
            ModelLoadError: ONNX Runtime could not load the model.
            OSError: the C API is not available (the caller falls back to the Python binding).
        """
        self._session: P | None = None  # before anything can fail: `close` runs from `__del__` too
        self._run_options: CRunOptions | None = None  # of every run, when set (`use_run_options`)
        self._name_arrays: dict[tuple[str, ...], Any] = {}
        self._api = a = api()
        self._where = f"model '{where}', " if where else ""
        options = P()
        a.check(a.CreateSessionOptions(ctypes.byref(options)), ModelLoadError)
        try:
            a.check(a.SetIntraOpNumThreads(options, settings.intra_op_threads), ModelLoadError)
            a.check(a.SetInterOpNumThreads(options, settings.inter_op_threads), ModelLoadError)
            a.check(a.SetSessionExecutionMode(options, int(settings.parallel)), ModelLoadError)
            arena = a.EnableCpuMemArena if settings.mem_arena else a.DisableCpuMemArena
            a.check(arena(options), ModelLoadError)
            a.check(a.SetSessionGraphOptimizationLevel(options, settings.optimization_level), ModelLoadError)
            for key, value in settings.config_entries:
                a.check(a.AddSessionConfigEntry(options, key.encode(), value.encode()), ModelLoadError)
            session = P()
            if isinstance(model, bytes):
                status = a.CreateSessionFromArray(a.env, model, len(model), options, ctypes.byref(session))
            else:
                status = a.CreateSession(a.env, os.fsencode(model), options, ctypes.byref(session))
            a.check(status, ModelLoadError, f"{self._where}ONNX Runtime could not load the model: ")
        finally:
            a.ReleaseSessionOptions(options)
        self._session = session

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run once; every value made here is released before it returns, whatever happened.

        Raises:
            RequestError: ONNX Runtime rejected the inputs (shape, type or values).
            InferenceFailure: any other runtime failure.
        """
        a = self._api
        made: list[P] = []  # OrtValues to release
        keep: list[np.ndarray] = []  # numeric inputs' memory, which ORT reads in place during Run
        outputs = (P * len(output_names))()
        try:
            inputs = (P * len(feeds))(*(self._tensor(name, array, made, keep) for name, array in feeds.items()))
            in_names, out_names = self._names(tuple(feeds)), self._names(tuple(output_names))
            options = self._run_options.handle if self._run_options is not None else None
            status = a.Run(self._session, options, in_names, inputs, len(feeds), out_names, len(output_names), outputs)
            # the inputs' copies go before the outputs are copied out: a big string request holds one at a time
            _release(a, made)
            made.extend(P(v) for v in outputs if v)
            a.check(status)
            results = []
            while made:  # each output's native copy goes as soon as numpy holds it
                value = made.pop(0)
                try:
                    results.append(self._array(value))
                finally:
                    a.ReleaseValue(value)
            return results
        finally:
            _release(a, made)

    def _names(self, names: tuple[str, ...]) -> Any:
        """The C array of `names`, made once per set of names (a model has few: its inputs, its outputs)."""
        array = self._name_arrays.get(names)
        if array is None:
            array = self._name_arrays[names] = (ctypes.c_char_p * len(names))(*(n.encode() for n in names))
        return array

    def use_run_options(self, options: CRunOptions) -> None:
        """Make every later run with `options` (the execute deadline stops runs through them: `deadline`)."""
        self._run_options = options

    def close(self) -> None:
        """Release the native session (idempotent)."""
        if self._session is not None:
            self._api.ReleaseSession(self._session)
            self._session = None

    def __del__(self) -> None:
        self.close()

    def _tensor(self, name: str, array: np.ndarray, made: list[P], keep: list[np.ndarray]) -> P:
        """An OrtValue of `array` (appended to `made`): strings copied, numbers read in place."""
        a = self._api
        shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        value = P()
        if array.dtype == np.object_:
            elements = array.ravel().tolist()  # references, in C order: they keep every buffer alive below
            if set(map(type, elements)) - {bytes}:
                index, kind = next((i, type(e).__name__) for i, e in enumerate(elements) if type(e) is not bytes)
                raise RequestError(f"{self._where}input '{name}': element {index} is {kind}, not bytes")
            a.check(a.CreateTensorAsOrtValue(a.allocator, shape, array.ndim, _STRING, ctypes.byref(value)))
            made.append(value)
            if elements:
                self._fill(value, elements)
            return value
        code = _TYPE_OF.get(array.dtype)
        if code is None:
            raise RequestError(f"{self._where}input '{name}': data type {array.dtype} is not served")
        array = np.ascontiguousarray(array)
        keep.append(array)
        status = a.CreateTensorWithDataAsOrtValue(
            a.cpu, array.ctypes.data, array.nbytes, shape, array.ndim, code, ctypes.byref(value)
        )
        a.check(status)
        made.append(value)
        return value

    def _fill(self, value: P, elements: list[bytes]) -> None:
        """Copy `elements` (all `bytes`, at least one) into the string tensor `value`, byte for byte."""
        a = self._api
        pointers = np.fromiter(map(id, elements), dtype=np.uintp, count=len(elements))
        pointers += BYTES_DATA_OFFSET
        a.check(a.FillStringTensor(value, pointers.ctypes.data, len(elements)))
        del pointers
        stored = SIZE()
        a.check(a.GetStringTensorDataLength(value, ctypes.byref(stored)))
        if stored.value == sum(map(len, elements)):
            return
        # FillStringTensor read each string up to its first NUL: those holding one are written again in full
        buffer = ctypes.c_char_p()
        for index, element in enumerate(elements):
            if b"\0" in element:
                a.check(a.GetResizedStringTensorElementBuffer(value, index, len(element), ctypes.byref(buffer)))
                ctypes.memmove(buffer, element, len(element))

    def _array(self, value: P) -> np.ndarray:
        """A numpy copy of an output OrtValue: an object array of `bytes` for strings."""
        a = self._api
        info = P()
        a.check(a.GetTensorTypeAndShape(value, ctypes.byref(info)))
        try:
            code, rank, count = ctypes.c_int(), SIZE(), SIZE()
            a.check(a.GetTensorElementType(info, ctypes.byref(code)))
            a.check(a.GetDimensionsCount(info, ctypes.byref(rank)))
            dims = (ctypes.c_int64 * rank.value)()
            a.check(a.GetDimensions(info, dims, rank.value))
            a.check(a.GetTensorShapeElementCount(info, ctypes.byref(count)))
        finally:
            a.ReleaseTensorTypeAndShapeInfo(info)
        shape = tuple(dims)
        n = count.value
        if code.value == _STRING:
            total = SIZE()
            a.check(a.GetStringTensorDataLength(value, ctypes.byref(total)))
            content = ctypes.create_string_buffer(max(total.value, 1))
            bounds = np.empty(n + 1, dtype=np.uintp)  # where each string starts, then where the last one ends
            a.check(a.GetStringTensorContent(value, content, total.value, bounds.ctypes.data, n))
            bounds[n] = total.value
            raw = ctypes.string_at(content, total.value)
            del content
            # one slice of `raw` per element, made by `map` in C rather than a Python loop; a memoryview
            # yields its numbers one at a time, where a list of them would cost 40 bytes per element at once
            edges = bounds.data
            out = np.fromiter(map(raw.__getitem__, map(slice, edges[:n], edges[1:])), dtype=object, count=n)
            return out.reshape(shape)
        dtype = _ELEMENT_TYPES.get(code.value)
        if dtype is None:
            raise InferenceFailure(f"inference failed: an output of element type {code.value} is not served")
        data = P()
        a.check(a.GetTensorMutableData(value, ctypes.byref(data)))
        out = np.empty(shape, dtype=dtype)
        if out.nbytes:
            ctypes.memmove(out.ctypes.data, data, out.nbytes)
        return out


def _release(a: Api, values: list[P]) -> None:
    """Release every OrtValue in `values`, emptying it (so a later release skips them)."""
    while values:
        a.ReleaseValue(values.pop())
