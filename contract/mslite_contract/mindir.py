"""MindIR models (MindSpore's format): told from ONNX by content, converted once per machine to ONNX.

ONNX Runtime serves every model. A MindIR file is converted by MindSpore itself (the optional
`mindspore` package, the `[mindir]` extra) into an ONNX model whose inputs keep their
names and dtypes and get a dynamic first (batch) axis. The conversion runs in a child process: importing
MindSpore costs about 0.5 GB and a few seconds, which no worker should keep. Its result is cached in the
prepacked weights' machine-wide cache directory (`conversion_cache_root`), keyed by the MindIR file's
content, MindSpore's version and this converter's version, and built under the same lock
(`build_cache.ensure_built`), so the first process to load the model converts it and every other worker
(and every later load of the same file, uploaded or not) reuses it.

This module imports only the standard library at module level: the client imports it too, for
`detect_format` and the upload file name, and the child process runs it as `python -m`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

from .build_cache import ensure_built
from .scrub import client_message
from .settings import shared_cache_root

MINDIR_FILENAME = "model.mindir"  # the name a MindIR model is uploaded and stored under (`1/model.mindir`)
ONNX_FILENAME = "model.onnx"
# what the `[mindir]` extra installs, said so that it works however mslite-triton was installed (from a checkout)
EXTRA_INSTALL = "the [mindir] extra: pip install mindspore==2.9.0"
CONVERTER_VERSION = "1"  # part of the cache key: bump when the conversion's output changes
CONVERT_TIMEOUT_S = 600.0
REASON_PREFIX = "mslite-mindir-error: "  # the child's line that carries its reason (MindSpore logs much else)
# mind_ir.proto's DataType -> MindSpore dtype name (the numbers match ONNX's TensorProto for these)
_MINDIR_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool_",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}


def detect_format(head: bytes) -> str:
    """Tell an ONNX file from MindSpore's formats by its first bytes, not by its name.

    ONNX's ModelProto starts with field 1 `ir_version`, a varint (byte 0x08); MindIR's ModelProto with
    field 1 `ir_version`, a string (0x0A), or field 2 `producer_name` (0x12: "MindSpore"); a MindSpore Lite
    `.ms` file is a flatbuffer whose identifier `MSL?` sits at offset 4.

    Returns:
        "onnx", "mindir", "ms" or "unknown".
    """
    if head[:1] == b"\x08":
        return "onnx"
    if len(head) >= 8 and head[4:7] == b"MSL":
        return "ms"
    if head[:1] in (b"\x0a", b"\x12"):
        return "mindir"
    return "unknown"


def file_format(path: str) -> str:
    """`detect_format` of a file's first bytes ("missing" when there is no such file)."""
    try:
        with open(path, "rb") as f:
            return detect_format(f.read(16))
    except OSError:
        return "missing"


def mindspore_available() -> bool:
    """True when the `mindspore` package is installed (found without importing it)."""
    return importlib.util.find_spec("mindspore") is not None


def missing_extra_message(what: str) -> str:
    """The error for a MindIR model where MindSpore is not installed, naming the extra to install."""
    return (
        f"kLiteNotSupport: {what} is a MindIR model, and converting MindIR needs MindSpore, which is not "
        f"installed here; install {EXTRA_INSTALL}, or export the network to ONNX"
    )


MS_FILE_MESSAGE = (
    "kLiteNotSupport: MindSpore Lite's .ms format cannot be served; serve the .mindir (or an ONNX export) "
    "the .ms file was converted from"
)


class ModelFileError(ValueError):
    """A model file that cannot be served as it is: the message says why and what to do (no server path)."""


@dataclass(frozen=True)
class ModelFile:
    """The model file of a version directory and its format by content."""

    path: str
    format: str  # as detect_format, or "missing"


def locate(version_dir: str, filename: str) -> ModelFile:
    """The model file to load: `filename`, or `model.mindir` when the default `model.onnx` is absent."""
    path = os.path.join(version_dir, filename)
    if not os.path.isfile(path) and filename == ONNX_FILENAME:
        alternative = os.path.join(version_dir, MINDIR_FILENAME)
        if os.path.isfile(alternative):
            path = alternative
    return ModelFile(path, file_format(path))


