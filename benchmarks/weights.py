"""The shared-weights benchmark: `make bench-weights`, or `.venv/bin/python -m benchmarks.weights [--mb 200] [--quick]`.

One tritonserver (`LocalServer`), models uploaded through the library (`ModelParallelRunner`), one at a time where
memory is measured. Prints each step, then the figures and the bars; writes `weights.json` into `--out`
(default `benchmarks/results/`).

1. Sharing: `big_weights(mb)` saved with external data, a 1-worker and a 4-worker deployment (shared, the
   default) loaded side by side: the total PSS of the 4 worker processes (`/proc/<pid>/smaps_rollup`)
   over the PSS of the single worker. For reference, 4 workers with `[weights] share=false` (each its own
   prepacked copy), loaded alone.
2. Latency: batch 32, 1 worker x 1 thread, shared vs unshared (and, for the cost of updatable weights,
   every weight declared updatable), requests alternating between the models from one thread; medians.
3. Live update under load: 4 workers with every initializer declared updatable; 8 client threads call
   `predict` in a loop; `update_weights` sends every weight x 0.5; the time from the call until every
   worker's `mslite_weights_version` gauge shows the new version; failed requests; responses that are
   neither the old nor the new output (a mix); responses started after the call returned that are old.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
import mslite_triton as mslite  # noqa: E402
from mslite_server import LocalServer, ServerConfig  # noqa: E402
from tests.support import model_zoo  # noqa: E402
from tests.support.processes import worker_pids  # noqa: E402

BARS = {"pss_ratio": 1.5, "latency_ratio": 1.10, "update_s": 1.0}
T0 = time.monotonic()


def note(text: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {text}", flush=True)


def pss_mib(pid: int) -> dict[str, float]:
    """Pss and its parts, in MiB, from /proc/<pid>/smaps_rollup."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] in ("Pss:", "Pss_Anon:", "Pss_File:", "Pss_Shmem:", "Rss:"):
            out[parts[0][:-1]] = int(parts[1]) / 1024
    return out


def versions(server: LocalServer, model: str) -> dict[str, int]:
    """Each worker's `mslite_weights_version` gauge, by instance."""
    text = urllib.request.urlopen(server.metrics_url, timeout=5).read().decode()
    pattern = re.compile(
        r'^mslite_weights_version\{instance="([^"]+)",model="' + re.escape(model) + r'",pid="\d+"\} (\S+)$'
    )
    return {m.group(1): int(float(m.group(2))) for m in map(pattern.match, text.splitlines()) if m}


class Bench:
    """The server, the model file, and helpers to build, drive and unload models."""

    def __init__(self, mb: int, workdir: Path) -> None:
        self.workdir = workdir
        self.model_path = workdir / "big.onnx"
        model = model_zoo.big_weights(mb)
        model_zoo.save_with_external_data(model, self.model_path)
        self.weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        (workdir / "names.txt").write_text("\n".join(self.weights) + "\n")
        (workdir / "repo").mkdir()
        wanted = {"model_repository": workdir / "repo", "load_models": (), "supervise": False}
        known = {f.name for f in dataclasses.fields(ServerConfig)}
        self.server = LocalServer(ServerConfig(**{k: v for k, v in wanted.items() if k in known}))
        self.x1 = np.random.default_rng(1).standard_normal((1, model_zoo.BIG_DIM), dtype=np.float32)
        self.x32 = np.random.default_rng(2).standard_normal((32, model_zoo.BIG_DIM), dtype=np.float32)

    def build(self, workers: int, **sections: dict[str, str]) -> mslite.ModelParallelRunner:
        ctx = mslite.Context()
        ctx.server_url = self.server.grpc_url
        ctx.cpu.thread_num = 1
        ctx.parallel.workers_num = workers
        ctx.parallel.config_info = dict(sections)
        runner = mslite.ModelParallelRunner()
        runner.build_from_file(str(self.model_path), ctx)
        return runner

    def unload(self, runner: mslite.ModelParallelRunner) -> None:
        name = runner._remote.info.name
        runner._remote.transport.unload_model(name)
        deadline = time.monotonic() + 60
        while worker_pids(self.server, name) and time.monotonic() < deadline:
            time.sleep(0.2)

    def memory(self, runner: mslite.ModelParallelRunner) -> list[dict[str, float]]:
        for _ in range(4):  # every worker has run batch 32 at least once, most likely
            runner.predict([mslite.Tensor(self.x32)])
        return [pss_mib(p) for p in worker_pids(self.server, runner._remote.info.name)]


