"""Worker CPU per request: ours against the naive baseline, the figure a busy machine does not blur.

`python -m benchmarks.worker_cpu [--model tiny] [--levels 1,8] [--rounds 3] [--variants ours,naive]`
(`--profile-s S`: where the first variant's worker CPU goes at the first level instead, see `profile`)

Throughput ratios move by 10-30 % on a shared machine; the CPU time the worker processes spend per
request (utime + stime of the stubs from /proc around each perf_analyzer run, over the requests Triton
counted) moves much less, and it is what our per-request code costs. Every variant is the repository
model served 2 workers x 1 thread (`ours`: the config as shipped, auto-completed; `ours_all`: every queued
request per `execute`; `ours_nometrics`: no metrics publisher; `ours_pinned`: worker i pinned to core slice
i; `naive`: the naive baseline; `before`: the shipped config served by backend/mslite as it was at git
revision `--baseline`, to measure a change), all loaded at once, measured by perf_analyzer over gRPC in
alternation (the order reversed every other round). The last lines give each variant's median worker CPU
per request, tritonserver's, throughput, p50 and requests per `execute`, with the ratio to the first's.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.processes import model_worker_pids
from tests.support.tools import Tools, ensure_tools

from .perf import PerfSettings, measure, measure_composed, medians_by_level, variant_names
from .serving import BenchServer, ModelSpec, compose_repository, with_batcher

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {  # name -> what is appended to (or replaces the batcher of) the shipped config; None: as shipped
    "ours": None,
    "ours_all": ("batcher", "dynamic_batching { }\n"),
    "ours_nometrics": ("append", 'parameters { key: "metrics" value { string_value: "false" } }\n'),
    "ours_pinned": ("append", 'parameters { key: "thread_affinity_mode" value { string_value: "1" } }\n'),
}


BASELINE = "before"  # the variant served by the backend of `--baseline`
BASELINE_BACKEND = "mslite_before"


def compose(root: Path, names: list[str], source: str, workers: int) -> None:
    """One model directory per variant of the repository's `source` model (the naive baseline as `naive`)."""
    specs = [ModelSpec(n, source, "naive" if n == "naive" else "mslite", workers, 1) for n in names]
    compose_repository(root, ROOT / "model_repository", specs)
    for name in names:
        if name == BASELINE:
            path = root / name / "config.pbtxt"
            path.write_text(path.read_text().replace('backend: "mslite"', f'backend: "{BASELINE_BACKEND}"'))
            continue
        change = VARIANTS.get(name)
        if change is None:
            continue
        path = root / name / "config.pbtxt"
        how, text = change
        path.write_text(with_batcher(path.read_text(), text) if how == "batcher" else path.read_text() + text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default="ours,naive")
    p.add_argument("--model", default="tiny", help="a model of model_repository/")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--levels", default="1,8", help="perf_analyzer concurrencies")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--interval-ms", type=int, default=2000, help="perf_analyzer window")
    p.add_argument("--baseline", help=f"a git revision: adds the variant '{BASELINE}', its backend/mslite")
    p.add_argument("--profile-s", type=int, default=0, help="instead: profile the first variant at the first level")
    a = p.parse_args()
    names = variant_names(p, a.variants, {**VARIANTS, BASELINE: None} if a.baseline else VARIANTS)
    if a.baseline and BASELINE not in names:
        names.append(BASELINE)
    levels = [int(c) for c in a.levels.split(",")]
    tools = ensure_tools(ROOT)
    # any three windows will do: the CPU figure covers the whole run, not the windows perf_analyzer keeps
    settings = PerfSettings(interval_ms=a.interval_ms, max_trials=3, stability_pct=1000)
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        a.extra = extra = {BASELINE_BACKEND: backend_at(a.baseline, Path(tmp))} if a.baseline else {}
        if a.profile_s:
            return profile(tools, lambda root: compose(root, names[:1], a.model, a.workers), names[0], levels[0], a)
        found = measure_composed(
            tools,
            lambda root: compose(root, names, a.model, a.workers),
            names,
            levels,
            a.rounds,
            settings,
            lambda pt: (
                f"worker {pt.worker_cpu_ms_per_img * 1e3:.1f} us/req, "
                f"tritonserver {pt.server_cpu_ms_per_img * 1e3:.1f} us/req, {pt.infer_s:.0f} req/s, "
                f"p50 {pt.p50_ms:.2f} ms, {pt.avg_batch:.2f} requests per execute"
            ),
            extra_backends=extra,
        )
    for c, name, pts, ratio in medians_by_level(found, names, levels, "worker_cpu_ms_per_img"):
        print(
            f"c={c} {name}: worker {statistics.median(x.worker_cpu_ms_per_img for x in pts) * 1e3:.1f} us/req "
            f"({ratio:.3f} x {names[0]}), tritonserver "
            f"{statistics.median(x.server_cpu_ms_per_img for x in pts) * 1e3:.1f} us/req, "
            f"{statistics.median(x.infer_s for x in pts):.0f} req/s, p50 "
            f"{statistics.median(x.p50_ms for x in pts):.2f} ms, "
            f"{statistics.median(x.avg_batch for x in pts):.2f} requests per execute"
        )


