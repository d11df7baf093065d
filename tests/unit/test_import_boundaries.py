"""Which package may import which, read from the source (import-linter's contracts, checked here)."""

from __future__ import annotations

from tests.support.imports import cycles, graph, imported_names, modules


def test_the_backend_runtime_imports_no_client_and_no_triton() -> None:
    # It runs inside Triton's workers, where neither the client nor pb_utils outside model.py belongs.
    for module, path in modules("mslite_backend").items():
        names = imported_names(module, path)
        assert not {n for n in names if n.split(".")[0] in ("mslite_triton", "triton_python_backend_utils")}, module


def test_no_one_imports_the_backend_under_a_second_name() -> None:
    for module, path in {**modules("mslite_triton"), **modules("mslite_backend")}.items():
        assert "mslite_triton_backend" not in imported_names(module, path), module


def test_the_backend_runtime_has_no_import_cycle() -> None:
    assert cycles(graph("mslite_backend")) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