def sharing(b: Bench, results: dict[str, Any]) -> None:
    # The 1-worker and the 4-worker deployments are loaded together (separate uploads: separate weight
    # files), so the shared libraries' pages are split the same way in both measurements.
    one, four = b.build(1), b.build(4)
    for label, runner in (("shared_1", one), ("shared_4", four)):
        rows = b.memory(runner)
        results[label] = {"workers": rows, "pss_total_mib": sum(r["Pss"] for r in rows)}
    b.unload(one)
    b.unload(four)
    unshared = b.build(4, weights={"share": "false"})
    rows = b.memory(unshared)
    results["unshared_4"] = {"workers": rows, "pss_total_mib": sum(r["Pss"] for r in rows)}
    b.unload(unshared)
    for label in ("shared_1", "shared_4", "unshared_4"):
        per_worker = [round(r["Pss"]) for r in results[label]["workers"]]
        note(f"{label}: PSS total {results[label]['pss_total_mib']:.0f} MiB, per worker {per_worker}")
    results["pss_ratio"] = results["shared_4"]["pss_total_mib"] / results["shared_1"]["pss_total_mib"]


def latency(b: Bench, results: dict[str, Any], rounds: int) -> None:
    runners = {
        "shared": b.build(1),
        "unshared": b.build(1, weights={"share": "false"}),
        # the cost of updatable weights: every weight is a per-run input, neither prepacked nor folded
        "updatable": b.build(1, weights={"updatable_file": str(b.workdir / "names.txt")}),
    }
    times: dict[str, list[float]] = {label: [] for label in runners}
    x = [mslite.Tensor(b.x32)]
    for runner in runners.values():
        for _ in range(3):
            runner.predict(x)
    for _ in range(rounds):
        for label, runner in runners.items():
            t = time.perf_counter()
            runner.predict(x)
            times[label].append((time.perf_counter() - t) * 1000)
    for label in times:
        results[f"bs32_{label}_ms"] = statistics.median(times[label])
    results["latency_ratio"] = results["bs32_shared_ms"] / results["bs32_unshared_ms"]
    note(
        "bs32 median: "
        + ", ".join(f"{label} {results[f'bs32_{label}_ms']:.1f} ms" for label in runners)
        + " (updatable: every weight declared)"
    )
    for runner in runners.values():
        b.unload(runner)


