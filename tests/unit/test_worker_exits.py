"""How a dead worker ended, read from /proc before its parent reaps it (no server: a child of this process)."""

from __future__ import annotations

import os
import signal
import subprocess

from mslite_contract.protocol import DEADLINE_EXIT_CODE
from mslite_server.workers import _children, describe_exit
from tests.support.eventually import eventually


def _zombie_status(argv: list[str], kill: bool) -> int | None:
    """Start `argv`, let it end (killed or on its own), and read its wait status while it is a zombie."""
    proc = subprocess.Popen(argv)
    try:
        if kill:
            proc.send_signal(signal.SIGKILL)

        def zombie() -> object:
            found = [p for p in _children(os.getpid()) if p.pid == proc.pid and p.state == "Z"]
            return found[0] if found else None

        return eventually(zombie, "the child to become a zombie", 30, pause_s=0.01).exit_status
    finally:
        proc.wait()  # reap it


def test_a_killed_worker_says_which_signal() -> None:
    status = _zombie_status(["sleep", "30"], kill=True)
    assert describe_exit(status).startswith("killed by SIGKILL (the kernel's OOM killer sends it")


def test_a_worker_that_exited_says_its_code() -> None:
    assert describe_exit(_zombie_status(["sh", "-c", "exit 3"], kill=False)) == "exited with code 3"


def test_unknown_status() -> None:
    assert describe_exit(None) == "exit status unknown"


def test_a_worker_that_ended_itself_at_its_execute_deadline_says_so() -> None:
    status = _zombie_status(["sh", "-c", f"exit {DEADLINE_EXIT_CODE}"], kill=False)
    assert (
        describe_exit(status)
        == f"exited with code {DEADLINE_EXIT_CODE} (its execute ran past the model's execute_deadline_s)"
    )
