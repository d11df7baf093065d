"""ONNX Runtime's C API through `ctypes`: the `OrtApi` table, loaded once per process, and its run options.

`OrtGetApiBase()->GetApi(version)` returns a table of function pointers that only ever grows at its end, so a
member's index is fixed for good: `_INDEX` holds the few used here (from the C header, `onnxruntime_c_api.h`,
of API version 19). `ort_c_strings` runs string models through it; `deadline` stops its runs with
`CRunOptions`.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from mslite_contract.scrub import client_message

from .errors import InferenceFailure, RequestError

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

P = ctypes.c_void_p
PP = ctypes.POINTER(ctypes.c_void_p)
SIZE = ctypes.c_size_t
_I64P = ctypes.POINTER(ctypes.c_int64)
# (return type, argument types) of each member: every one but a few returns an OrtStatus* (NULL: success)
_SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "GetErrorCode": (ctypes.c_int, (P,)),
    "GetErrorMessage": (ctypes.c_char_p, (P,)),
    "CreateEnv": (P, (ctypes.c_int, ctypes.c_char_p, PP)),
    "CreateSession": (P, (P, ctypes.c_char_p, P, PP)),
    "CreateSessionFromArray": (P, (P, ctypes.c_char_p, SIZE, P, PP)),
    "Run": (P, (P, P, ctypes.POINTER(ctypes.c_char_p), PP, SIZE, ctypes.POINTER(ctypes.c_char_p), SIZE, PP)),
    "CreateSessionOptions": (P, (PP,)),
    "SetSessionExecutionMode": (P, (P, ctypes.c_int)),
    "EnableCpuMemArena": (P, (P,)),
    "DisableCpuMemArena": (P, (P,)),
    "SetSessionGraphOptimizationLevel": (P, (P, ctypes.c_int)),
    "SetIntraOpNumThreads": (P, (P, ctypes.c_int)),
    "SetInterOpNumThreads": (P, (P, ctypes.c_int)),
    "CreateRunOptions": (P, (PP,)),
    "RunOptionsSetTerminate": (P, (P,)),
    "RunOptionsUnsetTerminate": (P, (P,)),
    "CreateTensorAsOrtValue": (P, (P, _I64P, SIZE, ctypes.c_int, PP)),
    "CreateTensorWithDataAsOrtValue": (P, (P, P, SIZE, _I64P, SIZE, ctypes.c_int, PP)),
    "GetTensorMutableData": (P, (P, PP)),
    "FillStringTensor": (P, (P, P, SIZE)),
    "GetStringTensorDataLength": (P, (P, ctypes.POINTER(SIZE))),
    "GetStringTensorContent": (P, (P, P, SIZE, P, SIZE)),
    "GetTensorElementType": (P, (P, ctypes.POINTER(ctypes.c_int))),
    "GetDimensionsCount": (P, (P, ctypes.POINTER(SIZE))),
    "GetDimensions": (P, (P, _I64P, SIZE)),
    "GetTensorShapeElementCount": (P, (P, ctypes.POINTER(SIZE))),
    "GetTensorTypeAndShape": (P, (P, PP)),
    "CreateCpuMemoryInfo": (P, (ctypes.c_int, ctypes.c_int, PP)),
    "GetAllocatorWithDefaultOptions": (P, (PP,)),
    "ReleaseEnv": (None, (P,)),
    "ReleaseStatus": (None, (P,)),
    "ReleaseMemoryInfo": (None, (P,)),
    "ReleaseSession": (None, (P,)),
    "ReleaseValue": (None, (P,)),
    "ReleaseRunOptions": (None, (P,)),
    "ReleaseTensorTypeAndShapeInfo": (None, (P,)),
    "ReleaseSessionOptions": (None, (P,)),
    "AddSessionConfigEntry": (P, (P, ctypes.c_char_p, ctypes.c_char_p)),
    "GetResizedStringTensorElementBuffer": (P, (P, SIZE, SIZE, ctypes.POINTER(ctypes.c_char_p))),
}

_INVALID_ARGUMENT = 2  # OrtErrorCode: the inputs were wrong (the caller's fault), as the Python binding raises it
_LOG_ERROR = 3  # OrtLoggingLevel: warnings of ORT's own go to nobody here either


class Api:
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
        get_api = ctypes.CFUNCTYPE(P, ctypes.c_uint32)(get_base().contents[0])
        table = get_api(API_VERSION)
        if not table:
            raise OSError(f"ONNX Runtime does not offer C API version {API_VERSION}")
        slots = ctypes.cast(table, ctypes.POINTER(ctypes.c_void_p))
        for name, index in _INDEX.items():
            restype, argtypes = _SIGNATURES[name]
            setattr(self, name, ctypes.CFUNCTYPE(restype, *argtypes)(slots[index]))
        env = P()
        self.check(self.CreateEnv(_LOG_ERROR, b"mslite-strings", ctypes.byref(env)), OSError)
        self.env = env  # one per process, as ORT wants; never released (workers end with their process)
        info = P()
        self.check(self.CreateCpuMemoryInfo(0, 0, ctypes.byref(info)), OSError)
        self.cpu = info
        allocator = P()
        self.check(self.GetAllocatorWithDefaultOptions(ctypes.byref(allocator)), OSError)
        self.allocator = allocator
        probe = b"probe\x00\xff"
        if ctypes.string_at(data_address(probe), len(probe) + 1) != probe + b"\x00":
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


_api: Api | None = None

# Where a bytes object's data starts, from the object's address (its `id` in CPython): `ob_sval` is the
# last member of the struct, and the type's basic size counts one byte of it (the terminating NUL).
BYTES_DATA_OFFSET = bytes.__basicsize__ - 1


def data_address(value: bytes) -> int:
    """The address of `value`'s bytes, which CPython follows with a NUL (checked once, in `Api`)."""
    return id(value) + BYTES_DATA_OFFSET


def api() -> Api:
    """The process's C API table, loaded on first use.

    Raises:
        OSError, AttributeError: the library or the API version is not there.
    """
    global _api
    if _api is None:
        _api = Api()
    return _api


class CRunOptions:
    """The C API's `OrtRunOptions`, whose `terminate` works as the Python API's `RunOptions.terminate`."""

    def __init__(self) -> None:
        """Raises: OSError: the C API is not available."""
        self._api = a = api()
        self.handle: P | None = None
        handle = P()
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
