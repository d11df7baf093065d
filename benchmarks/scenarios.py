"""The benchmark's plan (sizes for a full or quick run) and its steps, in the order they run.

Each step is a label and a function that stores its figures in `Bench.results` and returns a one-line
summary for the progress display.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mslite_triton._model_config import local_cores, plan_workers
from tests.support.processes import model_worker_pids
from tests.support.tools import Tools

from . import inprocess, paired
from .perf import PerfSettings, measure
from .serving import BenchServer, ModelSpec, compose_repository, find_peer_backend, peer_ort_version

ROOT = Path(__file__).resolve().parent.parent
MOBILENET = "mobilenetv2"
MODEL_PATH = str(ROOT / "model_repository" / MOBILENET / "1" / "model.onnx")


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
    compare_levels: tuple[int, ...] = (1, 8, 16)  # MobileNetV2: ours vs naive vs the C++ peer
    rounds: int = 3  # paired rounds of the in-process comparison (paired.py)
    compare_rounds: int = 5  # alternated rounds of the backend comparison (the bars)
    max_queue_size: int = 0  # ours: an opt-in queue bound (`--max-queue-size`), to see what it costs
    peer: str | None = None  # the C++ ONNX Runtime backend's folder (`--peer-backends`); None: skipped
    compare_only: bool = False  # only the backend comparison (`--compare-only`)
    ceiling_s: float = 3.0
    single_s: float = 3.0


def make_plan(
    quick: bool,
    *,
    max_queue_size: int = 0,
    peer: Path | None = None,
    compare_only: bool = False,
    compare_rounds: int | None = None,
) -> Plan:
    """The full run, or a short one: the levels the bars need, 1 s windows, one round (unless `compare_rounds`)."""
    extra: dict[str, Any] = {"max_queue_size": max_queue_size, "peer": str(peer) if peer else None}
    extra["compare_only"] = compare_only
    if compare_rounds is not None:
        extra["compare_rounds"] = compare_rounds
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
            rounds=1,
            ceiling_s=1.0,
            single_s=1.5,
            **{"compare_rounds": 1, **extra},
        )
    return Plan(
        quick,
        cores,
        auto.workers,
        auto.thread_num,
        PerfSettings(interval_ms=3000, max_trials=6, stability_pct=20),
        served_levels=(1, 2, 4, 8, 16),
        shm_levels=(1, 2, 4, 8, 16),
        **extra,
    )


def model_specs(plan: Plan) -> list[ModelSpec]:
    """Every model the run serves; ours, the naive baseline and the C++ peer get the same workers and threads."""
    w, t, q = plan.workers, plan.threads, plan.max_queue_size
    specs = [
        ModelSpec(MOBILENET, MOBILENET, "mslite", w, t, q),
        ModelSpec(f"{MOBILENET}_naive", MOBILENET, "naive", w, t),
        ModelSpec("tiny", "tiny", "mslite", w, t, q),
        ModelSpec("tiny_naive", "tiny", "naive", w, t),
        ModelSpec("tiny_1x1", "tiny", "mslite", 1, 1, q),
    ]
    if plan.peer:
        specs += [
            ModelSpec(f"{MOBILENET}_cpp", MOBILENET, "onnxruntime", w, t),
            ModelSpec("tiny_cpp", "tiny", "onnxruntime", w, t),
        ]
    return specs


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
        import onnxruntime

        peer = find_peer_backend(Path(self.plan.peer)) if self.plan.peer else None
        self.peer_backend = peer
        self.results.update(
            meta={
                **asdict(self.plan),
                "ort_version": {"mslite": onnxruntime.__version__, "cpp": peer_ort_version(peer) if peer else None},
                "perf_analyzer": self.tools.version,
                "models": [asdict(s) for s in model_specs(self.plan)],
            },
            ceiling={"grid": [], "best": None, "single": None},
            served={b: {"grpc": [], "shm": []} for b in ("mslite", "naive")},
            rounds={"mobilenet": [], "compare_mobilenet": [], "compare_tiny": []},
            errors=[],
        )

    # -- steps -----------------------------------------------------------------------------------
    def steps(self) -> list[Step]:
        p = self.plan
        naive = f"{MOBILENET}_naive"
        steps: list[Step] = []
        if not p.compare_only:
            steps += [
                (f"in-process ceiling: {s} session(s) x {t} thread(s), batch 1 and 8", self._grid(s, t))
                for s in sorted({1, p.cores})
                for t in sorted({1, p.cores})
            ]
            steps.append((f"in-process single session, {p.threads} thread(s), batch 1", self._single))
        backends = "mslite + naive" + (" + C++ onnxruntime" if p.peer else "")
        steps.append((f"start tritonserver (composed repository, {backends} backends)", self._start))
        if not p.compare_only:
            for backend, name in (("mslite", MOBILENET), ("naive", naive)):
                steps.append((f"load only {name} ({p.workers} workers x {p.threads} thread)", self._load(name)))
                served = self.results["served"][backend]
                steps += [
                    (f"sweep: {name} gRPC c={c}", self._perf(name, c, False, served["grpc"].append))
                    for c in p.served_levels
                ]
                steps += [
                    (f"sweep: {name} shm c={c}", self._perf(name, c, True, served["shm"].append)) for c in p.shm_levels
                ]
            steps.append((f"load {MOBILENET} and {naive} together, for the rounds", self._load(MOBILENET, naive)))
            for r in range(p.rounds):
                steps.append((f"round {r + 1}/{p.rounds}: in-process vs served {MOBILENET}", self._mobilenet_round(r)))
        mobilenets = self._contenders(MOBILENET)
        steps.append((f"load {', '.join(mobilenets.values())} together", self._load(*mobilenets.values())))
        n = p.compare_rounds
        for r in range(n):
            label = f"round {r + 1}/{n}: {MOBILENET} {' vs '.join(mobilenets)}, c={p.compare_levels}"
            steps.append((label, self._compare_round("compare_mobilenet", mobilenets, p.compare_levels, r)))
        tinies = self._contenders("tiny")
        steps.append(
            (f"load {', '.join(tinies.values())} and tiny_1x1 together", self._load(*tinies.values(), "tiny_1x1"))
        )
        for r in range(n):
            label = f"round {r + 1}/{n}: tiny {' vs '.join(tinies)}, c={p.tiny_levels}; tiny_1x1 c=1"
            steps.append((label, self._compare_round("compare_tiny", tinies, p.tiny_levels, r, one_worker="tiny_1x1")))
        return steps

    def _contenders(self, model: str) -> dict[str, str]:
        """Contender key -> served model name: ours, the naive baseline, and the C++ peer when given."""
        named = {"mslite": model, "naive": f"{model}_naive"}
        if self.plan.peer:
            named["cpp"] = f"{model}_cpp"
        return named

    def _compare_round(
        self, store: str, contenders: dict[str, str], levels: tuple[int, ...], index: int, one_worker: str = ""
    ) -> Callable[[], str]:
        """Every contender at every level, one after the other (reversed every other round); `one_worker` at c=1."""

        def run() -> str:
            items: list[tuple[str, paired.Measure]] = [
                (f"{key}_c{c}", functools.partial(self._point, name, c, False))
                for c in levels
                for key, name in contenders.items()
            ]
            if one_worker:
                items.append(("one_worker_c1", functools.partial(self._point, one_worker, 1, False)))
            one = paired.run_round(items, index)
            self.results["rounds"][store].append(one)
            shown = [f"{k} {paired.value(one, k, 'infer_s') or 0:.0f}" for k, _ in items]
            return "infer/s: " + ", ".join(shown) + _failed(one)

        return run

    def _grid(self, sessions: int, threads: int) -> Callable[[], str]:
        def run() -> str:
            cells = [self._cell(sessions, threads, b) for b in (1, 8)]
            self.results["ceiling"]["grid"] += cells
            self.results["ceiling"]["best"] = max(self.results["ceiling"]["grid"], key=lambda c: c["img_s"])
            return ", ".join(f"batch {c['batch']}: {c['img_s']:.0f} img/s" for c in cells)

        return run

    def _single(self) -> str:
        s = inprocess.single_session(MODEL_PATH, self.plan.threads, self.plan.single_s)
        self.results["ceiling"]["single"] = s.as_dict()
        return f"p50 {s.p50_ms:.2f} ms, p99 {s.p99_ms:.2f} ms, {s.img_s:.0f} img/s, CPU {s.cpu_ms_per_img:.2f} ms/img"

    def _start(self) -> str:
        self.repo_dir = Path(tempfile.mkdtemp(prefix="bench-repo-"))
        compose_repository(self.repo_dir, ROOT / "model_repository", model_specs(self.plan))
        self.server = BenchServer(self.repo_dir, self.peer_backend).start()
        self.results["meta"]["server_config"] = self.server.lifted
        lifted = ", ".join(f"{k}={v}" for k, v in self.server.lifted.items()) or "defaults"
        return f"gRPC on {self.server.grpc_address}, pid {self.server.pid}, ServerConfig: {lifted}"

    def _load(self, *names: str) -> Callable[[], str]:
        """Make `names` the loaded models (CPU is accounted per model, so idle neighbours do not count)."""

        def run() -> str:
            assert self.server is not None
            self.server.only(*names)
            found = []
            for name in names:
                spec = next(s for s in model_specs(self.plan) if s.name == name)
                want = 0 if spec.backend == "onnxruntime" else spec.workers  # the C++ backend runs in-process
                pids = model_worker_pids(self.server.pid, name)
                if len(pids) != want:
                    raise RuntimeError(f"{name}: expected {want} worker processes, found {len(pids)}")
                batcher = self.server.batcher(name)
                self.results["meta"].setdefault("batchers", {})[name] = batcher
                bound = batcher.get("default_queue_policy", {}).get("max_queue_size")
                found.append(f"{name}: {pids}, queue bound {bound}")
            return "worker processes " + ", ".join(found)

        return run

    def _point(self, name: str, concurrency: int, shm: bool) -> dict[str, Any]:
        assert self.server is not None
        return measure(self.tools, self.server, name, concurrency, shm=shm, settings=self.plan.perf).as_dict()

    def _perf(
        self, name: str, concurrency: int, shm: bool, store: Callable[[dict[str, Any]], None]
    ) -> Callable[[], str]:
        def run() -> str:
            pt = self._point(name, concurrency, shm)
            store(pt)
            return (
                f"{pt['infer_s']:.0f} infer/s, p50 {pt['p50_ms']:.2f} ms, p99 {pt['p99_ms']:.2f} ms, "
                f"batch {pt['avg_batch']:.2f}, CPU/img worker {pt['worker_cpu_ms_per_img']:.2f} "
                f"server {pt['server_cpu_ms_per_img']:.2f} perf_analyzer {pt['client_cpu_ms_per_img']:.2f} ms"
                + ("" if pt["stable"] else " (UNSTABLE windows)")
            )

        return run

    # -- paired rounds (paired.py says why) --------------------------------------------------------
    def _best_level(self, backend: str, proto: str) -> int:
        """The concurrency among 4/8/16 with the most throughput in the sweep (8 when the sweep has none)."""
        points = [q for q in self.results["served"][backend][proto] if q["concurrency"] in (4, 8, 16)]
        return max(points, key=lambda q: q["infer_s"])["concurrency"] if points else 8

    def _mobilenet_round(self, index: int) -> Callable[[], str]:
        """In-process ceiling cell and single session, then ours over gRPC (best level and c=8), shm, c=1, and naive."""

        def run() -> str:
            p, best = self.plan, self.results["ceiling"]["best"]
            layout = (p.workers, p.threads, 1)  # the served workers' sessions x threads, batch 1
            cell = (best["sessions"], best["threads"], best["batch"]) if best else layout
            lg, ls = self._best_level("mslite", "grpc"), self._best_level("mslite", "shm")
            ln = self._best_level("naive", "grpc")
            naive = f"{MOBILENET}_naive"
            items: list[tuple[str, paired.Measure]] = [
                ("ceiling", functools.partial(self._cell, *cell)),
                ("single", lambda: inprocess.single_session(MODEL_PATH, p.threads, p.single_s).as_dict()),
                ("grpc", functools.partial(self._point, MOBILENET, lg, False)),
                ("shm", functools.partial(self._point, MOBILENET, ls, True)),
                ("c1", functools.partial(self._point, MOBILENET, 1, False)),
                ("naive_grpc", functools.partial(self._point, naive, ln, False)),
                ("naive_c1", functools.partial(self._point, naive, 1, False)),
            ]
            if cell != layout:  # in-process CPU per image is taken with the served workers' layout
                items.insert(1, ("layout", functools.partial(self._cell, *layout)))
            if lg != 8:  # worker efficiency is measured at c=8
                items.append(("grpc_c8", functools.partial(self._point, MOBILENET, 8, False)))
            one = paired.run_round(items, index)
            self.results["rounds"]["mobilenet"].append(one)
            ceiling = paired.value(one, "ceiling", "img_s")
            parts = [f"ceiling {ceiling:.0f} img/s" if ceiling else "ceiling -"]
            for key, label in (("grpc", f"gRPC c={lg}"), ("shm", f"shm c={ls}"), ("naive_grpc", f"naive c={ln}")):
                v = paired.value(one, key, "infer_s")
                parts.append(f"{label} {v:.0f}" if v else f"{label} -")
            return ", ".join(parts) + _failed(one)

        return run

    def _cell(self, sessions: int, threads: int, batch: int) -> dict[str, Any]:
        return inprocess.grid_cell(MODEL_PATH, sessions, threads, batch, self.plan.ceiling_s, self.plan.cores).as_dict()

    def close(self) -> None:
        """Stop the server and remove the composed repository (safe to call twice)."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.repo_dir is not None:
            import shutil

            shutil.rmtree(self.repo_dir, ignore_errors=True)
            self.repo_dir = None


def _failed(one: paired.Round) -> str:
    errs = paired.errors(one)
    return f"; FAILED {'; '.join(errs)}" if errs else ""
