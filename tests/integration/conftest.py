"""One real tritonserver (`LocalServer`) for the whole test session, on free loopback ports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mslite_server import LocalServer, ServerConfig
from tests.support.other_clients import JAVA, javac, python_client_answer, write_sample_files
from tests.support.repository import build_repository
from tests.support.server_checks import assert_never_healed, dead_workers, health_marks

# the session server once started: each test's teardown checks it still has its first processes
_SESSION: list[LocalServer] = []


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    build_repository(repo)
    return repo


@pytest.fixture(scope="session")
def server(repository: Path):
    with LocalServer(ServerConfig(model_repository=repository, startup_timeout_s=240)) as srv:
        _SESSION.append(srv)
        yield srv
        _SESSION.clear()
        assert_never_healed(srv)  # before the log goes with the workspace


@pytest.fixture(scope="session")
def sample_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MindSpore Lite's sample input and MobileNetV2, for the C++ and Java clients' samples."""
    return write_sample_files(tmp_path_factory.mktemp("sample_files"))


@pytest.fixture(scope="session")
def python_answer(server, sample_files: Path) -> np.ndarray:
    """The Python client's answer to the sample input: what the other clients' answers are compared with."""
    return python_client_answer(server.grpc_url, sample_files)


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Java client and its sample Main, compiled."""
    return javac(tmp_path_factory.mktemp("java_classes"), JAVA / "examples" / "Main.java")


@pytest.fixture(autouse=True)
def _session_server_did_not_heal():
    """Fail the test during which the session server lost a process (its setup, module fixtures included).

    The session teardown would report it too, but as an error of whichever test used the server last. A dead
    worker may stay a zombie for the rest of the session (seen after a crash the supervisor healed), so only
    deaths new in this test count: one crash fails one test, not every test after it. The log's end goes with the
    failure (a worker's crash writes its Python stacks there), as the log itself goes with the session.
    """
    before = health_marks(_SESSION[0]) if _SESSION else (0, ())
    dead_before = set(dead_workers(_SESSION[0])) if _SESSION else set()
    yield
    if _SESSION:
        srv = _SESSION[0]
        restarts, heals = health_marks(srv)
        new, dead = heals[len(before[1]) :], [d for d in dead_workers(srv) if d not in dead_before]
        assert restarts == before[0] and not new and not dead, (
            f"the session server lost a process during this test: {restarts - before[0]} tritonserver restart(s), "
            f"heals {list(new)}, dead workers not yet healed {dead}; "
            f"the server log:\n{srv.log_tail(60)}"
        )
