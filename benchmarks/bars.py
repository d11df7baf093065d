"""The bars, computed from one run's results, and the tables the runner prints.

The bars compare backends served side by side in one server (ours, the naive python backend, Triton's C++
ONNX Runtime backend when given): medians of alternated rounds, each round's value printed as the spread.
The ratios to the in-process ceiling stay as information (`information`): the serving path costs CPU the
in-process run does not pay, so they are not bars; their verdicts read "above" / "below", never PASS.

A bar's verdict: PASS (its median meets the target), FALL SHORT (it does not), MISSING (a step failed, so
there is no figure), SKIPPED (not measured in this run, e.g. no C++ backend). The run's exit status is
`exit_status`: 3 when a bar fell short or is missing, so a script or CI sees it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from . import paired
from .paired import Round

PASS, SHORT, MISSING, SKIPPED = "PASS", "FALL SHORT", "MISSING", "SKIPPED"
ABOVE, BELOW = "above (information)", "below (information)"  # the information rows' verdicts: not bars
BARS_MISSED = 3  # the exit status of a run in which a bar fell short or is missing (1: a step failed)
LEGEND = (
    "verdicts: PASS = the median of the rounds meets the target; FALL SHORT = it does not; MISSING = no figure "
    "(a step failed); SKIPPED = not measured in this run. A FALL SHORT or MISSING bar makes the run exit 3."
)
NO_PEER = "no --peer-backends: the C++ backend was not measured"


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


def _get(key: str, name: str) -> Callable[[Round], float | None]:
    return lambda one: paired.value(one, key, name)


def _c8(one: Round) -> float | None:
    """Worker CPU per image at c=8: the round's best-level gRPC point when that level is 8."""
    point = one.get("grpc")
    key = "grpc" if isinstance(point, dict) and point.get("concurrency") == 8 else "grpc_c8"
    return paired.value(one, key, "worker_cpu_ms_per_img")


def _inproc_cpu(one: Round) -> float | None:
    """In-process CPU per image with the served workers' layout (the ceiling cell when it is that layout)."""
    return paired.value(one, "layout", "cpu_ms_per_img") or paired.value(one, "ceiling", "cpu_ms_per_img")


def _paired_bar(
    name: str,
    rounds: list[Round],
    num: Callable[[Round], float | None],
    den: Callable[[Round], float | None],
    bound: float,
    unit: str,
    *,
    most: bool = False,
    diff: bool = False,
) -> Bar:
    """The median over rounds of `num / den` (or `num - den` with `diff`, in ms) against the bound."""
    if diff:
        target = f"<= {bound:+.2f} ms"
        values = [a - b for a, b in paired.pairs(rounds, num, den)]
    else:
        target = f"{'<=' if most else '>='} {bound:.2f} x"
        values = [a / b for a, b in paired.pairs(rounds, num, den) if b]
    if not values:
        return Bar(name, None, target, MISSING, "not measured")
    m = statistics.median(values)
    ok = m <= bound if (most or diff) else m >= bound
    fmt = "%.2f" if unit == "ms" else "%.0f"
    a, b = paired.median([num(r) for r in rounds]), paired.median([den(r) for r in rounds])
    figures = f"{fmt % a} vs {fmt % b} {unit}" if a is not None and b is not None else ""
    each = ", ".join(("%+.2f" if diff else "%.2f") % v for v in values)
    return Bar(name, m, target, PASS if ok else SHORT, f"{figures} (rounds: {each})")


