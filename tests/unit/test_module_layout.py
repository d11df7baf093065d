"""MindSpore Lite's module layout: `mindspore_lite.<module>.<Name>` ports as `mslite_triton.<module>.<Name>`."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import mslite_triton as mslite

# mindspore_lite's public modules and what each defines (its __all__), as in MindSpore Lite's sources
LAYOUT = {
    "context": ["Context"],
    "tensor": ["DataType", "Format", "Tensor", "TensorMeta"],
    "model": ["ModelType", "Model", "ModelParallelRunner", "ModelGroup", "ModelGroupFlag"],
    "converter": ["FmkType", "Converter"],
    "lite_infer": ["LiteInfer"],
}


@pytest.mark.parametrize("module", sorted(LAYOUT))
def test_each_name_is_where_mindspore_lite_defines_it(module: str) -> None:
    mod = importlib.import_module(f"mslite_triton.{module}")
    assert sorted(mod.__all__) == sorted(LAYOUT[module])
    for name in LAYOUT[module]:
        assert getattr(mod, name) is getattr(mslite, name), name


def test_the_package_exports_exactly_the_modules_names() -> None:
    assert sorted(mslite.__all__) == sorted(n for names in LAYOUT.values() for n in names)


@pytest.mark.parametrize("module", sorted(LAYOUT))
def test_each_module_imports_first_without_a_cycle(module: str) -> None:
    # a fresh interpreter whose first import is the submodule: an import cycle fails here
    code = f"from mslite_triton.{module} import {', '.join(LAYOUT[module])}"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_ported_attribute_access_works() -> None:
    runner = mslite.model.ModelParallelRunner()  # as ported code writes it
    assert str(runner) == "model_path: ."
    assert mslite.model.ModelType.MINDIR == mslite.ModelType.MINDIR
