"""One real embedded tritonserver for the whole test session, on free loopback ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from mslite_triton.server import EmbeddedServer, ServerConfig
from tests.support.repository import build_repository
from tests.support.server_checks import assert_never_healed


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    build_repository(repo)
    return repo


@pytest.fixture(scope="session")
def server(repository: Path):
    with EmbeddedServer(ServerConfig(model_repository=repository, startup_timeout_s=240)) as srv:
        yield srv
        assert_never_healed(srv)  # before the log goes with the workspace
