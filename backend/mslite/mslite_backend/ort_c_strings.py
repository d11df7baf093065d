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

from mslite_contract.scrub import client_message

from .errors import InferenceFailure, ModelLoadError, RequestError
from .session import SessionSettings

API_VERSION = 19  # every member used here exists since this version (GetResizedStringTensorElementBuffer: 16)

# Index of each member used, in the OrtApi struct (append-only, so these never move)
_INDEX = {
    "GetErrorCode": 1,
    "GetErrorMessage": 2,
    "CreateEnv": 3,
    "CreateSession": 7,
    "CreateSessionFromArray": 8,
    "Run": 9,
    "CreateSessionOptions": 10,
    "SetSessionExecutionMode": 13,
    "EnableCpuMemArena": 18,
    "DisableCpuMemArena": 19,
    "SetSessionGraphOptimizationLevel": 23,
    "SetIntraOpNumThreads": 24,
    "SetInterOpNumThreads": 25,
    "CreateRunOptions": 39,
    "RunOptionsSetTerminate": 46,
    "RunOptionsUnsetTerminate": 47,
    "CreateTensorAsOrtValue": 48,
    "CreateTensorWithDataAsOrtValue": 49,
    "GetTensorMutableData": 51,
    "FillStringTensor": 52,
    "GetStringTensorDataLength": 53,
    "GetStringTensorContent": 54,
    "GetTensorElementType": 60,
    "GetDimensionsCount": 61,
    "GetDimensions": 62,
    "GetTensorShapeElementCount": 64,
    "GetTensorTypeAndShape": 65,
    "CreateCpuMemoryInfo": 69,
    "GetAllocatorWithDefaultOptions": 78,
    "ReleaseEnv": 92,
    "ReleaseStatus": 93,
    "ReleaseMemoryInfo": 94,
    "ReleaseSession": 95,
    "ReleaseValue": 96,
    "ReleaseRunOptions": 97,
    "ReleaseTensorTypeAndShapeInfo": 99,
    "ReleaseSessionOptions": 100,
    "AddSessionConfigEntry": 130,
    "GetResizedStringTensorElementBuffer": 252,
}

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_SIZE = ctypes.c_size_t
_I64P = ctypes.POINTER(ctypes.c_int64)
# (return type, argument types) of each member: every one but a few returns an OrtStatus* (NULL: success)
_SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "GetErrorCode": (ctypes.c_int, (_P,)),
    "GetErrorMessage": (ctypes.c_char_p, (_P,)),
    "CreateEnv": (_P, (ctypes.c_int, ctypes.c_char_p, _PP)),
    "CreateSession": (_P, (_P, ctypes.c_char_p, _P, _PP)),
    "CreateSessionFromArray": (_P, (_P, ctypes.c_char_p, _SIZE, _P, _PP)),
    "Run": (_P, (_P, _P, ctypes.POINTER(ctypes.c_char_p), _PP, _SIZE, ctypes.POINTER(ctypes.c_char_p), _SIZE, _PP)),
    "CreateSessionOptions": (_P, (_PP,)),
    "SetSessionExecutionMode": (_P, (_P, ctypes.c_int)),
    "EnableCpuMemArena": (_P, (_P,)),
    "DisableCpuMemArena": (_P, (_P,)),
    "SetSessionGraphOptimizationLevel": (_P, (_P, ctypes.c_int)),
    "SetIntraOpNumThreads": (_P, (_P, ctypes.c_int)),
    "SetInterOpNumThreads": (_P, (_P, ctypes.c_int)),
    "CreateRunOptions": (_P, (_PP,)),
    "RunOptionsSetTerminate": (_P, (_P,)),
    "RunOptionsUnsetTerminate": (_P, (_P,)),
    "CreateTensorAsOrtValue": (_P, (_P, _I64P, _SIZE, ctypes.c_int, _PP)),
    "CreateTensorWithDataAsOrtValue": (_P, (_P, _P, _SIZE, _I64P, _SIZE, ctypes.c_int, _PP)),
    "GetTensorMutableData": (_P, (_P, _PP)),
    "FillStringTensor": (_P, (_P, _P, _SIZE)),
    "GetStringTensorDataLength": (_P, (_P, ctypes.POINTER(_SIZE))),
    "GetStringTensorContent": (_P, (_P, _P, _SIZE, _P, _SIZE)),
    "GetTensorElementType": (_P, (_P, ctypes.POINTER(ctypes.c_int))),
    "GetDimensionsCount": (_P, (_P, ctypes.POINTER(_SIZE))),
    "GetDimensions": (_P, (_P, _I64P, _SIZE)),
    "GetTensorShapeElementCount": (_P, (_P, ctypes.POINTER(_SIZE))),
    "GetTensorTypeAndShape": (_P, (_P, _PP)),
    "CreateCpuMemoryInfo": (_P, (ctypes.c_int, ctypes.c_int, _PP)),
    "GetAllocatorWithDefaultOptions": (_P, (_PP,)),
    "ReleaseEnv": (None, (_P,)),
    "ReleaseStatus": (None, (_P,)),
    "ReleaseMemoryInfo": (None, (_P,)),
    "ReleaseSession": (None, (_P,)),
    "ReleaseValue": (None, (_P,)),
    "ReleaseRunOptions": (None, (_P,)),
    "ReleaseTensorTypeAndShapeInfo": (None, (_P,)),
    "ReleaseSessionOptions": (None, (_P,)),
    "AddSessionConfigEntry": (_P, (_P, ctypes.c_char_p, ctypes.c_char_p)),
    "GetResizedStringTensorElementBuffer": (_P, (_P, _SIZE, _SIZE, ctypes.POINTER(ctypes.c_char_p))),
}

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
_INVALID_ARGUMENT = 2  # OrtErrorCode: the inputs were wrong (the caller's fault), as the Python binding raises it
_LOG_ERROR = 3  # OrtLoggingLevel: warnings of ORT's own go to nobody here either


