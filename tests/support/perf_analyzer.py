"""perf_analyzer, Triton's load generator, run from typed arguments and read back into typed figures.

The benchmarks' and the tests' one definition of the command line, the environment the binary needs, the time
bound and the CSV it writes (`tune` hands the binary to Model Analyzer through a wrapper script instead).
perf_analyzer from the `tritonclient==2.40.0` wheel needs the CUDA runtime library that its venv ships
(`nvidia-cuda-runtime-cu12`), which is not on the loader's path unless we put it there.
"""

from __future__ import annotations

import csv
import io
import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from mslite_server.tune import cuda_runtime_dir

# what perf_analyzer prints when no `max_trials` windows agreed within the stability percentage
UNSTABLE = "Failed to obtain stable measurement"

# perf_analyzer's CSV columns that split the average latency: client and network, then Triton's own timers
BREAKDOWN = {
    "Client Send": "client_send",
    "Network+Server Send/Recv": "network",
    "Server Queue": "queue",
    "Server Compute Input": "compute_input",
    "Server Compute Infer": "compute_infer",
    "Server Compute Output": "compute_output",
    "Client Recv": "client_recv",
}


class PerfAnalyzerError(RuntimeError):
    """perf_analyzer failed, ran past its bound, or wrote no figures (the message keeps the end of its output)."""


def perf_env(binary: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (the process's environment by default) with the binary's CUDA runtime first on LD_LIBRARY_PATH."""
    env = dict(os.environ if base is None else base)
    libdir = cuda_runtime_dir(binary)
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, *filter(None, [env.get("LD_LIBRARY_PATH")])])
    return env


@dataclass(frozen=True)
class PerfRun:
    """One perf_analyzer run at one concurrency: what it measures and how long it may try."""

    binary: Path
    model: str
    url: str  # host:port, as perf_analyzer wants it
    protocol: str = "grpc"  # or "http"
    concurrency: int = 1
    interval_ms: int = 2000  # one measurement window
    max_trials: int = 3  # windows at most
    stability_pct: int = 1000  # 1000: any three windows agree
    shared_memory: str | None = None  # "system", "none", or None to leave the flag out
    batch_size: int | None = None
    input_data: Path | None = None  # a folder of raw files named after the inputs
    streaming: bool = False  # gRPC only: one ModelStreamInfer call per concurrent client instead of unary calls

    @property
    def limit_s(self) -> float:
        """Wall-clock bound of the run: every window, with slack for start-up and a busy machine."""
        return self.interval_ms * self.max_trials / 1000 * 1.5 + 60

    def args(self) -> list[str]:
        """The command line, without the CSV file."""
        cmd = [str(self.binary), "-m", self.model, "-u", self.url, "-i", self.protocol]
        if self.batch_size is not None:
            cmd += ["-b", str(self.batch_size)]
        cmd += ["--concurrency-range", str(self.concurrency), "--measurement-interval", str(self.interval_ms)]
        cmd += ["--max-trials", str(self.max_trials), "--stability-percentage", str(self.stability_pct)]
        if self.shared_memory is not None:
            cmd += ["--shared-memory", self.shared_memory]
        if self.input_data is not None:
            cmd += ["--input-data", str(self.input_data)]
        if self.streaming:
            cmd.append("--streaming")
        return cmd

    def shown(self) -> str:
        """The command line as the benchmarks record it: the binary by name, no CSV path."""
        cmd = self.args()
        return shlex.join([self.binary.name, *cmd[1:]])

    def relaxed(self, interval_factor: int = 1) -> PerfRun:
        """The same run accepting any three windows, each `interval_factor` times as long."""
        return replace(self, interval_ms=self.interval_ms * interval_factor, stability_pct=1000)


@dataclass(frozen=True)
class PerfResult:
    """perf_analyzer's figures for one run (its CSV row)."""

    infer_s: float
    p50_ms: float
    p99_ms: float
    breakdown_us: dict[str, float]  # the average latency split (BREAKDOWN), microseconds
    row: dict[str, str]  # every column, as written


def parse_csv(text: str) -> PerfResult:
    """The first row of perf_analyzer's `-f` CSV.

    Raises:
        PerfAnalyzerError: no row, or a figure missing.
    """
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise PerfAnalyzerError("perf_analyzer wrote an empty CSV")
    row = rows[0]
    try:
        return PerfResult(
            infer_s=float(row["Inferences/Second"]),
            p50_ms=float(row["p50 latency"]) / 1e3,
            p99_ms=float(row["p99 latency"]) / 1e3,
            breakdown_us={key: float(row[col]) for col, key in BREAKDOWN.items() if row.get(col)},
            row=row,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise PerfAnalyzerError(f"perf_analyzer's CSV lacks a figure ({e}): {text[:600]}") from e


def run(spec: PerfRun, env: Mapping[str, str]) -> PerfResult | None:
    """Run `spec` once; its figures, or None when its windows never agreed (a shared machine).

    Raises:
        PerfAnalyzerError: it ran past `spec.limit_s`, failed for another reason, or wrote no CSV.
    """
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        csv_path = Path(tmp) / "pa.csv"
        started = time.monotonic()
        try:
            out = subprocess.run(
                [*spec.args(), "-f", str(csv_path)], env=dict(env), capture_output=True, text=True, timeout=spec.limit_s
            )
        except subprocess.TimeoutExpired as e:
            raise PerfAnalyzerError(
                f"perf_analyzer ran past {spec.limit_s:.0f} s ({time.monotonic() - started:.0f} s)"
            ) from e
        text = out.stdout + out.stderr
        if out.returncode != 0 and UNSTABLE in text:
            return None
        if out.returncode != 0 or not csv_path.exists():
            raise PerfAnalyzerError(f"perf_analyzer exit {out.returncode}: {text[-1500:]}")
        try:
            return parse_csv(csv_path.read_text())
        except PerfAnalyzerError as e:
            raise PerfAnalyzerError(f"{e}; its output: {text[-600:]}") from e


def run_relaxing(spec: PerfRun, env: Mapping[str, str], relaxed: PerfRun) -> tuple[PerfResult, PerfRun, bool]:
    """`spec`, and `relaxed` when its windows never agree: the figures, the run that gave them, and whether stable.

    Stable means `spec` itself agreed. `relaxed` should accept any three windows (`spec.relaxed()`), so that
    every measurement ends.

    Raises:
        PerfAnalyzerError: as `run`, or `relaxed` gave no figures either.
    """
    got = run(spec, env)
    if got is not None:
        return got, spec, True
    got = run(relaxed, env)
    if got is None:
        raise PerfAnalyzerError(f"perf_analyzer gave no stable figures for {relaxed.model} ({relaxed.shown()})")
    return got, relaxed, False
