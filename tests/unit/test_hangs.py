"""What the supervisor reads to find a hung gateway or worker: a process's state, and the `hang_s` setting."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from mslite_server.cli import build_parser
from mslite_server.config import ServerConfig
from mslite_server.workers import state_of
from tests.support.eventually import eventually


def test_a_stopped_process_reads_as_state_t_and_a_reaped_one_as_gone():
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert state_of(proc.pid) not in ("T", "Z", "")  # running (S, R, or D while it execs): not stopped
        os.kill(proc.pid, signal.SIGSTOP)
        eventually(lambda: state_of(proc.pid) == "T", "state T", 10, pause_s=0.01)
        os.kill(proc.pid, signal.SIGKILL)  # ends it even while stopped
        eventually(lambda: state_of(proc.pid) == "Z", "state Z", 10, pause_s=0.01)
    finally:
        proc.kill()
        proc.wait()
    assert state_of(proc.pid) == ""


def test_hang_s_is_a_typed_setting_of_serve():
    assert ServerConfig(model_repository=Path("repo")).hang_s == 10.0
    args = build_parser().parse_args(["serve", "--hang-s", "2.5"])
    assert args.hang_s == 2.5
    assert build_parser().parse_args(["serve"]).hang_s == 10.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--hang-s", "0"])
