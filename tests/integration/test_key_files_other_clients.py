"""The C++ and Java clients read key files as the Python client does (`admin_key.key_for`): a file's key goes only
to a loopback port every listener of which belongs to the file's owner, never to a dead server's port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from mslite_contract import admin_key, settings
from tests.support.other_clients import javac

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CPP_PROGRAM = r"""
#include <iostream>
#include "endpoint.h"
int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) std::cout << "[" << mslite_triton::AdminKey(argv[i]) << "]" << std::endl;
}
"""
JAVA_PROGRAM = """
package mslite.triton;
public class KeyFor {
    public static void main(String[] args) {
        for (String url : args) {
            String key = Endpoint.adminKey(url);
            System.out.println("[" + (key == null ? "" : key) + "]");
        }
    }
}
"""


def _cpp(tmp_path: Path) -> list[str]:
    if shutil.which("g++") is None:
        pytest.fail("no g++ (the C++ client's tests need it: scripts/check_system.sh)")
    src = tmp_path / "key_for.cc"
    src.write_text(CPP_PROGRAM)
    out = tmp_path / "key_for"
    sources = [str(src), str(ROOT / "client/cpp/src/endpoint.cc")]
    build = subprocess.run(
        ["g++", "-std=c++17", f"-I{ROOT / 'client/cpp/src'}", f"-I{ROOT / 'client/cpp/include'}", *sources,
         "-o", str(out)], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    return [str(out)]


def _java(tmp_path: Path) -> list[str]:
    src = tmp_path / "KeyFor.java"
    src.write_text(JAVA_PROGRAM)
    classes = javac(tmp_path / "classes", src, strict=False)
    return ["java", "-cp", str(classes), "mslite.triton.KeyFor"]


@pytest.mark.parametrize("client", ["cpp", "java"])
def test_a_key_file_goes_only_to_its_owners_live_loopback_listener(tmp_path: Path, client: str, monkeypatch):
    keys = tmp_path / "keys"
    monkeypatch.setenv(settings.KEY_DIR_ENV, str(keys))
    command = _cpp(tmp_path) if client == "cpp" else _java(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as gone:
        dead = gone.getsockname()[1]
    listener = socket.create_server(("127.0.0.1", 0))
    live = listener.getsockname()[1]
    try:
        admin_key.write_key("live-key", "127.0.0.1", [live])
        admin_key.write_key("dead-key", "127.0.0.1", [dead])
        admin_key.write_key("far-key", "192.0.2.1", [live])
        env = {k: v for k, v in os.environ.items() if k != settings.ADMIN_KEY_ENV}
        env[settings.KEY_DIR_ENV] = str(keys)
        urls = [f"http://127.0.0.1:{live}", f"http://localhost:{live}", f"http://127.0.0.1:{dead}",
                f"http://192.0.2.1:{live}"]  # fmt: skip
        run = subprocess.run([*command, *urls], capture_output=True, text=True, timeout=120, env=env)
    finally:
        listener.close()
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[live-key]", "[live-key]", "[]", "[]"], run.stdout
