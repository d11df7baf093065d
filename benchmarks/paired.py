"""Paired rounds: the two halves of every bar measured back to back, several times, the bar the median ratio.

This machine (a shared 2-core VM) changes speed by 10-30 % within tens of seconds: one in-process loop
measured 10.3 and then 15.4 ms per image a minute later. A ratio whose two halves were measured minutes
apart moves with that. So each bar is measured in rounds: a round measures everything the bars need, one
right after the other, every other round in reverse order (A B, B A, ...), and a bar is the median of
its per-round ratios. The sweeps before the rounds draw the table and the plot; the bars come from here.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

Measure = Callable[[], dict[str, Any]]
Round = dict[str, Any]


def run_round(items: list[tuple[str, Measure]], index: int) -> Round:
    """Run one round; a measurement that fails is stored as `{"error": ...}` and the round goes on."""
    order = items if index % 2 == 0 else items[::-1]
    out: Round = {"round": index + 1, "order": [key for key, _ in order]}
    for key, fn in order:
        try:
            out[key] = fn()
        except Exception as e:  # one failure must not lose the round's other figures
            out[key] = {"error": f"{type(e).__name__}: {e}"}
    return out


def errors(one: Round) -> list[str]:
    """`key: error` for each measurement of the round that failed."""
    return [f"{k}: {v['error']}" for k, v in one.items() if isinstance(v, dict) and "error" in v]


def value(one: Round, key: str, name: str) -> float | None:
    """`one[key][name]` as a float, or None when it was not measured or failed."""
    entry = one.get(key)
    if not isinstance(entry, dict) or entry.get(name) is None:
        return None
    return float(entry[name])


def median(values: list[float | None]) -> float | None:
    """The median of the values that were measured; None when none was."""
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def pairs(
    rounds: list[Round], num: Callable[[Round], float | None], den: Callable[[Round], float | None]
) -> list[tuple[float, float]]:
    """`(num, den)` of every round where both were measured."""
    both = ((num(one), den(one)) for one in rounds)
    return [(a, b) for a, b in both if a is not None and b is not None]