def update_under_load(b: Bench, results: dict[str, Any], threads: int = 8) -> None:
    runner = b.build(4, ascend_context={"variable_weights_file": f'"{b.workdir / "names.txt"}"'})
    name = runner._remote.info.name
    old = runner.predict([mslite.Tensor(b.x1)])[0].get_data_to_numpy()
    new = old * np.float32(0.5 ** sum(1 for n in b.weights if n.startswith("w")))
    tensors = []
    for key, value in b.weights.items():
        t = mslite.Tensor(np.ascontiguousarray(value * np.float32(0.5)))
        t.name = key
        tensors.append(t)

    def close(y: np.ndarray, ref: np.ndarray) -> bool:
        # relative to the output's scale: a mix of old and new layers is off by a power of two
        return bool(np.allclose(y, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max())))

    stop = threading.Event()
    records: list[tuple[float, float, str]] = []
    failures: list[str] = []

    def load() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                y = runner.predict([mslite.Tensor(b.x1)])[0].get_data_to_numpy()
            except Exception as e:  # counted: the bar is zero failed requests
                failures.append(f"{type(e).__name__}: {e}")
                continue
            kind = "old" if close(y, old) else "new" if close(y, new) else "mixed"
            records.append((started, time.monotonic(), kind))

    pool = [threading.Thread(target=load, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    time.sleep(2.0)
    t0 = time.monotonic()
    runner.update_weights([tensors])
    t_return = time.monotonic()
    t_all = None
    while time.monotonic() - t0 < 30:
        seen = versions(b.server, name)
        if len(seen) == 4 and all(v == 2 for v in seen.values()):
            t_all = time.monotonic()
            break
        time.sleep(0.005)
    time.sleep(1.0)
    stop.set()
    for t in pool:
        t.join(timeout=30)
    late_old = sum(1 for s, _, k in records if s > t_return and k == "old")
    results.update(
        update_call_s=t_return - t0,
        update_until_all_s=None if t_all is None else t_all - t0,
        update_requests=len(records),
        update_failed=len(failures),
        update_failures_sample=failures[:3],
        update_mixed=sum(1 for _, _, k in records if k == "mixed"),
        update_old_after_return=late_old,
        update_bytes=int(sum(v.nbytes for v in b.weights.values())),
        updatable_4=[pss_mib(p) for p in worker_pids(b.server, name)],
    )
    note(
        f"update: call {results['update_call_s']:.2f} s, every worker switched after "
        f"{results['update_until_all_s']} s, {len(records)} requests, {len(failures)} failed, "
        f"{results['update_mixed']} mixed, {late_old} old after the call returned"
    )
    b.unload(runner)


def table(results: dict[str, Any]) -> str:
    s1, s4, u4 = (results.get(k, {}).get("pss_total_mib", float("nan")) for k in ("shared_1", "shared_4", "unshared_4"))
    until = results.get("update_until_all_s")
    rows = [
        ("PSS, 1 worker (shared setup)", f"{s1:.0f} MiB", ""),
        ("PSS, 4 workers, total (shared)", f"{s4:.0f} MiB", ""),
        ("PSS, 4 workers, total (unshared)", f"{u4:.0f} MiB", f"{u4 / s1:.2f} x the 1-worker PSS"),
        (
            "bs32 latency shared / unshared",
            f"{results.get('bs32_shared_ms', float('nan')):.1f} / "
            f"{results.get('bs32_unshared_ms', float('nan')):.1f} ms",
            f"every weight updatable: {results.get('bs32_updatable_ms', float('nan')):.1f} ms",
        ),
        (
            "update call / until every worker switched",
            f"{results.get('update_call_s', float('nan')):.2f} / {until if until is None else round(until, 2)} s",
            f"{results.get('update_bytes', 0) / 2**20:.0f} MiB sent",
        ),
        (
            "requests during the update: total / failed / mixed / old after return",
            f"{results.get('update_requests')} / {results.get('update_failed')} / {results.get('update_mixed')} / "
            f"{results.get('update_old_after_return')}",
            "",
        ),
    ]
    bars = [
        ("PSS 4 workers / 1 worker", results.get("pss_ratio"), BARS["pss_ratio"]),
        ("bs32 latency shared / unshared", results.get("latency_ratio"), BARS["latency_ratio"]),
        ("update until every worker switched (s)", until, BARS["update_s"]),
    ]
    lines = [f"{a:<72} {b:<22} {c}" for a, b, c in rows]
    lines.append("")
    for label, value, bar in bars:
        verdict = "MISSING" if value is None else ("PASS" if value <= bar else "FALL SHORT")
        lines.append(f"{label:<72} {'-' if value is None else f'{value:.3f}':<10} <= {bar:<6} {verdict}")
    zero = results.get("update_failed") == 0 and results.get("update_mixed") == 0
    lines.append(
        f"{'failed or mixed requests during the update':<72} {'0' if zero else 'some':<10} == 0      "
        f"{'PASS' if zero else 'FALL SHORT'}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="weights of the model, MiB (default 200)")
    parser.add_argument("--quick", action="store_true", help="64 MiB and fewer latency rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    mb = 64 if args.quick else args.mb
    results: dict[str, Any] = {"mb": mb, "machine_cores": len(__import__("os").sched_getaffinity(0))}
    with tempfile.TemporaryDirectory(prefix="mslite-bench-weights-") as tmp:
        note(f"building big_weights({mb}) with external data")
        b = Bench(mb, Path(tmp))
        note("starting the server")
        b.server.start()
        try:
            for label, step in (
                ("sharing", lambda: sharing(b, results)),
                ("latency", lambda: latency(b, results, 10 if args.quick else 40)),
                ("update under load", lambda: update_under_load(b, results)),
            ):
                note(f"{label} ...")
                try:
                    step()
                except Exception as e:  # report and go on: the other steps' figures still count
                    results[f"{label}_error"] = f"{type(e).__name__}: {e}"
                    note(f"{label} FAILED: {results[f'{label}_error']}")
        finally:
            b.server.stop()
            b.server.remove_workspace()
    text = table(results)
    print("\n" + text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "weights.json").write_text(json.dumps(results, indent=2, default=str))
    (args.out / "weights.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
