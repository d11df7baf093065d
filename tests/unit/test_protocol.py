"""The wire contract (protocol.py): the one batcher rule; the Java client's copies of its and settings.py's names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mslite_contract import own_server, protocol, settings

JAVA_SOURCES = Path(__file__).resolve().parents[2] / "client" / "java" / "src" / "mslite" / "triton"
JAVA_CONFIGS = JAVA_SOURCES / "ModelConfigs.java"


def test_queue_policy_is_an_opt_in_and_zero_means_none() -> None:
    assert protocol.queue_policy(0) == {}
    assert protocol.queue_policy(7) == {"default_queue_policy": {"max_queue_size": 7}}
    with pytest.raises(ValueError, match="max_queue_size must be >= 0"):
        protocol.queue_policy(-1)


def test_batcher_defaults_never_add_a_queue_policy() -> None:
    assert protocol.batcher_defaults({}, max_batch_size=64, cpu_only=True) == {"preferred_batch_size": [2]}
    assert protocol.batcher_defaults({}, max_batch_size=64, cpu_only=False) == {}
    assert protocol.batcher_defaults({"preferred_batch_size": [4]}, max_batch_size=64, cpu_only=True) == {}


def test_java_client_names_match_the_module() -> None:
    java: dict[str, str] = {}
    for source in (JAVA_CONFIGS, JAVA_SOURCES / "ModelParallelRunner.java", JAVA_SOURCES / "KServeHttp.java"):
        java.update(re.findall(r'static final String (\w+) = "([^"]*)";', source.read_text()))
    shared = {name: value for name, value in vars(protocol).items() if name in java}
    assert set(shared) >= {"BATCHING_SECTION", "MAX_BATCH_SIZE_KEY", "MAX_QUEUE_SIZE_KEY", "QUEUE_POLICY_KEY"}
    assert set(shared) >= {"RUNNER_SECTION", "MAX_PENDING_KEY", "WORKERS_KEY", "THREADS_KEY", "ADMIN_KEY_HEADER"}
    assert {name: java[name] for name in shared} == shared


def test_java_client_variables_match_the_settings() -> None:
    java = dict(re.findall(r'static final String (\w+) = "([^"]*)";', (JAVA_SOURCES / "Settings.java").read_text()))
    names = {"URL_ENV", "AUTOSTART_ENV", "SERVE_CMD_ENV", "ADMIN_KEY_ENV", "KEY_DIR_ENV"}
    assert {name: java[name] for name in names} == {name: getattr(settings, name) for name in names}


def test_java_client_reads_the_start_up_lines_of_the_contract() -> None:
    """LocalServer.java's copies of how a client's own server is found and started, and the lines it reads."""
    source = (JAVA_SOURCES / "LocalServer.java").read_text()
    java = dict(re.findall(r'static final String (\w+) = "([^"]*)";', source))
    names = {"HTTP_LINE", "KEY_LINE", "SERVING_LINE", "SERVE_PROGRAM", "CHECKOUT_VENV_BIN"}
    assert {name: java[name] for name in names} == {name: getattr(own_server, name) for name in names}
    private = re.search(r"PRIVATE_ARGS = List.of\(([^)]*)\)", source)
    assert private and tuple(re.findall(r'"([^"]*)"', private.group(1))) == own_server.PRIVATE_ARGS