class _Api:
    """The `OrtApi` table of the ONNX Runtime library next to the Python binding, with typed members."""

    def __init__(self) -> None:
        import onnxruntime

        folder = os.path.join(os.path.dirname(onnxruntime.__file__), "capi")
        names = sorted(n for n in os.listdir(folder) if n.startswith("libonnxruntime.so"))
        if not names:
            raise OSError("no libonnxruntime.so beside the onnxruntime package")
        lib = ctypes.CDLL(os.path.join(folder, names[0]))
        get_base = lib.OrtGetApiBase
        get_base.restype = ctypes.POINTER(ctypes.c_void_p * 2)  # {GetApi, GetVersionString}
        get_api = ctypes.CFUNCTYPE(_P, ctypes.c_uint32)(get_base().contents[0])
        table = get_api(API_VERSION)
        if not table:
            raise OSError(f"ONNX Runtime does not offer C API version {API_VERSION}")
        slots = ctypes.cast(table, ctypes.POINTER(ctypes.c_void_p))
        for name, index in _INDEX.items():
            restype, argtypes = _SIGNATURES[name]
            setattr(self, name, ctypes.CFUNCTYPE(restype, *argtypes)(slots[index]))
        env = _P()
        self.check(self.CreateEnv(_LOG_ERROR, b"mslite-strings", ctypes.byref(env)), OSError)
        self.env = env  # one per process, as ORT wants; never released (workers end with their process)
        info = _P()
        self.check(self.CreateCpuMemoryInfo(0, 0, ctypes.byref(info)), OSError)
        self.cpu = info
        allocator = _P()
        self.check(self.GetAllocatorWithDefaultOptions(ctypes.byref(allocator)), OSError)
        self.allocator = allocator
        probe = b"probe\x00\xff"
        if ctypes.string_at(_data_address(probe), len(probe) + 1) != probe + b"\x00":
            raise OSError("bytes objects do not keep their data where this module expects it")

    def __getattr__(self, name: str) -> Any:
        """Only reached for a member not in `_INDEX` (the members are set in `__init__`); typed for mypy."""
        raise AttributeError(f"OrtApi member {name} is not bound here")

    def check(self, status: int | None, failure: type[Exception] = InferenceFailure, prefix: str = "") -> None:
        """Raise `failure` with ORT's message after `prefix`, if `status` is an error.

        A run's error (`failure` InferenceFailure) is a RequestError when ORT says the inputs were invalid,
        and "inference failed: ..." otherwise, as `session.failure` words the Python API's.
        """
        if not status:
            return
        code = self.GetErrorCode(status)
        message = (self.GetErrorMessage(status) or b"").decode("utf-8", "replace")
        self.ReleaseStatus(status)
        message = prefix + client_message(message)
        if failure is InferenceFailure:
            if code == _INVALID_ARGUMENT:
                raise RequestError(message)
            raise InferenceFailure(f"inference failed: {message}")
        raise failure(message)


_api: _Api | None = None

# Where a bytes object's data starts, from the object's address (its `id` in CPython): `ob_sval` is the
# last member of the struct, and the type's basic size counts one byte of it (the terminating NUL).
_BYTES_DATA_OFFSET = bytes.__basicsize__ - 1


