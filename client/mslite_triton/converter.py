"""MindSpore Lite's `Converter` and `FmkType`, producing what this server runs: ONNX.

`Converter.convert` turns an ONNX or MindIR model into a served-ready ONNX file (MindIR with MindSpore,
the `[mindir]` extra, in a child process, as the server does); other frameworks are refused with what to
do instead. The file is written where MindSpore Lite writes its output (`<output_file>.mindir`), so the
`build_from_file` line that follows a conversion keeps working: the server tells ONNX by content.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from mslite_contract import mindir

from ._checkparam import check_isinstance, missing_file
from .tensor import DataType, Format, ModelType, _NamedIntEnum

__all__ = ["FmkType", "Converter"]


class FmkType(_NamedIntEnum):
    """The framework of a model given to `Converter.convert` (MindSpore Lite's numbers)."""

    TF = 0
    CAFFE = 1
    ONNX = 2
    MINDIR = 3
    TFLITE = 4
    PYTORCH = 5


_CONVERTIBLE = {FmkType.ONNX: "onnx", FmkType.MINDIR: "mindir"}
_FAILED = "Converter model failed!"
_CONVERT_FAILED = "Perform convert method failed"
# settings that would change the converted model, which this converter cannot do: (name, default)
_UNSUPPORTED_SETTINGS: tuple[tuple[str, Any], ...] = (
    ("weight_fp16", False),
    ("input_shape", {}),
    ("enable_encryption", False),
    ("decrypt_key", ""),
    ("encrypt_key", ""),
)


_QUANT_TYPES = (DataType.FLOAT32, DataType.INT8, DataType.UINT8, DataType.UNKNOWN)


class _Setting:
    """A Converter setting: type-checked (TypeError) and, where MindSpore Lite lists them, value-checked."""

    def __init__(self, kind: type, choices: tuple[Any, ...] = ()) -> None:
        self.kind = kind
        self.choices = choices
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj._settings[self.name]
        return dict(value) if isinstance(value, dict) else value

    def __set__(self, obj: Any, value: Any) -> None:
        check_isinstance(self.name, value, self.kind)
        if self.choices and value not in self.choices:
            shown = ", ".join(str(c) for c in self.choices)
            raise ValueError(f"{self.name} must be in [{shown}], but got {value}.")
        if self.kind is dict:  # input_shape: {name: [int, ...]}
            for key, dims in value.items():
                check_isinstance(f"{self.name} key", key, str)
                check_isinstance(f"{self.name} value", dims, list)
                for dim in dims:
                    check_isinstance(f"{self.name} value element", dim, int)
            value = {k: list(v) for k, v in value.items()}
        obj._settings[self.name] = value


class Converter:
    """MindSpore Lite's `Converter`: ONNX and MindIR models in, a served-ready ONNX file out.

    Settings are checked as MindSpore Lite checks them. Those that would change the model (fp16 weights,
    fixed input shapes, encryption, quantization configs) make `convert` fail naming them: the server's
    ONNX Runtime optimizes the model itself when it loads it, and dynamic dimensions stay dynamic.
    """

    def __init__(self) -> None:
        self._settings: dict[str, Any] = {
            "weight_fp16": False,
            "input_shape": {},
            "input_format": Format.NHWC,
            "input_data_type": DataType.FLOAT32,
            "output_data_type": DataType.FLOAT32,
            "save_type": ModelType.MINDIR,
            "decrypt_key": "",
            "decrypt_mode": "AES-GCM",
            "enable_encryption": False,
            "encrypt_key": "",
            "infer": False,
            "optimize": "general",
            "device": "",
            "device_id": 0,
            "rank_id": 0,
        }
        self._config_info: dict[str, dict[str, str]] = {}

    def __str__(self) -> str:
        s = self._settings
        return (
            f"config_info: {self._config_info},\nweight_fp16: {s['weight_fp16']},\ninput_shape: {s['input_shape']},\n"
            f"input_format: {s['input_format']},\ninput_data_type: {s['input_data_type']},\n"
            f"output_data_type: {s['output_data_type']},\nsave_type: {s['save_type']},\n"
            f"decrypt_key: {s['decrypt_key']},\ndecrypt_mode: {s['decrypt_mode']},\n"
            f"enable_encryption: {s['enable_encryption']},\nencrypt_key: {s['encrypt_key']},\ninfer: {s['infer']},\n"
            f"optimize: {s['optimize']},\ndevice: {s['device']}."
        )

    weight_fp16 = _Setting(bool)
    input_shape = _Setting(dict)
    input_format = _Setting(Format, (Format.NCHW, Format.NHWC))
    input_data_type = _Setting(DataType, _QUANT_TYPES)
    output_data_type = _Setting(DataType, _QUANT_TYPES)
    save_type = _Setting(ModelType)
    decrypt_key = _Setting(str)
    decrypt_mode = _Setting(str, ("AES-GCM", "AES-CBC"))
    enable_encryption = _Setting(bool)
    encrypt_key = _Setting(str)
    infer = _Setting(bool)
    optimize = _Setting(str, ("none", "general", "gpu_oriented", "ascend_oriented"))
    device = _Setting(str, ("Ascend",))
    device_id = _Setting(int)
    rank_id = _Setting(int)

    def set_config_info(self, section: str = "", config_info: dict[str, str] | None = None) -> None:
        """Add a config section (quantization and the like); `convert` refuses them: they change the model.

        Raises:
            TypeError: `section` is not a str, or `config_info` is not a dict of str to str.
        """
        check_isinstance("section", section, str)
        if config_info is None:
            return
        check_isinstance("config_info", config_info, dict)
        for key, value in config_info.items():
            check_isinstance("config_info key", key, str)
            check_isinstance("config_info value", value, str)
        if section:
            self._config_info[section] = dict(config_info)

    def get_config_info(self) -> dict[str, dict[str, str]]:
        """The config sections set with `set_config_info`."""
        return {k: dict(v) for k, v in self._config_info.items()}

    def convert(
        self, fmk_type: FmkType, model_file: str, output_file: str, weight_file: str = "", config_file: str = ""
    ) -> None:
        """Convert `model_file` to a served-ready ONNX file, `<output_file>.mindir` as MindSpore Lite names it.

        An `output_file` ending in `.onnx` or `.mindir` is used as it is. Build from the written file with
        `Model.build_from_file(path, ModelType.MINDIR)`: the server tells ONNX by content.

        Raises:
            TypeError: an argument has the wrong type.
            RuntimeError: a file does not exist; the framework is not ONNX or MINDIR, or a setting would
                change the model (kLiteNotSupport, with what to do); the file is not a `fmk_type` model;
                MindSpore is missing (MINDIR) or fails.
        """
        check_isinstance("fmk_type", fmk_type, FmkType)
        check_isinstance("model_file", model_file, str)
        check_isinstance("output_file", output_file, str)
        check_isinstance("weight_file", weight_file, str)
        check_isinstance("config_file", config_file, str)
        if not os.path.exists(model_file):
            raise RuntimeError(missing_file(_CONVERT_FAILED, "model_file", model_file))
        if weight_file and not os.path.exists(weight_file):
            raise RuntimeError(missing_file(_CONVERT_FAILED, "weight_file", weight_file))
        if config_file and not os.path.exists(config_file):
            raise RuntimeError(missing_file(_CONVERT_FAILED, "config_file", config_file))
        self._check_supported(fmk_type, config_file)
        found = mindir.file_format(model_file)
        if found != _CONVERTIBLE[fmk_type]:
            raise RuntimeError(
                f"{_FAILED} model_file is {os.path.basename(model_file)}, error is kLiteInputParamInvalid: "
                f"it is not a {fmk_type} model (its content looks like {found})"
            )
        target = output_file if output_file.endswith((".onnx", ".mindir")) else output_file + ".mindir"
        if os.path.dirname(target):
            os.makedirs(os.path.dirname(target), exist_ok=True)
        if fmk_type == FmkType.ONNX:
            shutil.copyfile(model_file, target)
            return
        if not mindir.mindspore_available():
            raise RuntimeError(f"{_FAILED} {mindir.missing_extra_message(os.path.basename(model_file))}")
        with tempfile.TemporaryDirectory(prefix="mslite-convert-") as scratch:
            converted = os.path.join(scratch, mindir.ONNX_FILENAME)
            try:
                mindir.run_converter(model_file, converted)
            except mindir.ConversionError as e:
                raise RuntimeError(f"{_FAILED} model_file is {os.path.basename(model_file)}, error is {e}") from None
            shutil.move(converted, target)

    def _check_supported(self, fmk_type: FmkType, config_file: str) -> None:
        if fmk_type not in _CONVERTIBLE:
            raise RuntimeError(
                f"{_FAILED} kLiteNotSupport: {fmk_type} models cannot be converted here; export the network to "
                "ONNX with its framework's exporter (tf2onnx, torch.onnx.export, ...) and convert FmkType.ONNX, "
                "or build from the ONNX file directly"
            )
        changed = [name for name, default in _UNSUPPORTED_SETTINGS if self._settings[name] != default]
        if self._settings["save_type"] != ModelType.MINDIR:
            changed.append("save_type")
        if config_file or self._config_info:
            changed.append("config_file/config_info")
        if changed:
            raise RuntimeError(
                f"{_FAILED} kLiteNotSupport: {', '.join(changed)} cannot be applied here; the converter writes "
                "the model as it is (ONNX, save_type MINDIR): leave these unset"
            )
