"""How the CPU batching defaults were chosen: MobileNetV2 served with different dynamic-batcher settings.

`python -m benchmarks.batching_variants [--model tiny] [--workers 2] [--levels 8,16] [--rounds 2] [--variants ...]`

With `--model tiny --workers 1 --variants all_alone,all_alone_unbounded --levels 1,8` it shows Triton
2.51's stall with a queue policy on one instance (p99 ~501 ms with the bound, ~1 ms without).

Every variant is a repository model (`mobilenetv2` unless `--model`; 2 workers x 1 thread) with another
`dynamic_batching` section and `merge_requests` value; `naive` is the naive baseline. All are loaded at
once and measured by perf_analyzer over gRPC in alternation (the order reversed every other round,
paired.py says why); the last lines give each variant's median throughput, p50, p99 and its ratio to the
first variant.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from tests.support.tools import ensure_tools

from .perf import PerfSettings, measure_composed, medians_by_level, variant_names
from .serving import UNBOUNDED_CPU_BATCHER, ModelSpec, compose_repository, with_batcher

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "default_queue_policy { max_queue_size: 1000 }"
MERGE = 'parameters { key: "merge_requests" value { string_value: "true" } }\n'
VARIANTS = {  # name -> what replaces the config's dynamic_batching section
    "p1_merge": f"dynamic_batching {{ preferred_batch_size: [ 1 ] {QUEUE} }}\n" + MERGE,
    "p1_alone": f"dynamic_batching {{ preferred_batch_size: [ 1 ] {QUEUE} }}\n",
    "p2_alone": f"dynamic_batching {{ preferred_batch_size: [ 2 ] {QUEUE} }}\n",
    "p2_alone_unbounded": UNBOUNDED_CPU_BATCHER,
    "p2_merge": f"dynamic_batching {{ preferred_batch_size: [ 2 ] {QUEUE} }}\n" + MERGE,
    "p4_alone": f"dynamic_batching {{ preferred_batch_size: [ 4 ] {QUEUE} }}\n",
    "all_alone": f"dynamic_batching {{ {QUEUE} }}\n",
    "all_merge": f"dynamic_batching {{ {QUEUE} }}\n" + MERGE,
    "all_alone_unbounded": "dynamic_batching { }\n",
    "all_merge_unbounded": "dynamic_batching { }\n" + MERGE,
    "p4_alone_unbounded": "dynamic_batching { preferred_batch_size: [ 4 ] }\n",
    "p8_alone_unbounded": "dynamic_batching { preferred_batch_size: [ 8 ] }\n",
    "p2_no_metrics": UNBOUNDED_CPU_BATCHER  # no metrics publisher thread in the workers
    + 'parameters { key: "metrics" value { string_value: "false" } }\n',
    "p2_pinned": UNBOUNDED_CPU_BATCHER  # worker i on core i (thread_affinity_mode 1)
    + 'parameters { key: "thread_affinity_mode" value { string_value: "1" } }\n',
    "p2_alone_unshared": f"dynamic_batching {{ preferred_batch_size: [ 2 ] {QUEUE} }}\n"
    + 'parameters { key: "share_weights" value { string_value: "false" } }\n',
}


def compose(root: Path, names: list[str], source: str = "mobilenetv2", workers: int = 2) -> None:
    """One model directory per variant of the repository's `source` model (the naive baseline as `naive`)."""
    specs = [ModelSpec(n, source, "naive" if n == "naive" else "mslite", workers, 1) for n in names]
    compose_repository(root, ROOT / "model_repository", specs)
    for name in names:
        if name == "naive":
            continue
        path = root / name / "config.pbtxt"
        path.write_text(with_batcher(path.read_text(), VARIANTS[name]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default="p1_merge,p2_alone,all_alone,naive")
    p.add_argument("--model", default="mobilenetv2", help="a model of model_repository/ (e.g. tiny)")
    p.add_argument("--workers", type=int, default=2, help="instances of every variant (1 x 1 thread each)")
    p.add_argument("--levels", default="8,16", help="perf_analyzer concurrencies")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    names = variant_names(p, a.variants, VARIANTS)
    levels = [int(c) for c in a.levels.split(",")]
    tools = ensure_tools(ROOT)
    settings = PerfSettings(interval_ms=2000, max_trials=5, stability_pct=25)
    found = measure_composed(
        tools,
        lambda root: compose(root, names, a.model, a.workers),
        names,
        levels,
        a.rounds,
        settings,
        lambda pt: (
            f"{pt.infer_s:.0f} img/s, p50 {pt.p50_ms:.1f} ms, "
            f"p99 {pt.p99_ms:.1f} ms, {pt.avg_batch:.2f} requests per execute"
        ),
    )
    for c, name, pts, ratio in medians_by_level(found, names, levels, "infer_s"):
        print(
            f"c={c} {name}: median {statistics.median(x.infer_s for x in pts):.0f} img/s, "
            f"p50 {statistics.median(x.p50_ms for x in pts):.1f} ms, "
            f"p99 {statistics.median(x.p99_ms for x in pts):.1f} ms, {ratio:.3f} x {names[0]}"
        )


if __name__ == "__main__":
    main()