def compute(results: dict[str, Any]) -> list[Bar]:
    """The bars: ours against the naive python backend and the C++ backend, same server, same workers."""
    mob, tiny = results["rounds"]["compare_mobilenet"], results["rounds"]["compare_tiny"]
    peer = bool(results["meta"].get("peer"))
    infer, p50, p99 = (
        (lambda key: _get(key, "infer_s")),
        (lambda key: _get(key, "p50_ms")),
        _get("one_worker_c1", "p99_ms"),
    )
    bars = []
    for c in (8, 16):
        name = f"MobileNetV2 shipped config vs C++ backend, c={c}"
        if peer:
            bars.append(_paired_bar(name, mob, infer(f"mslite_c{c}"), infer(f"cpp_c{c}"), 1.0, "img/s"))
        else:
            bars.append(Bar(name, None, ">= 1.00 x", SKIPPED, NO_PEER))
    for c, bound in ((1, 0.97), (8, 1.0), (16, 1.0)):
        bars.append(_paired_bar(f"MobileNetV2 shipped config vs naive backend, c={c}", mob,
                                infer(f"mslite_c{c}"), infer(f"naive_c{c}"), bound, "img/s"))  # fmt: skip
    bars.append(_paired_bar("MobileNetV2 c=1 p50 minus naive backend's p50", mob,
                            p50("mslite_c1"), p50("naive_c1"), 0.0, "ms", diff=True))  # fmt: skip
    for c in (1, 8):
        bars.append(_paired_bar(f"Tiny model 2 workers, auto-completed defaults vs naive, c={c}", tiny,
                                infer(f"mslite_c{c}"), infer(f"naive_c{c}"), 1.0, "req/s"))  # fmt: skip
    bars.append(_stable_bar(tiny))
    values = [v for v in (p99(one) for one in tiny) if v is not None]
    if values:
        m = statistics.median(values)
        each = ", ".join(f"{v:.2f}" for v in values)
        bars.append(Bar("Tiny model 1 worker, p99 at c=1 (no 500 ms stalls)", m, "< 20 ms", PASS if m < 20 else SHORT,
                        f"rounds: {each} ms"))  # fmt: skip
    else:
        bars.append(Bar("Tiny model 1 worker, p99 at c=1 (no 500 ms stalls)", None, "< 20 ms", MISSING, "not measured"))
    return bars


def _stable_bar(tiny: list[Round]) -> Bar:
    """Every level of ours on the tiny model got a stable perf_analyzer measurement, in every round."""
    name = "Tiny model 2 workers: perf_analyzer stable at every level"
    points = [(k, one[k]) for one in tiny for k in one if k.startswith("mslite_c") and isinstance(one[k], dict)]
    if not points:
        return Bar(name, None, "all stable", MISSING, "not measured")
    unstable = [f"round {one['round']} {k}" for one in tiny for k in one if k.startswith("mslite_c")
                and (not isinstance(one[k], dict) or not one[k].get("stable"))]  # fmt: skip
    detail = f"{len(points) - len(unstable)} of {len(points)} stable" + (
        f"; not: {', '.join(unstable)}" if unstable else ""
    )
    return Bar(
        name, float(len(points) - len(unstable)) / len(points), "all stable", SHORT if unstable else PASS, detail
    )


def peer_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    """The C++ backend's side, for information: ratios and the c=1 latency gap, both ONNX Runtime versions."""
    versions = results["meta"].get("ort_version") or {}
    rows = [("ONNX Runtime", f"ours {versions.get('mslite')}, C++ backend {versions.get('cpp') or '- (skipped)'}")]
    if not results["meta"].get("peer"):
        return rows + [("C++ backend", NO_PEER)]
    mob, tiny = results["rounds"]["compare_mobilenet"], results["rounds"]["compare_tiny"]
    for label, rounds, key in (("MobileNetV2 c=1", mob, "c1"), ("tiny c=1", tiny, "c1"), ("tiny c=8", tiny, "c8")):
        vals = [
            a / b for a, b in paired.pairs(rounds, _get(f"mslite_{key}", "infer_s"), _get(f"cpp_{key}", "infer_s")) if b
        ]
        if vals:
            each = ", ".join(f"{v:.2f}" for v in vals)
            rows.append((f"{label}: ours vs C++ backend", f"{statistics.median(vals):.2f} x (rounds: {each})"))
    for label, rounds in (("MobileNetV2", mob), ("tiny", tiny)):
        gaps = [a - b for a, b in paired.pairs(rounds, _get("mslite_c1", "p50_ms"), _get("cpp_c1", "p50_ms"))]
        if gaps:
            each = ", ".join(f"{v:+.2f}" for v in gaps)
            rows.append(
                (f"{label} c=1 p50: ours minus C++ backend", f"{statistics.median(gaps):+.2f} ms (rounds: {each})")
            )
    return rows


