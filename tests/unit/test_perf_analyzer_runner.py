"""The perf_analyzer runner: its command line, its environment, and how it reads what perf_analyzer wrote.

The CSV and the unstable message were captured from tritonclient 2.40's perf_analyzer on the tiny model
(gRPC, concurrency 2). The real binary against a real server runs in tests/integration/test_perf_analyzer.py;
here a shell script stands in for it, replaying the captured output, to reach every outcome on demand.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from mslite_server.tune import cuda_runtime_dir
from tests.support.perf_analyzer import (
    UNSTABLE,
    PerfAnalyzerError,
    PerfRun,
    parse_csv,
    perf_env,
    run,
    run_relaxing,
)

CAPTURED_CSV = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"
    "2,2956.73,2,207,178,12,196,76,0,638,805,880,1944\n"
)
CAPTURED_UNSTABLE = (
    "Failed to obtain stable measurement within 3 measurement windows for concurrency 2. "
    "Please try to increase the --measurement-interval.\nFailed to obtain stable measurement."
)


def test_the_command_line_carries_every_argument_in_order() -> None:
    spec = PerfRun(Path("/opt/venv/bin/perf_analyzer"), "tiny", "127.0.0.1:8001", concurrency=8, interval_ms=1500)
    assert spec.args() == [
        "/opt/venv/bin/perf_analyzer", "-m", "tiny", "-u", "127.0.0.1:8001", "-i", "grpc",
        "--concurrency-range", "8", "--measurement-interval", "1500",
        "--max-trials", "3", "--stability-percentage", "1000",
    ]  # fmt: skip
    full = PerfRun(
        Path("/x/perf_analyzer"),
        "m",
        "h:1",
        "http",
        stability_pct=50,
        shared_memory="system",
        batch_size=1,
        input_data=Path("/data dir"),
    ).args()
    assert full[full.index("-b") + 1] == "1" and full.index("-b") < full.index("--concurrency-range")
    assert full[full.index("--shared-memory") + 1] == "system"
    assert full[full.index("--input-data") + 1] == "/data dir"
    assert full[full.index("--stability-percentage") + 1] == "50"
    assert "-f" not in full  # the CSV path is the runner's own
    assert "--streaming" not in full and PerfRun(Path("pa"), "m", "h:1", streaming=True).args()[-1] == "--streaming"


def test_the_recorded_command_names_the_binary_only() -> None:
    spec = PerfRun(Path("/a/b/perf_analyzer"), "tiny", "h:1", input_data=Path("/with space"))
    shown = spec.shown()
    assert shown.startswith("perf_analyzer -m tiny ") and "/a/b" not in shown
    assert shlex.split(shown)[-1] == "/with space"


def test_relaxed_accepts_any_three_windows_and_may_lengthen_them() -> None:
    spec = PerfRun(Path("pa"), "tiny", "h:1", interval_ms=1000, stability_pct=15, max_trials=6)
    longer = spec.relaxed(interval_factor=2)
    assert (longer.interval_ms, longer.stability_pct, longer.max_trials) == (2000, 1000, 6)
    assert spec.relaxed().interval_ms == 1000
    assert longer.limit_s > spec.limit_s >= 6 * 1.0


def test_the_captured_csv_gives_throughput_percentiles_and_the_latency_split() -> None:
    got = parse_csv(CAPTURED_CSV)
    assert got.infer_s == pytest.approx(2956.73)
    assert (got.p50_ms, got.p99_ms) == (pytest.approx(0.638), pytest.approx(1.944))
    assert got.breakdown_us == {
        "client_send": 2.0, "network": 207.0, "queue": 178.0, "compute_input": 12.0,
        "compute_infer": 196.0, "compute_output": 76.0, "client_recv": 0.0,
    }  # fmt: skip
    assert got.row["p90 latency"] == "805" and got.row["Concurrency"] == "2"


@pytest.mark.parametrize(
    "text,why",
    [
        ("", "empty CSV"),
        ("Concurrency,Inferences/Second\n2,10\n", "lacks a figure"),
        (CAPTURED_CSV.split("\n")[0] + "\n2,2956.73,2,207\n", "lacks a figure"),  # a row cut short
    ],
    ids=["empty", "no-percentiles", "cut-row"],
)
def test_a_csv_without_figures_is_an_error_saying_so(text: str, why: str) -> None:
    with pytest.raises(PerfAnalyzerError, match=why):
        parse_csv(text)


def test_the_environment_puts_the_venvs_cuda_runtime_first(tmp_path: Path) -> None:
    binary = tmp_path / "bin" / "perf_analyzer"
    base = {"LD_LIBRARY_PATH": "/usr/local/lib", "KEEP": "1"}
    assert cuda_runtime_dir(binary) is None
    assert perf_env(binary, base) == base  # a binary outside a venv gets the environment as it is
    lib = tmp_path / "lib" / "python3.11" / "site-packages" / "nvidia" / "cuda_runtime" / "lib"
    lib.mkdir(parents=True)
    env = perf_env(binary, base)
    assert env["LD_LIBRARY_PATH"] == f"{lib}{os.pathsep}/usr/local/lib" and env["KEEP"] == "1"
    assert perf_env(binary, {})["LD_LIBRARY_PATH"] == str(lib)
    assert base["LD_LIBRARY_PATH"] == "/usr/local/lib"  # the caller's mapping is left alone


def _stand_in(tmp_path: Path, body: str) -> Path:
    """An executable that behaves like perf_analyzer as `body` says; `$CSV` is its `-f` argument."""
    script = tmp_path / "perf_analyzer"
    (tmp_path / "captured.csv").write_text(CAPTURED_CSV)
    script.write_text(
        '#!/bin/sh\nCSV=""; STAB=""; prev=""\n'
        'for a in "$@"; do [ "$prev" = -f ] && CSV=$a; [ "$prev" = --stability-percentage ] && STAB=$a; prev=$a; done\n'
        f"{body}\n"
    )
    script.chmod(0o755)
    return script


def _spec(binary: Path, **kw: object) -> PerfRun:
    return PerfRun(binary, "tiny", "127.0.0.1:1", interval_ms=10, **kw)  # type: ignore[arg-type]


def test_run_reads_the_csv_the_binary_wrote(tmp_path: Path) -> None:
    binary = _stand_in(tmp_path, f'cp "{tmp_path}/captured.csv" "$CSV"; echo "$LD_LIBRARY_PATH" > "{tmp_path}/env"')
    got = run(_spec(binary), {"LD_LIBRARY_PATH": "/marker", "PATH": os.environ["PATH"]})
    assert got is not None and got.infer_s == pytest.approx(2956.73)
    assert (tmp_path / "env").read_text().strip() == "/marker"  # the environment it was given


def test_unstable_windows_give_none_and_other_failures_an_error_with_the_output(tmp_path: Path) -> None:
    unstable = _stand_in(tmp_path, f"printf '%s' '{CAPTURED_UNSTABLE}' >&2; exit 2")
    assert UNSTABLE in CAPTURED_UNSTABLE
    assert run(_spec(unstable), dict(os.environ)) is None
    broken = _stand_in(tmp_path, "echo 'error: failed to get model metadata' >&2; exit 99")
    with pytest.raises(PerfAnalyzerError, match="exit 99: error: failed to get model metadata"):
        run(_spec(broken), dict(os.environ))
    silent = _stand_in(tmp_path, "exit 0")  # succeeded but wrote no CSV
    with pytest.raises(PerfAnalyzerError, match="exit 0"):
        run(_spec(silent), dict(os.environ))


def test_run_relaxing_retries_only_unstable_windows_and_says_which_run_counted(tmp_path: Path) -> None:
    binary = _stand_in(
        tmp_path,
        f'[ "$STAB" = 1000 ] || {{ echo \'{UNSTABLE}.\' >&2; exit 2; }}\ncp "{tmp_path}/captured.csv" "$CSV"',
    )
    spec = _spec(binary, stability_pct=15)
    got, used, stable = run_relaxing(spec, dict(os.environ), spec.relaxed(interval_factor=2))
    assert (used.stability_pct, used.interval_ms, stable) == (1000, 20, False)
    assert got.p99_ms == pytest.approx(1.944)
    relaxed = spec.relaxed()
    got, used, stable = run_relaxing(relaxed, dict(os.environ), relaxed)
    assert used is relaxed and stable
    never = _stand_in(tmp_path, f"echo '{UNSTABLE}.' >&2; exit 2")
    with pytest.raises(PerfAnalyzerError, match="no stable figures for tiny"):
        run_relaxing(_spec(never), dict(os.environ), _spec(never))


def test_a_run_past_its_bound_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = _stand_in(tmp_path, "exec sleep 30")
    monkeypatch.setattr(PerfRun, "limit_s", property(lambda self: 0.5))
    with pytest.raises(PerfAnalyzerError, match="ran past 0 s|ran past 1 s"):
        run(_spec(binary), dict(os.environ))