def _data_address(value: bytes) -> int:
    """The address of `value`'s bytes, which CPython follows with a NUL (checked once, in `_Api`)."""
    return id(value) + _BYTES_DATA_OFFSET


def api() -> _Api:
    """The process's C API table, loaded on first use.

    Raises:
        OSError, AttributeError: the library or the API version is not there.
    """
    global _api
    if _api is None:
        _api = _Api()
    return _api


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
        self._session: _P | None = None  # before anything can fail: `close` runs from `__del__` too
        self._run_options: CRunOptions | None = None  # of every run, when set (`use_run_options`)
        self._name_arrays: dict[tuple[str, ...], Any] = {}
        self._api = a = api()
        self._where = f"model '{where}', " if where else ""
        options = _P()
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
            session = _P()
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
        made: list[_P] = []  # OrtValues to release
        keep: list[np.ndarray] = []  # numeric inputs' memory, which ORT reads in place during Run
        outputs = (_P * len(output_names))()
        try:
            inputs = (_P * len(feeds))(*(self._tensor(name, array, made, keep) for name, array in feeds.items()))
            in_names, out_names = self._names(tuple(feeds)), self._names(tuple(output_names))
            options = self._run_options.handle if self._run_options is not None else None
            status = a.Run(self._session, options, in_names, inputs, len(feeds), out_names, len(output_names), outputs)
            # the inputs' copies go before the outputs are copied out: a big string request holds one at a time
            _release(a, made)
            made.extend(_P(v) for v in outputs if v)
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

    def _tensor(self, name: str, array: np.ndarray, made: list[_P], keep: list[np.ndarray]) -> _P:
        """An OrtValue of `array` (appended to `made`): strings copied, numbers read in place."""
        a = self._api
        shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        value = _P()
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

    def _fill(self, value: _P, elements: list[bytes]) -> None:
        """Copy `elements` (all `bytes`, at least one) into the string tensor `value`, byte for byte."""
        a = self._api
        pointers = np.fromiter(map(id, elements), dtype=np.uintp, count=len(elements))
        pointers += _BYTES_DATA_OFFSET
        a.check(a.FillStringTensor(value, pointers.ctypes.data, len(elements)))
        del pointers
        stored = _SIZE()
        a.check(a.GetStringTensorDataLength(value, ctypes.byref(stored)))
        if stored.value == sum(map(len, elements)):
            return
        # FillStringTensor read each string up to its first NUL: those holding one are written again in full
        buffer = ctypes.c_char_p()
        for index, element in enumerate(elements):
            if b"\0" in element:
                a.check(a.GetResizedStringTensorElementBuffer(value, index, len(element), ctypes.byref(buffer)))
                ctypes.memmove(buffer, element, len(element))

    def _array(self, value: _P) -> np.ndarray:
        """A numpy copy of an output OrtValue: an object array of `bytes` for strings."""
        a = self._api
        info = _P()
        a.check(a.GetTensorTypeAndShape(value, ctypes.byref(info)))
        try:
            code, rank, count = ctypes.c_int(), _SIZE(), _SIZE()
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
            total = _SIZE()
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
        data = _P()
        a.check(a.GetTensorMutableData(value, ctypes.byref(data)))
        out = np.empty(shape, dtype=dtype)
        if out.nbytes:
            ctypes.memmove(out.ctypes.data, data, out.nbytes)
        return out


def _release(a: _Api, values: list[_P]) -> None:
    """Release every OrtValue in `values`, emptying it (so a later release skips them)."""
    while values:
        a.ReleaseValue(values.pop())


class CRunOptions:
    """The C API's `OrtRunOptions`, whose `terminate` works as the Python API's `RunOptions.terminate`."""

    def __init__(self) -> None:
        """Raises: OSError: the C API is not available."""
        self._api = a = api()
        self.handle: _P | None = None
        handle = _P()
        a.check(a.CreateRunOptions(ctypes.byref(handle)), OSError)
        self.handle = handle
        self._terminate = False

    @property
    def terminate(self) -> bool:
        """Whether runs made with these options stop (at their next kernel)."""
        return self._terminate

    @terminate.setter
    def terminate(self, value: bool) -> None:
        a = self._api
        a.check((a.RunOptionsSetTerminate if value else a.RunOptionsUnsetTerminate)(self.handle), OSError)
        self._terminate = value

    def __del__(self) -> None:
        if self.handle is not None:
            self._api.ReleaseRunOptions(self.handle)
            self.handle = None
