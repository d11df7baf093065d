"""One perf_analyzer measurement over gRPC (optionally with system shared memory), with CPU accounting around it.

Bounded: `-p` windows of `interval_ms`, at most `max_trials` of them. When the windows never agree within
`stability_pct` (a shared machine), the measurement is repeated once with windows twice as long accepting
any three of them, and the point is marked unstable, so every step ends in bounded time. When perf_analyzer
still gives no figures, the error keeps the end of its output.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.support.perf_analyzer import PerfRun, run_relaxing
from tests.support.tools import Tools

from .serving import BenchServer


@dataclass(frozen=True)
class PerfSettings:
    """How long each concurrency level is measured."""

    interval_ms: int
    max_trials: int
    stability_pct: int


@dataclass(frozen=True)
class PerfPoint:
    """One concurrency level: perf_analyzer's figures plus CPU per image from /proc and Triton's statistics."""

    model: str
    concurrency: int
    shm: bool
    infer_s: float
    p50_ms: float
    p99_ms: float
    stable: bool
    images: int  # served during the whole run (all windows), from Triton's statistics
    avg_batch: float  # images per worker execute() call
    worker_cpu_ms_per_img: float
    server_cpu_ms_per_img: float  # tritonserver's own threads (gRPC, queue, copies)
    client_cpu_ms_per_img: float  # perf_analyzer
    breakdown_us: dict[str, float]  # perf_analyzer's average latency split (BREAKDOWN), microseconds
    command: str  # the perf_analyzer command line (its -f CSV path left out)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(
    tools: Tools, server: BenchServer, model: str, concurrency: int, *, shm: bool, settings: PerfSettings
) -> PerfPoint:
    """Run perf_analyzer against `model` at one concurrency (the CPU figures are its own workers' and the server's).

    Raises:
        PerfAnalyzerError: perf_analyzer failed or gave no figures, even accepting any three windows.
    """
    spec = PerfRun(
        binary=tools.perf_analyzer,
        model=model,
        url=server.grpc_address,
        concurrency=concurrency,
        interval_ms=settings.interval_ms,
        max_trials=settings.max_trials,
        stability_pct=settings.stability_pct,
        shared_memory="system" if shm else "none",
    )
    inf0, exe0 = server.inference_count(model)
    work0, srv0 = server.cpu_s(model)
    kids0 = _children_cpu_s()
    result, used, stable = run_relaxing(spec, tools.env, spec.relaxed(interval_factor=2))
    inf1, exe1 = server.inference_count(model)
    work1, srv1 = server.cpu_s(model)
    kids1 = _children_cpu_s()
    images = max(1, inf1 - inf0)
    per_img = 1e3 / images
    return PerfPoint(
        model=model,
        concurrency=concurrency,
        shm=shm,
        infer_s=result.infer_s,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        stable=stable,
        images=inf1 - inf0,
        avg_batch=(inf1 - inf0) / max(1, exe1 - exe0),
        worker_cpu_ms_per_img=(work1 - work0) * per_img,
        server_cpu_ms_per_img=(srv1 - srv0) * per_img,
        client_cpu_ms_per_img=(kids1 - kids0) * per_img,
        breakdown_us=result.breakdown_us,
        command=used.shown(),
    )


def measure_composed(
    tools: Tools,
    compose: Callable[[Path], None],
    names: list[str],
    levels: list[int],
    rounds: int,
    settings: PerfSettings,
    describe: Callable[[PerfPoint], str],
    extra_backends: dict[str, Path] | None = None,
) -> dict[tuple[str, int], list[PerfPoint]]:
    """Every model of `names` at every level, `rounds` times, the models' order reversed every other round.

    They are served together, from a repository that `compose(root)` writes, by one server that loads only
    them (with `extra_backends` beside ours); the server and the repository are gone afterwards. Prints
    `describe(point)` for each measurement as it lands; returns the points by (model, level).
    """
    found: dict[tuple[str, int], list[PerfPoint]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-composed-") as tmp:
        compose(Path(tmp))
        server = BenchServer(Path(tmp), extra_backends=extra_backends).start()
        try:
            server.only(*names)
            for r in range(rounds):
                for c in levels:
                    for name in names if r % 2 == 0 else names[::-1]:
                        pt = measure(tools, server, name, c, shm=False, settings=settings)
                        found.setdefault((name, c), []).append(pt)
                        print(f"round {r + 1} {name} c={c}: {describe(pt)}", flush=True)
        finally:
            server.stop()
    return found


def variant_names(parser: argparse.ArgumentParser, text: str, known: Collection[str]) -> list[str]:
    """A `--variants` value: comma-separated names, each one of `known` or `naive` (parser.error otherwise)."""
    names = text.split(",")
    unknown = [n for n in names if n != "naive" and n not in known]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(known)} and naive")
    return names


def medians_by_level(
    found: dict[tuple[str, int], list[PerfPoint]], names: list[str], levels: list[int], metric: str
) -> Iterator[tuple[int, str, list[PerfPoint], float]]:
    """For each level and model: its points, and the median over rounds of its `metric` / the first model's."""
    for c in levels:
        base = found[(names[0], c)]
        for name in names:
            pts = found[(name, c)]
            yield c, name, pts, statistics.median(getattr(x, metric) / getattr(y, metric) for x, y in zip(pts, base))


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
