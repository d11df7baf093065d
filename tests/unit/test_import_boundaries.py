"""Which package may import which, read from the source: import-linter's contracts, as package rules.

Every import counts (function-level and `TYPE_CHECKING` ones too), and a package's rule holds for everything it
reaches through other packages as well: the client reaching the gateway through the launcher breaks the
client's rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.imports import PACKAGES, cycles, graph, imported_names, modules, reachable

# package -> the first-party packages its modules may reach, directly or through others (itself always)
MAY_REACH = {
    "mslite_contract": set(),  # standard library and numpy only
    "mslite_backend": {"mslite_contract"},  # runs in Triton's workers: no client, launcher or gateway
    "mslite_gateway": {"mslite_contract"},  # its own process, started by module name
    "mslite_server": {"mslite_contract", "mslite_triton"},  # the launcher: the client's transport and errors
    "mslite_triton": {"mslite_contract", "mslite_server"},  # the user's process: auto-start through the handle
}


def test_every_package_has_a_rule() -> None:
    assert set(MAY_REACH) == set(PACKAGES)


@pytest.mark.parametrize("package", sorted(MAY_REACH))
def test_a_package_reaches_only_what_its_rule_allows(package: str) -> None:
    edges = graph(*PACKAGES)
    for module in modules(package):
        outside = {m.split(".")[0] for m in reachable(edges, module)} - {package} - MAY_REACH[package]
        assert not outside, (module, outside)


def test_the_client_starts_a_server_only_through_its_public_handle() -> None:
    for module, path in modules("mslite_triton").items():
        server = {n for n in imported_names(module, path) if n.split(".")[0] == "mslite_server"}
        assert server <= {"mslite_server", "mslite_server.LocalServer", "mslite_server.ServerConfig"}, module


def test_only_model_py_imports_triton_and_no_one_imports_the_backend_under_a_second_name() -> None:
    for package in PACKAGES:
        for module, path in modules(package).items():
            tops = {n.split(".")[0] for n in imported_names(module, path)}
            assert not tops & {"triton_python_backend_utils", "mslite_triton_backend"}, module


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(graph(*PACKAGES)) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_reachable_follows_imports_transitively() -> None:
    assert reachable({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}, "a") == {"b", "c"}


def test_from_pkg_import_mod_counts_as_importing_the_package(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("from mslite_triton import errors\nimport mslite_server.local_server\n")
    names = imported_names("mslite_triton.x", path)
    assert {"mslite_triton", "mslite_triton.errors", "mslite_server.local_server"} <= names
    assert "mslite_server" not in names  # its __init__ runs first, but nothing is taken from it
