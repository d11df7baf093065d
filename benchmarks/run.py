"""The benchmark of issue 4: `make bench`, or `.venv/bin/python -m benchmarks.run [--quick] [--out DIR]`.

Prints a line per step with the elapsed time, then the figures and the bars; writes `results.json`,
`results.png` and `table.txt` into the output folder (default `benchmarks/results/`).
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

if __package__ in (None, ""):  # run as a script: make the `benchmarks` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bars  # noqa: E402
from benchmarks.scenarios import ROOT, Bench, make_plan  # noqa: E402
from benchmarks.tools import ToolsError, ensure_tools  # noqa: E402


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


def figures_table(results: dict[str, Any]) -> str:
    """Every measured point, one row each."""
    rows: list[tuple[str, ...]] = []
    for c in results["ceiling"]["grid"]:
        rows.append(
            (f"in-process {c['sessions']}s x {c['threads']}t batch {c['batch']}", f"{c['img_s']:.0f}", "", "", "")
        )
    single = results["ceiling"]["single"]
    if single:
        rows.append(
            (
                "in-process 1 session, batch 1, sequential",
                f"{single['img_s']:.0f}",
                f"{single['p50_ms']:.2f}",
                f"{single['p99_ms']:.2f}",
                f"{single['cpu_ms_per_img']:.2f}",
            )
        )
    groups = [(f"{b} {proto}", pts) for b, d in results["served"].items() for proto, pts in d.items()]
    groups += [(f"tiny {b}", pts) for b, pts in results["tiny"].items()]
    if results["scaling"]["1x1"]:
        groups.append(("mobilenetv2 1x1", [results["scaling"]["1x1"]]))
    for label, points in groups:
        for p in points:
            flag = "" if p["stable"] else " *"
            rows.append(
                (
                    f"{label} c={p['concurrency']}{flag}",
                    f"{p['infer_s']:.0f}",
                    f"{p['p50_ms']:.2f}",
                    f"{p['p99_ms']:.2f}",
                    f"{p['worker_cpu_ms_per_img']:.2f}",
                )
            )
    client = results["client"]
    for label, r in (
        ("client runner 8 threads", client["runner"]),
        ("client runner 8 threads, MSLITE_TRITON_SHM=0", client["runner_plain"]),
        ("client raw tritonclient 8 threads", client["raw"]),
        ("client runner batch 8, plain", client["batch8"]["plain"]),
        ("client runner batch 8, shm", client["batch8"]["shm"]),
    ):
        if r:
            cpu = r["client_cpu_ms_per_req"] / r["batch"]
            rows.append((label, f"{r['img_s']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{cpu:.2f} (client)"))
    return bars.format_table(("measurement", "img/s", "p50 ms", "p99 ms", "CPU ms/img"), rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="mslite-triton benchmark (issue 4)")
    p.add_argument("--quick", action="store_true", help="short windows and fewer concurrency levels (~2 min)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="output folder")
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
    plan = make_plan(args.quick)
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
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    text = _report(results, computed)
    (args.out / "table.txt").write_text(text + "\n")
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
    if plot.returncode != 0:
        print(f"plot failed: {plot.stderr[-800:]}")
    print(
        f"wrote {args.out / 'results.json'}, {args.out / 'results.png'}, {args.out / 'table.txt'} "
        f"({progress.elapsed_s:.0f} s in all)"
    )
    return 1 if results["errors"] else 0


def _report(results: dict[str, Any], computed: list[bars.Bar]) -> str:
    meta = results["meta"]
    head = (
        f"mslite-triton benchmark, {meta['started']}, {meta['cores']} cores, "
        f"{meta['workers']} workers x {meta['threads']} thread, {'quick' if meta['quick'] else 'full'} run, "
        f"perf_analyzer -p {meta['perf']['interval_ms']} ms, up to {meta['perf']['max_trials']} windows, "
        f"stability {meta['perf']['stability_pct']} %"
    )
    parts = [
        head,
        "",
        figures_table(results),
        "(* = windows never agreed within the stability bound)",
        "",
        bars.bars_table(computed),
        "",
        "for comparison (same run):",
    ]
    parts += [f"  {name}: {value}" for name, value in bars.context_rows(results)]
    if results["errors"]:
        parts += ["", "FAILED STEPS:"] + [f"  {e['step']}: {e['error']}" for e in results["errors"]]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
