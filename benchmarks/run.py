"""The serving benchmark: `make bench`, or `.venv/bin/python -m benchmarks.run [--quick] [--out DIR]
[--peer-backends DIR] [--compare-only] [--max-queue-size N]`.

Prints a line per step with the elapsed time, then the figures and the bars; writes `results.json`,
`results.png` and `table.txt` into the output folder (default `benchmarks/results/`). The bars compare our
backend with the naive python backend and, given `--peer-backends`, Triton's C++ ONNX Runtime backend
(a built `onnxruntime/` backend folder, or a backends directory holding one, such as a Triton container's
`/opt/tritonserver/backends`), all in one server with the same instances and threads, alternated.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from benchmarks import bars, paired  # noqa: E402
from benchmarks.scenarios import ROOT, Bench, make_plan  # noqa: E402
from benchmarks.serving import find_peer_backend, peer_ort_version  # noqa: E402
from tests.support.tools import ToolsError, ensure_tools  # noqa: E402


class Progress:
    """One line when a step starts and one when it ends, each with the time since the run began."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.total = 0
        self.out = out
        self.t0 = time.monotonic()
        self.index = 0

    def note(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.t0:7.1f}s] {text}\n")
        self.out.flush()

    def run(self, label: str, fn: Any) -> str | None:
        """Run one step; returns None, or the error that failed it (reported, and the run goes on)."""
        self.index += 1
        tag = f"({self.index}/{self.total})"
        self.note(f"{tag} {label} ...")
        started = time.monotonic()
        try:
            summary = fn()
        except Exception as e:  # one failed step must not lose the others' figures
            error = f"{type(e).__name__}: {e}"
            self.note(f"{tag} FAILED after {time.monotonic() - started:.1f}s: {error}")
            return error
        self.note(f"{tag} done in {time.monotonic() - started:.1f}s: {summary}")
        return None

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0


def _row(label: str, img_s: float | None, p50: float | None, p99: float | None, cpu: str) -> tuple[str, ...]:
    def show(v: float | None, fmt: str) -> str:
        return "-" if v is None else fmt % v

    return (label, show(img_s, "%.0f"), show(p50, "%.2f"), show(p99, "%.2f"), cpu)


def figures_table(results: dict[str, Any]) -> str:
    """Every measured point, one row each; for measurements repeated in rounds, the median of the rounds."""
    rows: list[tuple[str, ...]] = []
    for c in results["ceiling"]["grid"]:
        label = f"in-process {c['sessions']}s x {c['threads']}t batch {c['batch']}"
        rows.append(_row(label, c["img_s"], None, None, f"{c['cpu_ms_per_img']:.2f}"))
    single = results["ceiling"]["single"]
    if single:
        cpu = f"{single['cpu_ms_per_img']:.2f}"
        rows.append(
            _row("in-process 1 session, batch 1, sequential", single["img_s"], single["p50_ms"], single["p99_ms"], cpu)
        )
    groups = [(f"sweep {b} {proto}", pts) for b, d in results["served"].items() for proto, pts in d.items()]
    for label, points in groups:
        for p in points:
            flag = "" if p["stable"] else " *"
            cpu = f"{p['worker_cpu_ms_per_img']:.2f}"
            rows.append(_row(f"{label} c={p['concurrency']}{flag}", p["infer_s"], p["p50_ms"], p["p99_ms"], cpu))
    for model, store in (("MobileNetV2", "compare_mobilenet"), ("tiny", "compare_tiny")):
        rounds = results["rounds"][store]
        keys = sorted({k for one in rounds for k in one if "_c" in k}, key=lambda k: (int(k.rsplit("_c", 1)[1]), k))
        for key in keys:
            unstable = sum(1 for one in rounds if isinstance(one.get(key), dict) and one[key].get("stable") is False)
            flag = f", {unstable} unstable" if unstable else ""
            img_s, p50, p99, worker = _medians(rounds, key, ("infer_s", "p50_ms", "p99_ms", "worker_cpu_ms_per_img"))
            cpu = "-" if worker is None or key.startswith("cpp_") else f"{worker:.2f}"
            label = f"{model} {key.replace('_c', ' c=')} (median of {len(rounds)}{flag})"
            rows.append(_row(label, img_s, p50, p99, cpu))
    return bars.format_table(("measurement", "img/s", "p50 ms", "p99 ms", "CPU ms/img"), rows)


