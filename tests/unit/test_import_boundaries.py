"""Which package may import which, read from the source: import-linter's contracts, as package rules.

Every import counts (function-level and `TYPE_CHECKING` ones too), as Python executes it (`from pkg.mod import x`
runs `pkg/__init__` too), and a package's rule holds for everything it reaches through other packages as well:
the client reaching the gateway through the launcher breaks the client's rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.imports import (
    PACKAGES,
    cycles,
    executed_names,
    graph,
    imported_names,
    modules,
    package_graph,
    reachable,
)

# package -> the first-party packages its modules may reach, directly or through others (itself always)
MAY_REACH = {
    "mslite_contract": set(),  # standard library and numpy only
    "mslite_backend": {"mslite_contract"},  # runs in Triton's workers: no client, launcher or gateway
    "mslite_gateway": {"mslite_contract"},  # its own process, started by module name
    "mslite_server": {"mslite_contract"},  # the launcher: its own errors, its own Triton API
    "mslite_triton": {"mslite_contract"},  # the user's process: its own server is a child `mslite-triton serve`
}


def test_every_package_has_a_rule() -> None:
    assert set(MAY_REACH) == set(PACKAGES)


@pytest.mark.parametrize("package", sorted(MAY_REACH))
def test_a_package_reaches_only_what_its_rule_allows(package: str) -> None:
    edges = graph(*PACKAGES, executed=True)
    for module in modules(package):
        outside = {m.split(".")[0] for m in reachable(edges, module)} - {package} - MAY_REACH[package]
        assert not outside, (module, outside)


def test_only_model_py_imports_triton_and_no_one_imports_the_backend_under_a_second_name() -> None:
    for package in PACKAGES:
        for module, path in modules(package).items():
            tops = {n.split(".")[0] for n in imported_names(module, path)}
            assert not tops & {"triton_python_backend_utils", "mslite_triton_backend"}, module


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(graph(*PACKAGES)) == []


def test_no_cycle_between_packages_as_python_executes_the_imports() -> None:
    assert cycles(package_graph(graph(*PACKAGES, executed=True))) == []


def test_a_cycle_through_an_init_is_found(tmp_path: Path) -> None:
    """`pa/__init__` imports `pb.x`, which takes a name of `pa.y`: Python runs `pa/__init__` for it (a cycle)."""
    for name, text in {
        "pa/__init__.py": "import pb.x\n",
        "pa/y.py": "",
        "pb/__init__.py": "",
        "pb/x.py": "def f():\n    from pa.y import z\n",  # a function-level import counts too
    }.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    roots = {"pa": tmp_path / "pa", "pb": tmp_path / "pb"}
    assert cycles(graph("pa", "pb", roots=roots)) == []  # import-linter's count misses it
    assert cycles(graph("pa", "pb", roots=roots, executed=True)) == [["pa", "pb.x"]]
    assert cycles(package_graph(graph("pa", "pb", roots=roots, executed=True))) == [["pa", "pb"]]
    assert "pa" in executed_names("pb.x", roots["pb"] / "x.py")


def test_a_package_reached_only_through_an_init_counts(tmp_path: Path) -> None:
    """`pb.x` takes a name of `pa.y`; `pa/__init__` imports `pc`: pb reaches pc, as Python runs it."""
    for name, text in {"pa/__init__.py": "import pc\n", "pa/y.py": "", "pb/__init__.py": "",
                       "pb/x.py": "from pa.y import z\n", "pc/__init__.py": ""}.items():  # fmt: skip
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    roots = {p: tmp_path / p for p in ("pa", "pb", "pc")}
    assert "pc" not in reachable(graph("pa", "pb", "pc", roots=roots), "pb.x")
    assert "pc" in reachable(graph("pa", "pb", "pc", roots=roots, executed=True), "pb.x")


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