def onnx_source(version_dir: str, filename: str) -> tuple[str, str]:
    """(directory, file name) of the ONNX model to load for `<version_dir>/<filename>`.

    An ONNX file (or a missing or unreadable one, which the loader then reports) is loaded where it
    is; a MindIR file is converted, once per machine, and its converted copy is loaded.

    Raises:
        ModelFileError: a `.ms` file; a MindIR file without MindSpore installed, or one that MindSpore
            could not convert (kLiteNotSupport, with what to do).
    """
    found = locate(version_dir, filename)
    name = os.path.basename(found.path)
    if found.format == "ms":
        raise ModelFileError(f"model file '{name}': {MS_FILE_MESSAGE}")
    if found.format != "mindir":
        return version_dir, filename
    if not mindspore_available():
        raise ModelFileError(missing_extra_message(f"model file '{name}'"))
    converted = convert_cached(found.path)
    return os.path.dirname(converted), os.path.basename(converted)


def convert_cached(mindir_path: str) -> str:
    """The path of the ONNX conversion of `mindir_path`, converted now unless already cached.

    Raises:
        ModelFileError: the conversion failed (MindSpore's reason, without paths), or the cache is unusable.
    """
    key = "mindir-" + cache_key(mindir_path)
    try:
        return ensure_built(
            conversion_cache_root(),
            key,
            lambda out: run_converter(mindir_path, os.path.join(out, ONNX_FILENAME)),
            timeout_s=CONVERT_TIMEOUT_S,
        )
    except ConversionError as e:
        raise ModelFileError(f"kLiteNotSupport: MindSpore could not convert the MindIR model to ONNX: {e}") from e
    except (OSError, TimeoutError, ValueError) as e:
        raise ModelFileError(f"the converted MindIR model cannot be cached: {client_message(str(e))}") from e


def conversion_cache_root() -> str:
    """Where conversions go: the cache's machine-wide place (`settings.shared_cache_root`), never beside the model.

    Not the version directory: Triton gives an uploaded model a fresh copy at every load, so only a
    machine-wide place makes the conversion happen once per machine.
    """
    return shared_cache_root()


def cache_key(mindir_path: str) -> str:
    """Hash of the MindIR file's content, MindSpore's version and this converter's version."""
    import hashlib

    digest = hashlib.sha256()
    try:
        version = importlib.metadata.version("mindspore")
    except importlib.metadata.PackageNotFoundError:
        version = "none"
    digest.update(f"{version}\0{CONVERTER_VERSION}\0".encode())
    with open(mindir_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:32]


class ConversionError(RuntimeError):
    """MindSpore failed to load or export the model (the message is MindSpore's last error line)."""