def _medians(rounds: list[dict[str, Any]], key: str, names: tuple[str, ...]) -> list[float | None]:
    return [paired.median([paired.value(one, key, n) for one in rounds]) for n in names]


def rounds_table(results: dict[str, Any]) -> str:
    """One row per MobileNetV2 round: the figures the bars are made of."""
    cols = (
        ("ceiling img/s", "ceiling", "img_s", "%.0f"),
        ("in-proc CPU/img", "ceiling", "cpu_ms_per_img", "%.2f"),
        ("single p50", "single", "p50_ms", "%.2f"),
        ("gRPC img/s", "grpc", "infer_s", "%.0f"),
        ("worker CPU/img", "grpc", "worker_cpu_ms_per_img", "%.2f"),
        ("shm img/s", "shm", "infer_s", "%.0f"),
        ("c=1 p50", "c1", "p50_ms", "%.2f"),
        ("naive gRPC img/s", "naive_grpc", "infer_s", "%.0f"),
        ("naive c=1 p50", "naive_c1", "p50_ms", "%.2f"),
    )
    rows = []
    for one in results["rounds"]["mobilenet"]:
        cells = []
        for _, key, name, fmt in cols:
            v = paired.value(one, key, name)
            cells.append("-" if v is None else fmt % v)
        rows.append((str(one["round"]), *cells))
    return bars.format_table(("round", *(c[0] for c in cols)), rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="mslite-triton serving benchmark")
    p.add_argument(
        "--quick", action="store_true", help="short windows and fewer concurrency levels (about 2.5 min on 2 cores)"
    )
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="output folder")
    p.add_argument(
        "--peer-backends",
        type=Path,
        metavar="DIR",
        help="Triton's C++ ONNX Runtime backend to compare with: its built folder, or a backends directory "
        "holding onnxruntime/ (in a Triton container: /opt/tritonserver/backends)",
    )
    p.add_argument("--compare-only", action="store_true", help="only the backend comparison (the bars)")
    p.add_argument(
        "--rounds", type=int, metavar="N", help="alternated rounds of the backend comparison (default 5; quick: 1)"
    )
    p.add_argument(
        "--max-queue-size",
        type=int,
        default=0,
        metavar="N",
        help="serve our models with an opt-in queue bound of N requests, to see what it costs (default: none)",
    )
    args = p.parse_args(argv)
    started = datetime.now(timezone.utc)
    progress = Progress()
    progress.note("tools venv: perf_analyzer (tritonclient 2.40.0), libcudart, libb64, matplotlib ...")
    try:
        tools = ensure_tools(ROOT, note=lambda s: progress.note(f"  {s}"))
    except ToolsError as e:
        progress.note(f"FAILED: {e}")
        return 2
    progress.note(f"perf_analyzer ready: {tools.perf_analyzer} ({tools.version})")
    if args.peer_backends is None:
        progress.note("C++ ONNX Runtime backend skipped: no --peer-backends DIR (bars against it report SKIPPED)")
    else:
        try:
            peer = find_peer_backend(args.peer_backends)
        except FileNotFoundError as e:
            progress.note(f"FAILED: --peer-backends: {e}")
            return 2
        progress.note(f"C++ ONNX Runtime backend: {peer} (ONNX Runtime {peer_ort_version(peer)})")
    plan = make_plan(
        args.quick,
        max_queue_size=args.max_queue_size,
        peer=args.peer_backends,
        compare_only=args.compare_only,
        compare_rounds=args.rounds,
    )
    bench = Bench(plan, tools)
    steps = bench.steps()
    progress.total = len(steps)
    progress.note(
        f"{len(steps)} steps; {plan.cores} cores, auto rule -> {plan.workers} workers x {plan.threads} thread"
    )
    try:
        for label, fn in steps:
            error = progress.run(label, fn)
            if error is not None:
                bench.results["errors"].append({"step": label, "error": error})
    finally:
        bench.close()
    results = bench.results
    results["meta"].update(started=started.isoformat(timespec="seconds"), duration_s=round(progress.elapsed_s, 1))
    computed = bars.compute(results)
    results["bars"] = [b.as_dict() for b in computed]
    info = [b for b in bars.information(results) if b.measured is not None]
    results["information"] = [b.as_dict() for b in info]
    # one ceiling for the plot and the ratios: the median of the rounds' (a lone grid cell can be an outlier)
    results["ceiling"]["reference"] = paired.median(
        [paired.value(one, "ceiling", "img_s") for one in results["rounds"]["mobilenet"]]
    ) or (results["ceiling"]["best"] or {}).get("img_s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    text = _report(results, computed, info)
    (args.out / "table.txt").write_text(text + "\n")
    plot = None
    if results["served"]["mslite"]["grpc"] and results["ceiling"]["reference"]:
        plot = subprocess.run(
            [
                str(bench.tools.python),
                str(ROOT / "benchmarks" / "plot.py"),
                str(args.out / "results.json"),
                str(args.out / "results.png"),
            ],
            capture_output=True,
            text=True,
        )
    print()
    print(text)
    print()
    if plot is not None and plot.returncode != 0:
        print(f"plot failed: {plot.stderr[-800:]}")
    png = f", {args.out / 'results.png'}" if plot is not None and plot.returncode == 0 else " (no sweep: no plot)"
    print(f"wrote {args.out / 'results.json'}{png}, {args.out / 'table.txt'} ({progress.elapsed_s:.0f} s in all)")
    if results["errors"]:
        return 1
    status = bars.exit_status(computed)
    if status:
        missed = [b.name for b in computed if b.verdict in (bars.SHORT, bars.MISSING)]
        print(f"{len(missed)} bar(s) fell short or are missing: exit status {status}")
    return status


def _report(results: dict[str, Any], computed: list[bars.Bar], info: list[bars.Bar]) -> str:
    meta = results["meta"]
    queue = f"opt-in queue bound {meta['max_queue_size']}" if meta.get("max_queue_size") else "no queue bound"
    head = (
        f"mslite-triton benchmark, {meta['started']}, {meta['cores']} cores, "
        f"{meta['workers']} workers x {meta['threads']} thread, {'quick' if meta['quick'] else 'full'} run"
        f"{' (comparison only)' if meta.get('compare_only') else ''}, {queue}, "
        f"perf_analyzer -p {meta['perf']['interval_ms']} ms, up to {meta['perf']['max_trials']} windows, "
        f"stability {meta['perf']['stability_pct']} %"
    )
    parts = [
        head,
        "",
        figures_table(results),
        "(* = windows never agreed within the stability bound; rounds alternate, every other one reversed)",
        "",
        f"bars (medians of {meta['compare_rounds']} alternated round(s), each round's value in parentheses):",
        bars.bars_table(computed),
        bars.LEGEND,
        "",
        "the C++ ONNX Runtime backend (information):",
    ]
    parts += [f"  {name}: {value}" for name, value in bars.peer_rows(results)]
    if results["rounds"]["mobilenet"]:
        parts += [
            "",
            "MobileNetV2 in-process rounds (levels from the sweep; ms unless noted):",
            rounds_table(results),
            "",
            "information, not bars: ratios to the in-process ceiling (each round's own in-process figure; the plot's "
            "dotted line is their median). Serving costs CPU the in-process run does not "
            "pay, so a served figure is expected below the ceiling; one above it means that round's in-process "
            "measurement ran slow (a busy machine), not that serving is free:",
            bars.bars_table(info),
        ]
        parts += [f"  {name}: {value}" for name, value in bars.context_rows(results)]
    if results["errors"]:
        parts += ["", "FAILED STEPS:"] + [f"  {e['step']}: {e['error']}" for e in results["errors"]]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
