"""`mslite-triton serve --help` and the library's warnings as a newcomer meets them (no server)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import threading

import pytest

import mslite_triton as mslite
from mslite_server.cli import _stop_at_eof, build_parser
from mslite_triton._model_config import plan_workers


def test_serve_help_explains_every_port_and_the_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for what, default in (("HTTP/REST", 8000), ("gRPC", 8001), ("metrics", 8002)):
        assert f"{what} port; 0: a free one (default {default})" in text
    assert "--log-verbose level" in text
    assert "--triton-http-port" not in text  # gone: tritonserver's own endpoints are Unix sockets


def test_the_gone_private_port_options_are_refused_with_the_reason(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["serve", "--model-repository", str(tmp_path), "--triton-grpc-port", "18001"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert (
        "--triton-grpc-port: no such option any more; " in err and "Unix sockets that only this user can reach" in err
    ), err
    assert "with --no-gateway it serves --http-port and --grpc-port itself" in err, err


def test_more_worker_threads_than_cores_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    ctx = mslite.Context()
    ctx.parallel.workers_num = 4
    ctx.cpu.thread_num = 1
    with caplog.at_level(logging.WARNING, logger="mslite_triton"):
        plan_workers(ctx, cores=2)
    assert "workers_num 4 x thread_num 1 = 4 threads on 2 cores" in caplog.text
    caplog.clear()
    ctx.parallel.workers_num = 2
    with caplog.at_level(logging.WARNING, logger="mslite_triton"):
        plan_workers(ctx, cores=2)
    assert caplog.text == ""


def test_warnings_carry_the_librarys_name_when_the_application_logs_nothing() -> None:
    code = (
        "import mslite_triton as m; from mslite_triton._model_config import plan_workers\n"
        "c = m.Context(); c.cpu.thread_num = 64; plan_workers(c, cores=2, workers_num=1)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "mslite_triton: thread num 64 is more than 5 x 2 cores: set to 10" in proc.stderr.splitlines()


def test_stop_on_stdin_close_stops_at_the_end_of_standard_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch a C++ or Java client relies on: the server stops once the program holding stdin has ended."""
    assert build_parser().parse_args(["serve", "--stop-on-stdin-close"]).stop_on_stdin_close
    assert not build_parser().parse_args(["serve"]).stop_on_stdin_close
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"anything the parent wrote\n")))
    stop, received = threading.Event(), []
    _stop_at_eof(stop, received)
    assert stop.is_set() and received == ["end of standard input"]