def profile(tools: Tools, write: Callable[[Path], None], name: str, c: int, a: Any) -> None:
    """`name`'s workers under load for `a.profile_s` s: perf (software clock) by shared object, py-spy (on PATH,
    one worker) by function, where samples with no Python frame are the stub's own C++ code."""
    spy, secs = shutil.which("py-spy") or "", str(a.profile_s)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        write(Path(tmp))
        server = BenchServer(Path(tmp), extra_backends=a.extra).start()
        try:
            server.only(name)
            pids, load = model_worker_pids(server.pid, name), PerfSettings((a.profile_s + 6) * 1000 // 3, 3, 1000)
            (
                loading := threading.Thread(target=lambda: measure(tools, server, name, c, shm=False, settings=load))
            ).start()
            time.sleep(3)  # past perf_analyzer's start (its windows: 3 of the profile's length)
            perf = ["perf", "record", "-q", "-e", "cpu-clock", "-o", f"{tmp}/perf.data", "-p", ",".join(map(str, pids))]
            spying = [spy, "record", "--nonblocking", "-f", "raw", "-r", "250", "-d", secs, "-o", f"{tmp}/spy"]
            cmds = [[*perf, "sleep", secs]] + ([[*spying, "-p", str(pids[0])]] if spy else [])
            for proc in [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for cmd in cmds]:
                proc.wait(timeout=a.profile_s + 120)
            loading.join()
        finally:
            server.stop()
        report = ["perf", "report", "-i", f"{tmp}/perf.data", "--stdio", "--sort", "dso", "--percent-limit", "0.5"]
        print(f"{name} ({a.model}, {a.workers} workers x 1 thread, c={c}), worker CPU by shared object (perf):")
        lines = subprocess.run(report, capture_output=True, text=True).stdout.splitlines()
        print(*(line for line in lines if "%" in line), sep="\n")
        stacks = [line.rpartition(" ") for line in Path(f"{tmp}/spy").read_text().splitlines()] if spy else []
        found: Counter[str] = Counter()  # inclusive
        for stack, _, n in stacks:
            for frame in {f.split(" (")[0] for f in stack.split(";") if f} or {"(no Python frame: the stub's C++)"}:
                found[frame] += int(n)
        print(f"one worker, {(total := max(1, sum(int(n) for _, _, n in stacks)))} py-spy samples, by function:")
        print("\n".join(f"  {100 * n / total:5.1f} %  {frame}" for frame, n in found.most_common(20)))


def backend_at(revision: str, into: Path) -> Path:
    """backend/mslite as it was at git `revision`, written under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "backend/mslite"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "backend" / "mslite"


if __name__ == "__main__":
    main()
