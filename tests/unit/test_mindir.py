"""MindIR handling on the backend side (no server): which file is loaded, refusals, the conversion cache."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from mslite_backend import model_source
from mslite_backend.errors import ModelLoadError
from mslite_contract import mindir, settings
from tests.support import model_zoo as zoo

MINDIR_HEAD = b"\x0a\x031.1\x12\x09MindSpore"
MS_HEAD = b"\x1c\x00\x00\x00MSL2\x00\x00\x00\x00"


def _version(tmp_path: Path, name: str, data: bytes) -> str:
    version = tmp_path / "1"
    version.mkdir(parents=True, exist_ok=True)
    (version / name).write_bytes(data)
    return str(version)


def test_formats_by_content() -> None:
    assert mindir.detect_format(zoo.multi_io().SerializeToString()[:16]) == "onnx"
    assert mindir.detect_format(MINDIR_HEAD) == "mindir"
    assert mindir.detect_format(b"\x12\x09MindSpore") == "mindir"  # no ir_version field
    assert mindir.detect_format(MS_HEAD) == "ms"
    assert mindir.file_format("/nonexistent/model.onnx") == "missing"


def test_onnx_is_loaded_where_it_is(tmp_path: Path) -> None:
    version = _version(tmp_path, "model.onnx", zoo.multi_io().SerializeToString())
    assert mindir.onnx_source(version, "model.onnx") == (version, "model.onnx")
    empty = str(tmp_path / "2")
    assert mindir.onnx_source(empty, "model.onnx") == (empty, "model.onnx")  # the loader reports the missing file


def test_ms_file_is_refused_saying_what_to_serve(tmp_path: Path) -> None:
    version = _version(tmp_path, "model.onnx", MS_HEAD + bytes(32))
    with pytest.raises(ModelLoadError, match=r"kLiteNotSupport: MindSpore Lite's \.ms format cannot be served"):
        model_source.onnx_source(version, "model.onnx")  # the worker's load error


def test_mindir_without_mindspore_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version = _version(tmp_path, "model.mindir", MINDIR_HEAD)
    monkeypatch.setattr(mindir.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(mindir.ModelFileError) as info:
        mindir.onnx_source(version, "model.onnx")  # the default name: model.mindir is found instead
    assert "kLiteNotSupport" in str(info.value) and "the [mindir] extra: pip install mindspore==" in str(info.value)
    pinned = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert mindir.EXTRA_INSTALL.endswith(pinned["project"]["optional-dependencies"]["mindir"][0])  # the extra's pin
    assert "'model.mindir'" in str(info.value)


def test_conversion_is_cached_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    converted: list[str] = []

    def fake_converter(source: str, target: str) -> None:  # stands in for MindSpore: this tests the cache
        converted.append(source)
        Path(target).write_bytes(zoo.multi_io().SerializeToString())

    monkeypatch.setattr(mindir, "mindspore_available", lambda: True)
    monkeypatch.setattr(mindir, "run_converter", fake_converter)
    monkeypatch.setenv(settings.WEIGHTS_CACHE_ENV, str(tmp_path / "cache"))
    first = _version(tmp_path / "a", "model.mindir", MINDIR_HEAD + b"one")
    again = _version(tmp_path / "b", "model.onnx", MINDIR_HEAD + b"one")  # same content, another name
    other = _version(tmp_path / "c", "model.mindir", MINDIR_HEAD + b"two")
    directory, name = mindir.onnx_source(first, "model.onnx")
    assert name == "model.onnx" and Path(directory, name).is_file()
    assert mindir.onnx_source(again, "model.onnx") == (directory, name)
    assert mindir.onnx_source(other, "model.onnx")[0] != directory
    assert len(converted) == 2