def information(results: dict[str, Any]) -> list[Bar]:
    """The ratios to the in-process ceiling: information with their old targets, not bars."""
    mob = results["rounds"]["mobilenet"]
    ceiling = _get("ceiling", "img_s")
    bars = [
        _paired_bar("Worker efficiency: worker CPU/img at c=8 vs in-process CPU/img", mob,
                    _c8, _inproc_cpu, 1.10, "ms", most=True),
        _paired_bar("Served MobileNetV2 gRPC, best of c=4/8/16 vs in-process ceiling", mob,
                    _get("grpc", "infer_s"), ceiling, 0.75, "img/s"),
        _paired_bar("Served MobileNetV2 shm, best of c=4/8/16 vs in-process ceiling", mob,
                    _get("shm", "infer_s"), ceiling, 0.83, "img/s"),
        _paired_bar("p50 at c=1 minus in-process p50 (1 session, same threads)", mob,
                    _get("c1", "p50_ms"), _get("single", "p50_ms"), 1.5, "ms", diff=True),
    ]  # fmt: skip
    as_information = {PASS: ABOVE, SHORT: BELOW}
    return [replace(b, verdict=as_information.get(b.verdict, b.verdict)) for b in bars]


def exit_status(computed: list[Bar]) -> int:
    """0, or BARS_MISSED when a bar fell short or has no figure (SKIPPED bars were not asked for)."""
    return BARS_MISSED if any(b.verdict in (SHORT, MISSING) for b in computed) else 0


def context_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    """Figures for comparison, not bars: the naive baseline in the same rounds."""
    mob = results["rounds"]["mobilenet"]
    rows = []
    for name, rounds, num, den in (
        ("naive served gRPC, best c=4/8/16 vs ceiling", mob, _get("naive_grpc", "infer_s"), _get("ceiling", "img_s")),
        ("naive worker CPU/img (same level) vs in-process", mob,
         _get("naive_grpc", "worker_cpu_ms_per_img"), _inproc_cpu),
        ("ours worker CPU/img at c=8 vs in-process single session", mob, _c8, _get("single", "cpu_ms_per_img")),
    ):  # fmt: skip
        m = paired.median([a / b for a, b in paired.pairs(rounds, num, den) if b])
        if m is not None:
            rows.append((name, f"{m:.2f} x (median of rounds)"))
    m = paired.median([a - b for a, b in paired.pairs(mob, _get("naive_c1", "p50_ms"), _get("single", "p50_ms"))])
    if m is not None:
        rows.append(("naive p50 at c=1 minus in-process p50", f"{m:+.2f} ms (median of rounds)"))
    for key, who in (("c1", "ours"), ("naive_c1", "naive")):
        split = [
            one[key]["breakdown_us"] for one in mob if isinstance(one.get(key), dict) and "breakdown_us" in one[key]
        ]
        if split:
            avg = {k: statistics.median(s.get(k, 0.0) for s in split) / 1000 for k in split[0]}
            shown = ", ".join(f"{k} {v:.2f}" for k, v in avg.items())
            rows.append((f"{who} c=1 average latency split (ms, perf_analyzer)", shown))
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
        else:  # a third decimal when two would read as the target itself (e.g. 1.104 "1.10 x" FALL SHORT)
            digits = 3 if f"{b.measured:.2f}" in b.target else 2
            if "ms" not in b.target:
                shown = f"{b.measured:.{digits}f} x"
            else:  # a difference carries its sign
                shown = f"{b.measured:+.{digits}f} ms" if "+" in b.target else f"{b.measured:.{digits}f} ms"
        rows.append((b.name, shown, b.target, b.verdict, b.detail))
    return format_table(("bar", "measured", "target", "verdict", "figures"), rows)
