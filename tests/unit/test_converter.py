"""Converter, FmkType and LiteInfer without a server or MindSpore: checks, refusals, ONNX in and out."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest

import mslite_triton as mslite
from mslite_contract import mindir
from mslite_triton._onnx_io import has_dynamic_batch
from tests.support import model_zoo as zoo


def test_fmk_type_has_mindspore_lites_numbers() -> None:
    assert [(t.name, int(t)) for t in mslite.FmkType] == [
        ("TF", 0),
        ("CAFFE", 1),
        ("ONNX", 2),
        ("MINDIR", 3),
        ("TFLITE", 4),
        ("PYTORCH", 5),
    ]
    assert str(mslite.FmkType.ONNX) == "FmkType.ONNX"


def test_settings_are_checked() -> None:
    converter = mslite.Converter()
    with pytest.raises(TypeError, match="weight_fp16 must be bool"):
        converter.weight_fp16 = 1
    with pytest.raises(ValueError, match=r"decrypt_mode must be in \[AES-GCM, AES-CBC\], but got X."):
        converter.decrypt_mode = "X"
    with pytest.raises(TypeError, match="input_shape value element must be int"):
        converter.input_shape = {"x": [1, "3"]}
    converter.optimize = "none"
    converter.set_config_info("common_quant_param", {"quant_type": "WEIGHT_QUANT"})
    assert converter.get_config_info() == {"common_quant_param": {"quant_type": "WEIGHT_QUANT"}}
    assert "optimize: none" in str(converter)


def test_onnx_is_written_where_mindspore_lite_writes_its_output(tmp_path: Path) -> None:
    source = tmp_path / "net.onnx"
    onnx.save(zoo.multi_io(), str(source))
    mslite.Converter().convert(mslite.FmkType.ONNX, str(source), str(tmp_path / "out" / "net"))
    assert (tmp_path / "out" / "net.mindir").read_bytes() == source.read_bytes()  # ONNX by content
    mslite.Converter().convert(mslite.FmkType.ONNX, str(source), str(tmp_path / "same.onnx"))
    assert (tmp_path / "same.onnx").read_bytes() == source.read_bytes()


def test_refusals_say_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "net.onnx"
    onnx.save(zoo.multi_io(), str(source))
    out = str(tmp_path / "out")
    missing = str(tmp_path / "missing.onnx")
    with pytest.raises(RuntimeError) as exc:
        mslite.Converter().convert(mslite.FmkType.ONNX, missing, out)
    assert str(exc.value) == f"Perform convert method failed, model_file does not exist! model_file: {missing}"
    with pytest.raises(RuntimeError, match=r"kLiteNotSupport: FmkType.TF .*export the network to ONNX"):
        mslite.Converter().convert(mslite.FmkType.TF, str(source), out)
    converter = mslite.Converter()
    converter.weight_fp16 = True
    with pytest.raises(RuntimeError, match="kLiteNotSupport: weight_fp16 cannot be applied here"):
        converter.convert(mslite.FmkType.ONNX, str(source), out)
    with pytest.raises(RuntimeError, match="it is not a FmkType.MINDIR model"):
        mslite.Converter().convert(mslite.FmkType.MINDIR, str(source), out)
    fake = tmp_path / "net.mindir"
    fake.write_bytes(b"\x0a\x031.1\x12\x09MindSpore")
    monkeypatch.setattr(mindir.importlib.util, "find_spec", lambda name: None)  # as without the extra
    with pytest.raises(RuntimeError, match=r"kLiteNotSupport: .*the \[mindir\] extra: pip install mindspore=="):
        mslite.Converter().convert(mslite.FmkType.MINDIR, str(fake), out)
    monkeypatch.delitem(sys.modules, "mindspore", raising=False)
    with pytest.raises(ImportError, match=r"the \[mindir\] extra: pip install mindspore=="):
        mslite.LiteInfer(object())


def test_mindspores_dynamic_dimension_reads_as_dynamic() -> None:
    model = zoo.multi_io()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = -1  # how mindspore.onnx.export writes None
    assert has_dynamic_batch(model.SerializeToString())
