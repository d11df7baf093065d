"""Which package may import which, read from the source (import-linter's contracts, checked here)."""

from __future__ import annotations

from pathlib import Path

from tests.support.imports import cycles, graph, imported_names, modules


def test_the_backend_runtime_imports_no_client_and_no_triton() -> None:
    # It runs inside Triton's workers, where neither the client nor pb_utils outside model.py belongs.
    for module, path in modules("mslite_backend").items():
        names = imported_names(module, path)
        assert not {n for n in names if n.split(".")[0] in ("mslite_triton", "triton_python_backend_utils")}, module


def test_no_one_imports_the_backend_under_a_second_name() -> None:
    for module, path in {**modules("mslite_triton"), **modules("mslite_gateway"), **modules("mslite_backend")}.items():
        assert "mslite_triton_backend" not in imported_names(module, path), module


def test_the_backend_runtime_has_no_import_cycle() -> None:
    assert cycles(graph("mslite_backend")) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# What the client, the gateway and the backend share: the only modules of mslite_backend the gateway may import.
CONTRACT = {
    "mslite_backend",
    "mslite_backend.protocol",
    "mslite_backend.settings",
    "mslite_backend.scrub",
    "mslite_backend.protobuf_varint",
}


def test_the_gateway_imports_only_itself_and_the_contract() -> None:
    ours = set(modules("mslite_triton")) | set(modules("mslite_gateway")) | set(modules("mslite_backend"))
    for module, path in modules("mslite_gateway").items():
        outside = {n for n in imported_names(module, path) & ours if n.split(".")[0] != "mslite_gateway"}
        assert outside <= CONTRACT, (module, outside - CONTRACT)


def test_the_contract_imports_only_the_contract() -> None:
    found = modules("mslite_backend")
    ours = set(found) | set(modules("mslite_triton")) | set(modules("mslite_gateway"))
    for module in CONTRACT:
        assert imported_names(module, found[module]) & ours <= CONTRACT, module


def test_the_client_and_launcher_never_import_the_gateway() -> None:
    # The launcher starts it by module name in a child process; the client never loads uvloop or hpack.
    for module, path in modules("mslite_triton").items():
        assert not {n for n in imported_names(module, path) if n.split(".")[0] == "mslite_gateway"}, module


def test_the_gateway_and_the_contract_have_no_import_cycle() -> None:
    assert cycles(graph("mslite_gateway", "mslite_backend")) == []


# Libraries the client process runs as the backend does: the wire's dtypes, MindIR conversion (the Converter
# and a `.mindir` handed to a remote server are converted where the file is), files owned by a live process.
CLIENT_SHARED = CONTRACT | {"mslite_backend.dtypes", "mslite_backend.mindir", "mslite_backend.owned_files"}


def test_the_client_imports_only_itself_the_contract_and_the_shared_libraries() -> None:
    backend = set(modules("mslite_backend"))
    for module, path in modules("mslite_triton").items():
        used = imported_names(module, path) & backend
        assert used <= CLIENT_SHARED, (module, used - CLIENT_SHARED)


def test_the_client_and_launcher_have_no_import_cycle() -> None:
    assert cycles(graph("mslite_triton", "mslite_backend")) == []


def test_from_pkg_import_mod_counts_as_importing_the_package(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("from mslite_triton import errors\nimport mslite_triton.server.launcher\n")
    names = imported_names("mslite_triton.x", path)
    assert {"mslite_triton", "mslite_triton.errors", "mslite_triton.server.launcher"} <= names
    assert "mslite_triton.server" not in names  # its __init__ runs first, but nothing is taken from it
