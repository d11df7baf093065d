"""Issue 4's bars, computed from one run's results, and the tables the runner prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

PASS, SHORT, MISSING = "PASS", "FALL SHORT", "MISSING"


@dataclass(frozen=True)
class Bar:
    """One bar: the measured value against its target."""

    name: str
    measured: float | None
    target: str
    verdict: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _at(points: list[dict[str, Any]], concurrency: int) -> dict[str, Any] | None:
    return next((p for p in points if p["concurrency"] == concurrency), None)


def _best(points: list[dict[str, Any]], levels: tuple[int, ...] = (4, 8, 16)) -> dict[str, Any] | None:
    cands = [p for p in points if p["concurrency"] in levels]
    return max(cands, key=lambda p: p["infer_s"]) if cands else None


def _f(d: dict[str, Any] | None, key: str) -> float | None:
    """`d[key]`, or None when the measurement is missing (its step failed or was not run)."""
    return None if d is None or d.get(key) is None else float(d[key])


def _ratio_bar(name: str, num: float | None, den: float | None, bound: float, unit: str, *, most: bool = False) -> Bar:
    """`num / den` against `>= bound` (or `<= bound` when `most`); `unit` names the figures compared."""
    target = f"{'<=' if most else '>='} {bound:.2f} x"
    if num is None or not den:
        return Bar(name, None, target, MISSING, "not measured")
    r = num / den
    ok = r <= bound if most else r >= bound
    shown = "%.2f" if unit == "ms" else "%.0f"
    return Bar(name, r, target, PASS if ok else SHORT, f"{shown % num} vs {shown % den} {unit}")


def compute(results: dict[str, Any]) -> list[Bar]:
    """Every bar of issue 4, in the issue's order."""
    ceiling = _f(results["ceiling"]["best"], "img_s")
    single = results["ceiling"]["single"]
    served = results["served"]["mslite"]
    client = results["client"]
    c1, c8 = _at(served["grpc"], 1), _at(served["grpc"], 8)
    bars = [
        _ratio_bar(
            "Worker efficiency: worker CPU/img at c=8 vs in-process CPU/img",
            _f(c8, "worker_cpu_ms_per_img"), _f(single, "cpu_ms_per_img"), 1.10, "ms", most=True,
        ),
        _ratio_bar(
            "Served MobileNetV2 gRPC, best of c=4/8/16 vs in-process ceiling",
            _f(_best(served["grpc"]), "infer_s"), ceiling, 0.75, "img/s",
        ),
        _ratio_bar(
            "Served MobileNetV2 shm, best of c=4/8/16 vs in-process ceiling",
            _f(_best(served["shm"]), "infer_s"), ceiling, 0.83, "img/s",
        ),
    ]  # fmt: skip
    served_p50, inproc_p50 = _f(c1, "p50_ms"), _f(single, "p50_ms")
    name = "p50 at c=1 minus in-process p50 (1 session, same threads)"
    if served_p50 is None or inproc_p50 is None:
        bars.append(Bar(name, None, "<= +1.50 ms", MISSING, "not measured"))
    else:
        extra = served_p50 - inproc_p50
        verdict = PASS if extra <= 1.5 else SHORT
        bars.append(Bar(name, extra, "<= +1.50 ms", verdict, f"{served_p50:.2f} vs {inproc_p50:.2f} ms"))
    b8 = client["batch8"]
    bars += [
        _ratio_bar(
            "Tiny model req/s at c=8 vs naive baseline",
            _f(_at(results["tiny"]["mslite"], 8), "infer_s"), _f(_at(results["tiny"]["naive"], 8), "infer_s"),
            0.95, "req/s",
        ),
        _ratio_bar(
            "Python client (runner) vs raw tritonclient, 8 threads, batch 1",
            _f(client["runner"], "img_s"), _f(client["raw"], "img_s"), 0.95, "img/s",
        ),
        _ratio_bar(
            "Batch-8 input via the runner: shared memory vs plain gRPC",
            _f(b8["shm"], "img_s"), _f(b8["plain"], "img_s"), 1.2, "img/s",
        ),
        _ratio_bar(
            "2 workers x 1 thread vs 1 x 1, throughput at c=8",
            _f(results["scaling"]["2x1"], "infer_s"), _f(results["scaling"]["1x1"], "infer_s"), 1.6, "img/s",
        ),
    ]  # fmt: skip
    if not b8["shm_available"]:
        bars[-2] = Bar(bars[-2].name, None, bars[-2].target, MISSING, "the client has no shared-memory path yet")
    return bars


def context_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    """Figures for comparison, not bars: the naive baseline on the same run, the runner without shared memory."""
    ceiling = _f(results["ceiling"]["best"], "img_s")
    single = results["ceiling"]["single"]
    naive = results["served"]["naive"]
    client = results["client"]
    ratios = [
        ("naive served gRPC, best c=4/8/16 vs ceiling", _f(_best(naive["grpc"]), "infer_s"), ceiling),
        ("naive served shm, best c=4/8/16 vs ceiling", _f(_best(naive["shm"]), "infer_s"), ceiling),
        ("naive worker CPU/img at c=8 vs in-process",
         _f(_at(naive["grpc"], 8), "worker_cpu_ms_per_img"), _f(single, "cpu_ms_per_img")),
        ("runner with MSLITE_TRITON_SHM=0 vs raw tritonclient, 8 threads",
         _f(client["runner_plain"], "img_s"), _f(client["raw"], "img_s")),
    ]  # fmt: skip
    rows = [(name, f"{num / den:.2f} x") for name, num, den in ratios if num is not None and den]
    naive_p50, inproc_p50 = _f(_at(naive["grpc"], 1), "p50_ms"), _f(single, "p50_ms")
    if naive_p50 is not None and inproc_p50 is not None:
        rows.append(("naive p50 at c=1 minus in-process p50", f"{naive_p50 - inproc_p50:+.2f} ms"))
    return rows


def format_table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """A plain fixed-width table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def bars_table(bars: list[Bar]) -> str:
    """The bars as a table: name, measured, target, verdict, detail."""
    rows = []
    for b in bars:
        if b.measured is None:
            shown = "-"
        elif "ms" in b.target:
            shown = f"{b.measured:+.2f} ms"
        else:
            shown = f"{b.measured:.2f} x"
        rows.append((b.name, shown, b.target, b.verdict, b.detail))
    return format_table(("bar", "measured", "target", "verdict", "figures"), rows)
