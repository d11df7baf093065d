"""The benchmark's plan (sizes for a full or quick run) and its steps, in the order they run.

Each step is a label and a function that stores its figures in `Bench.results` and returns a one-line
summary for the progress display.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mslite_triton._model_config import local_cores, plan_workers

from . import inprocess
from .perf import PerfSettings, measure
from .serving import BenchServer, ModelSpec, compose_repository, worker_pids
from .tools import Tools

ROOT = Path(__file__).resolve().parent.parent
MOBILENET = "mobilenetv2"


@dataclass(frozen=True)
class Plan:
    """Sizes of one run."""

    quick: bool
    cores: int
    workers: int  # from the client's auto rule (workers_num 0, thread_num 0)
    threads: int
    perf: PerfSettings
    served_levels: tuple[int, ...]
    shm_levels: tuple[int, ...]
    tiny_levels: tuple[int, ...] = (1, 8)
    ceiling_s: float = 3.0
    single_s: float = 4.0
    client_warmup_s: float = 2.0
    client_s: float = 8.0


def make_plan(quick: bool) -> Plan:
    """The full run, or a short one with the levels the bars need and 1 s windows."""
    from mslite_triton import Context

    cores = local_cores()
    auto = plan_workers(Context(), cores=cores)
    if quick:
        return Plan(
            quick,
            cores,
            auto.workers,
            auto.thread_num,
            PerfSettings(interval_ms=1000, max_trials=4, stability_pct=50),
            served_levels=(1, 8),
            shm_levels=(8,),
            ceiling_s=1.0,
            single_s=1.5,
            client_warmup_s=1.0,
            client_s=3.0,
        )
    return Plan(
        quick,
        cores,
        auto.workers,
        auto.thread_num,
        PerfSettings(interval_ms=3000, max_trials=6, stability_pct=20),
        served_levels=(1, 2, 4, 8, 16),
        shm_levels=(1, 2, 4, 8, 16),
    )


def model_specs(plan: Plan) -> list[ModelSpec]:
    """Every model the run serves; ours and the naive baseline get the same workers and threads."""
    w, t = plan.workers, plan.threads
    return [
        ModelSpec(MOBILENET, MOBILENET, "mslite", w, t),
        ModelSpec(f"{MOBILENET}_naive", MOBILENET, "naive", w, t),
        ModelSpec(f"{MOBILENET}_1x1", MOBILENET, "mslite", 1, 1),
        ModelSpec("tiny", "tiny", "mslite", w, t),
        ModelSpec("tiny_naive", "tiny", "naive", w, t),
    ]


def client_has_shm() -> bool:
    """Whether the client library knows the `MSLITE_TRITON_SHM` switch (its shared-memory path)."""
    import mslite_triton

    pkg = Path(str(mslite_triton.__file__)).parent
    return any("MSLITE_TRITON_SHM" in p.read_text(errors="replace") for p in pkg.glob("*.py"))


Step = tuple[str, Callable[[], str]]


@dataclass
class Bench:
    """The state shared by the steps of one run."""

    plan: Plan
    tools: Tools
    results: dict[str, Any] = field(default_factory=dict)
    server: BenchServer | None = None
    repo_dir: Path | None = None

    def __post_init__(self) -> None:
        self.results.update(
            meta={
                **asdict(self.plan),
                "perf_analyzer": self.tools.version,
                "models": [asdict(s) for s in model_specs(self.plan)],
            },
            ceiling={"grid": [], "best": None, "single": None},
            served={b: {"grpc": [], "shm": []} for b in ("mslite", "naive")},
            tiny={"mslite": [], "naive": []},
            client={
                "runner": None,
                "raw": None,
                "batch8": {"plain": None, "shm": None, "shm_available": client_has_shm()},
            },
            scaling={"1x1": None, "2x1": None},
            errors=[],
        )

    # -- steps -----------------------------------------------------------------------------------
    def steps(self) -> list[Step]:
        p = self.plan
        steps: list[Step] = [
            (f"in-process ceiling: {s} session(s) x {t} thread(s), batch 1 and 8", self._grid(s, t))
            for s in sorted({1, p.cores})
            for t in sorted({1, p.cores})
        ]
        steps.append((f"in-process single session, {p.threads} thread(s), batch 1", self._single))
        steps.append(("start tritonserver (composed repository, mslite + naive backends)", self._start))
        for backend, name in (("mslite", MOBILENET), ("naive", f"{MOBILENET}_naive")):
            steps.append((f"load {name} ({p.workers} workers x {p.threads} thread)", self._load(name)))
            served = self.results["served"][backend]
            steps += [
                (f"{name} gRPC c={c}", self._perf(name, c, False, served["grpc"].append)) for c in p.served_levels
            ]
            steps += [(f"{name} shm c={c}", self._perf(name, c, True, served["shm"].append)) for c in p.shm_levels]
            if backend == "mslite":
                steps += self._client_steps()
        for backend, name in (("mslite", "tiny"), ("naive", "tiny_naive")):
            steps.append((f"load {name}", self._load(name)))
            steps += [
                (f"{name} gRPC c={c}", self._perf(name, c, False, self.results["tiny"][backend].append))
                for c in p.tiny_levels
            ]
        steps.append((f"load {MOBILENET}_1x1 (1 worker x 1 thread)", self._load(f"{MOBILENET}_1x1")))
        steps.append((f"{MOBILENET}_1x1 gRPC c=8", self._perf(f"{MOBILENET}_1x1", 8, False, self._store_scaling)))
        return steps

    def _grid(self, sessions: int, threads: int) -> Callable[[], str]:
        def run() -> str:
            cells = [c.as_dict() for c in self._grid_cells(sessions, threads)]
            self.results["ceiling"]["grid"] += cells
            self.results["ceiling"]["best"] = max(self.results["ceiling"]["grid"], key=lambda c: c["img_s"])
            return ", ".join(f"batch {c['batch']}: {c['img_s']:.0f} img/s" for c in cells)

        return run

    def _grid_cells(self, sessions: int, threads: int) -> list[inprocess.GridCell]:
        path = str(ROOT / "model_repository" / MOBILENET / "1" / "model.onnx")
        spinning = sessions * threads <= self.plan.cores
        pool = [inprocess.make_session(path, threads, spinning=spinning) for _ in range(sessions)]
        return [inprocess.GridCell(sessions, threads, b, inprocess.drive(pool, b, self.plan.ceiling_s)) for b in (1, 8)]

    def _single(self) -> str:
        path = str(ROOT / "model_repository" / MOBILENET / "1" / "model.onnx")
        s = inprocess.single_session(path, self.plan.threads, self.plan.single_s)
        self.results["ceiling"]["single"] = s.as_dict()
        return f"p50 {s.p50_ms:.2f} ms, p99 {s.p99_ms:.2f} ms, {s.img_s:.0f} img/s, CPU {s.cpu_ms_per_img:.2f} ms/img"

    def _start(self) -> str:
        self.repo_dir = Path(tempfile.mkdtemp(prefix="bench-repo-"))
        compose_repository(self.repo_dir, ROOT / "model_repository", model_specs(self.plan))
        self.server = BenchServer(self.repo_dir).start()
        self.results["meta"]["server_config"] = self.server.lifted
        lifted = ", ".join(f"{k}={v}" for k, v in self.server.lifted.items()) or "defaults"
        return f"gRPC on {self.server.grpc_address}, pid {self.server.pid}, ServerConfig: {lifted}"

    def _load(self, name: str) -> Callable[[], str]:
        def run() -> str:
            assert self.server is not None
            self.server.only(name)
            want = next(s.workers for s in model_specs(self.plan) if s.name == name)
            pids = worker_pids(self.server.pid, name)
            if len(pids) != want:
                raise RuntimeError(f"{name}: expected {want} worker processes, found {len(pids)}")
            return f"{len(pids)} worker processes {pids}"

        return run

    def _perf(
        self, name: str, concurrency: int, shm: bool, store: Callable[[dict[str, Any]], None]
    ) -> Callable[[], str]:
        def run() -> str:
            assert self.server is not None
            pt = measure(self.tools, self.server, name, concurrency, shm=shm, settings=self.plan.perf)
            store(pt.as_dict())
            return (
                f"{pt.infer_s:.0f} infer/s, p50 {pt.p50_ms:.2f} ms, p99 {pt.p99_ms:.2f} ms, batch {pt.avg_batch:.2f}, "
                f"CPU/img worker {pt.worker_cpu_ms_per_img:.2f} server {pt.server_cpu_ms_per_img:.2f} "
                f"perf_analyzer {pt.client_cpu_ms_per_img:.2f} ms" + ("" if pt.stable else " (UNSTABLE windows)")
            )

        return run

    def _store_scaling(self, point: dict[str, Any]) -> None:
        self.results["scaling"]["1x1"] = point
        grpc = self.results["served"]["mslite"]["grpc"]
        self.results["scaling"]["2x1"] = next((q for q in grpc if q["concurrency"] == 8), None)

    # -- the Python client -----------------------------------------------------------------------
    def _client_steps(self) -> list[Step]:
        c, b8 = self.results["client"], self.results["client"]["batch8"]
        steps: list[Step] = [
            (
                "client: ModelParallelRunner.predict, 8 threads, batch 1",
                self._client(c, "runner", "runner", 8, 1, None),
            ),
            ("client: raw tritonclient.grpc, 8 threads, batch 1", self._client(c, "raw", "raw", 8, 1, None)),
            (
                f"client: runner, batch 8, {self.plan.workers} threads, MSLITE_TRITON_SHM=0",
                self._client(b8, "plain", "runner", self.plan.workers, 8, "0"),
            ),
        ]
        if b8["shm_available"]:  # the runner above used its default (shared memory on loopback): isolate it
            steps.append(
                (
                    "client: ModelParallelRunner.predict, 8 threads, batch 1, MSLITE_TRITON_SHM=0",
                    self._client(c, "runner_plain", "runner", 8, 1, "0"),
                )
            )
            steps.append(
                (
                    f"client: runner, batch 8, {self.plan.workers} threads, shared memory",
                    self._client(b8, "shm", "runner", self.plan.workers, 8, "1"),
                )
            )
        return steps

    def _client(
        self, into: dict[str, Any], key: str, mode: str, threads: int, batch: int, shm: str | None
    ) -> Callable[[], str]:
        def run() -> str:
            assert self.server is not None
            env = dict(os.environ)
            if shm is not None:
                env["MSLITE_TRITON_SHM"] = shm
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.client_bench",
                mode,
                "--url",
                self.server.server.grpc_url,
                "--model",
                MOBILENET,
                "--threads",
                str(threads),
                "--batch",
                str(batch),
                "--warmup-s",
                str(self.plan.client_warmup_s),
                "--seconds",
                str(self.plan.client_s),
            ]
            limit = self.plan.client_warmup_s + self.plan.client_s + 90
            out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
            if out.returncode != 0:
                raise RuntimeError(f"client_bench exit {out.returncode}: {out.stderr[-1500:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            shown = [f"MSLITE_TRITON_SHM={shm}"] if shm is not None else []
            r["command"] = shlex.join([*shown, "python", *cmd[1:]])
            into[key] = r
            return (
                f"{r['img_s']:.0f} img/s ({r['req_s']:.0f} req/s), p50 {r['p50_ms']:.2f} ms, "
                f"p99 {r['p99_ms']:.2f} ms, client CPU {r['client_cpu_ms_per_req']:.2f} ms/request, "
                f"errors {r['errors']}"
            )

        return run

    def close(self) -> None:
        """Stop the server and remove the composed repository (safe to call twice)."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.repo_dir is not None:
            import shutil

            shutil.rmtree(self.repo_dir, ignore_errors=True)
            self.repo_dir = None
