"""Draw results.png from results.json: throughput, p50 and p99 latency vs concurrency.

Run by the benchmark with the tools venv's Python (matplotlib lives there, not in the main venv):
`.tools-venv/bin/python benchmarks/plot.py results.json results.png`. Standalone: no project imports.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# backend, protocol, label, colour, line style, marker: no two series share a colour or a marker
SERIES = (
    ("mslite", "grpc", "mslite gRPC", "C0", "-", "o"),
    ("mslite", "shm", "mslite shm", "C2", "--", "s"),
    ("naive", "grpc", "naive gRPC", "C1", "-", "^"),
    ("naive", "shm", "naive shm", "C3", "--", "v"),
)


def draw(results: dict[str, Any], path: str) -> None:
    fig, (ax_t, ax_50, ax_99) = plt.subplots(1, 3, figsize=(16, 4.8))
    for backend, proto, label, color, style, marker in SERIES:
        points = sorted(results["served"][backend][proto], key=lambda p: p["concurrency"])
        if not points:
            continue
        xs = [p["concurrency"] for p in points]
        kw = {"color": color, "linestyle": style, "marker": marker, "label": label}
        ax_t.plot(xs, [p["infer_s"] for p in points], **kw)
        ax_50.plot(xs, [p["p50_ms"] for p in points], **kw)
        ax_99.plot(xs, [p["p99_ms"] for p in points], **kw)
    ceiling = results["ceiling"].get("reference") or results["ceiling"]["best"]["img_s"]  # the ratios' ceiling
    ax_t.axhline(ceiling, color="k", linestyle=":", label=f"in-process ceiling {ceiling:.0f}")
    single = results["ceiling"]["single"]["p50_ms"]
    ax_50.axhline(single, color="k", linestyle=":", label=f"in-process p50 {single:.1f} ms")
    for ax, title, unit in (
        (ax_t, "Throughput (MobileNetV2, batch 1)", "images/s"),
        (ax_50, "p50 latency", "ms"),
        (ax_99, "p99 latency", "ms"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (perf_analyzer)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    meta = results["meta"]
    fig.suptitle(
        f"mslite-triton benchmark, {meta['cores']} cores, {meta['workers']} workers x {meta['threads']} thread(s)"
        + (" (quick run)" if meta["quick"] else "")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    with open(sys.argv[1]) as f:
        results = json.load(f)
    draw(results, sys.argv[2])


if __name__ == "__main__":
    main()
