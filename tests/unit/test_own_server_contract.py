"""How a client finds `mslite-triton` and reads what `serve` prints (`mslite_contract.own_server`)."""

from __future__ import annotations

from pathlib import Path

from mslite_contract import settings
from mslite_contract.own_server import SERVE_PROGRAM, find_serve_command, not_found_message, read_line


def _program(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SERVE_PROGRAM
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_setting_comes_first_split_at_spaces(tmp_path: Path) -> None:
    _program(tmp_path / "bin")
    env = {settings.SERVE_CMD_ENV: " /opt/py -m  mslite_server.cli ", "PATH": str(tmp_path / "bin")}
    assert find_serve_command(env, cwd=tmp_path) == ["/opt/py", "-m", "mslite_server.cli"]


def test_then_beside_the_interpreter_then_on_path(tmp_path: Path) -> None:
    beside, on_path = _program(tmp_path / "venv" / "bin"), _program(tmp_path / "path")
    env = {"PATH": f"/nonexistent:{on_path.parent}"}
    assert find_serve_command(env, interpreter_dir=beside.parent, cwd=tmp_path) == [str(beside)]
    assert find_serve_command(env, interpreter_dir=tmp_path / "none", cwd=tmp_path) == [str(on_path)]


def test_then_a_checkouts_venv_in_the_current_folder_or_above(tmp_path: Path) -> None:
    venv = _program(tmp_path / "checkout" / ".venv" / "bin")
    deep = tmp_path / "checkout" / "client" / "java"
    deep.mkdir(parents=True)
    env = {"PATH": "/nonexistent"}
    assert find_serve_command(env, cwd=deep) == [str(venv)]
    assert find_serve_command(env, cwd=tmp_path) is None  # nothing above tmp_path holds one
    (venv).chmod(0o644)
    assert find_serve_command(env, cwd=deep) is None  # not executable: not a command


def test_the_message_says_what_to_set() -> None:
    text = not_found_message()
    assert settings.SERVE_CMD_ENV in text and settings.URL_ENV in text and "PATH" in text and ".venv/bin" in text


def test_the_start_up_lines_are_read_up_to_serving() -> None:
    found: dict[str, str] = {}
    lines = [
        "HTTP    http://127.0.0.1:1234",
        "GRPC    grpc://127.0.0.1:1235",
        "TRITON GRPC unix:/tmp/x/mslite-sock-y/grpc:0",
        "LOG     /tmp/x/tritonserver.log",
        "ADMIN KEY abc123  (in no file; every request needs it)",
    ]
    assert not any(read_line(line, found) for line in lines)
    assert found == {
        "http": "http://127.0.0.1:1234",
        "grpc": "grpc://127.0.0.1:1235",
        "triton_grpc": "unix:/tmp/x/mslite-sock-y/grpc:0",
        "key": "abc123",
    }
    assert read_line("serving; Ctrl-C or SIGTERM stops", found)