def run_converter(mindir_path: str, onnx_path: str, timeout_s: float = CONVERT_TIMEOUT_S) -> None:
    """Convert in a child process (this module run with `python -m`), which takes MindSpore's memory with it.

    Raises:
        ConversionError: the child failed or ran past `timeout_s`, with the reason it printed last.
    """
    # MindSpore's generated protobuf code runs only on the pure-Python protobuf; GLOG_v 3: errors only
    env = {**os.environ, "GLOG_v": "3", "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    # this package importable in the child however the parent found it (Triton's stub extends sys.path itself)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))
    # MindSpore writes reports (rank_0/...) into its working directory: a scratch one, removed after
    with tempfile.TemporaryDirectory(prefix="mslite-mindir-") as workdir:
        try:
            done = subprocess.run(
                [
                    python_executable(),
                    "-m",
                    __name__,
                    *map(os.path.abspath, (mindir_path, onnx_path)),
                    str(os.getpid()),
                ],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ConversionError(f"the conversion ran for more than {timeout_s:.0f} s") from None
    if done.returncode != 0 or not os.path.isfile(onnx_path):
        lines = [line for line in done.stderr.splitlines() if line.startswith(REASON_PREFIX)]
        reason = lines[-1][len(REASON_PREFIX) :] if lines else f"the converter exited with status {done.returncode}"
        raise ConversionError(client_message(reason))


def python_executable() -> str:
    """A Python interpreter of this environment: inside Triton's stub, `sys.executable` is not one."""
    candidates = [sys.executable] if os.path.basename(sys.executable or "").startswith("python") else []
    candidates += [os.path.join(sys.prefix, "bin", "python3"), shutil.which("python3") or ""]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ConversionError("no Python interpreter found to run the MindIR converter")


# ---- run by the child process (and by the client's Converter and LiteInfer, which have MindSpore) ----


def mindir_inputs(mindir_path: str) -> list[tuple[str, str, list[int]]]:
    """(name, MindSpore dtype name, shape) of each graph input of a MindIR file.

    MindSpore prefixes input names with the graph's name (`<graph>:x`); the part after the last colon
    is the parameter's name, which becomes the ONNX input name.

    Raises:
        ConversionError: an input has a dtype this converter does not map.
    """
    from mindspore.train import mind_ir_pb2  # type: ignore[import-not-found,unused-ignore]

    model = mind_ir_pb2.ModelProto()
    with open(mindir_path, "rb") as f:
        model.ParseFromString(f.read())
    specs = []
    for i, value in enumerate(model.graph.input):
        tensor = value.tensor[0]
        if tensor.data_type not in _MINDIR_DTYPES:
            raise ConversionError(f"input {i} has MindIR data type {tensor.data_type}, which is not supported")
        specs.append((value.name.rsplit(":", 1)[-1], _MINDIR_DTYPES[tensor.data_type], list(tensor.dims)))
    names = [n for n, _, _ in specs]
    if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
        specs = [(f"input_{i}", t, s) for i, (_, t, s) in enumerate(specs)]
    return specs


def export_onnx(make_cell: Any, specs: list[tuple[str, Any, list[int]]], onnx_path: str) -> None:
    """Export a MindSpore network to ONNX with a dynamic first axis on every input of rank >= 1.

    `specs` holds (name, dtype, shape) per input: the dtype a MindSpore dtype or its name in `mindspore`.

    When MindSpore cannot export the dynamic version (a graph that fixes its batch size), the inputs'
    own shapes are used. `make_cell` returns a fresh cell for each try: a cell compiled once keeps its shapes.

    Raises:
        Exception: what MindSpore raises when even the fixed-shape export fails.
    """
    import mindspore as ms  # type: ignore[import-not-found,unused-ignore]

    def inputs(dynamic: bool) -> list[Any]:
        return [
            ms.Tensor(
                shape=([None, *shape[1:]] if dynamic and shape else shape),
                dtype=getattr(ms, dtype) if isinstance(dtype, str) else dtype,
            )
            for _, dtype, shape in specs
        ]

    names = [n for n, _, _ in specs]
    try:
        ms.onnx.export(make_cell(), *inputs(True), file_name=onnx_path, input_names=names)
    except Exception:  # noqa: BLE001 -- MindSpore raises RuntimeError/ValueError/TypeError by operator
        ms.onnx.export(make_cell(), *inputs(False), file_name=onnx_path, input_names=names)
    name_dynamic_axes(onnx_path)


def name_dynamic_axes(onnx_path: str) -> None:
    """Write MindSpore's dynamic dimensions (stored as the value -1) as a named dimension, as ONNX intends.

    Only with the `onnx` package (the server has it); -1 also loads, and readers take it as dynamic.
    """
    try:
        import onnx
    except ImportError:
        return
    model = onnx.load(onnx_path)
    changed = False
    for value in (*model.graph.input, *model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.dim_param = "batch"
                changed = True
    if changed:
        onnx.save(model, onnx_path)


def convert(mindir_path: str, onnx_path: str) -> None:
    """Convert a MindIR file to ONNX in this process (imports MindSpore).

    Raises:
        ConversionError: an input dtype is not supported; Exception: MindSpore's, when it cannot load or export.
    """
    import mindspore as ms  # type: ignore[import-not-found,unused-ignore]
    from mindspore import nn  # type: ignore[import-not-found,unused-ignore]

    specs = mindir_inputs(mindir_path)
    if mindir_path.endswith(".mindir"):
        graph = ms.load(mindir_path)
    else:  # MindSpore loads only files named *.mindir; an upload may have any name
        link = os.path.join(os.getcwd(), "source.mindir")  # the scratch working directory
        os.symlink(os.path.abspath(mindir_path), link)
        try:
            graph = ms.load(link)
        finally:
            os.unlink(link)
    export_onnx(lambda: nn.GraphCell(graph), specs, onnx_path)


def _die_with_parent(parent: int) -> None:
    """SIGKILL this converter when the process that started it ends (PR_SET_PDEATHSIG), or exit if it has."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(1)


def _main(argv: list[str]) -> int:
    if len(argv) > 3:  # the worker that waits for it: a converter never outlives it
        _die_with_parent(int(argv[3]))
    try:
        convert(argv[1], argv[2])
    except Exception as e:  # noqa: BLE001 -- the parent reads the last stderr line as the reason
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"{REASON_PREFIX}{type(e).__name__}: {first}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
