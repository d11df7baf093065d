"""The benchmark's bars against the naive and C++ backends, from synthetic rounds (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bars
from benchmarks.serving import find_peer_backend, peer_ort_version


def _point(infer_s: float, p50: float = 1.0, p99: float = 2.0, stable: bool = True) -> dict:
    return {"infer_s": infer_s, "p50_ms": p50, "p99_ms": p99, "stable": stable}


def _results(peer: bool, tiny_stable: bool = True) -> dict:
    mob = []
    for r in range(5):
        one: dict = {"round": r + 1}
        for c in (1, 8, 16):
            one[f"mslite_c{c}"] = _point(110.0 + r, p50=5.0)
            one[f"naive_c{c}"] = _point(100.0, p50=5.5)
            if peer:
                one[f"cpp_c{c}"] = _point(120.0, p50=4.0)
        mob.append(one)
    tiny = [
        {"round": r + 1, "mslite_c1": _point(900.0), "naive_c1": _point(1000.0),
         "mslite_c8": _point(2000.0, stable=tiny_stable or r > 0), "naive_c8": _point(1800.0),
         "one_worker_c1": _point(800.0, p99=3.0)}
        for r in range(5)
    ]  # fmt: skip
    return {"meta": {"peer": "/x" if peer else None}, "rounds": {"compare_mobilenet": mob, "compare_tiny": tiny}}


def test_bars_without_the_peer_say_skipped() -> None:
    found = {b.name: b for b in bars.compute(_results(peer=False))}
    cpp = [b for name, b in found.items() if "C++" in name]
    assert len(cpp) == 2 and all(b.verdict == bars.SKIPPED for b in cpp)
    assert found["MobileNetV2 shipped config vs naive backend, c=8"].verdict == bars.PASS
    assert found["Tiny model 2 workers, auto-completed defaults vs naive, c=1"].verdict == bars.SHORT


def test_bars_with_the_peer_and_an_unstable_point() -> None:
    found = {b.name: b for b in bars.compute(_results(peer=True, tiny_stable=False))}
    c8 = found["MobileNetV2 shipped config vs C++ backend, c=8"]
    assert c8.verdict == bars.SHORT and c8.measured == pytest.approx(112 / 120)
    stable = found["Tiny model 2 workers: perf_analyzer stable at every level"]
    assert stable.verdict == bars.SHORT and "round 1 mslite_c8" in stable.detail
    assert found["MobileNetV2 c=1 p50 minus naive backend's p50"].measured == pytest.approx(-0.5)
    assert found["Tiny model 1 worker, p99 at c=1 (no 500 ms stalls)"].verdict == bars.PASS


def test_peer_backend_folder_or_backends_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="libtriton_onnxruntime.so"):
        find_peer_backend(tmp_path)
    folder = tmp_path / "onnxruntime"
    folder.mkdir()
    (folder / "libtriton_onnxruntime.so").write_bytes(b"")
    (folder / "libonnxruntime.so.1.19.2").write_bytes(b"")
    assert find_peer_backend(tmp_path) == folder == find_peer_backend(folder)
    assert peer_ort_version(folder) == "1.19.2"


def test_a_bar_that_falls_short_or_is_missing_makes_the_run_fail() -> None:
    computed = bars.compute(_results(peer=False))  # one bar falls short (tiny c=1), the C++ ones are skipped
    assert bars.exit_status(computed) == bars.BARS_MISSED == 3
    passing = [b for b in computed if b.verdict in (bars.PASS, bars.SKIPPED)]
    assert passing and bars.exit_status(passing) == 0
    assert bars.exit_status([bars.Bar("x", None, ">= 1.00 x", bars.MISSING, "not measured")]) == 3
    assert "FALL SHORT" in bars.LEGEND and "exit 3" in bars.LEGEND


def test_information_rows_never_read_as_bars() -> None:
    one = {"round": 1, "grpc": {"infer_s": 115.0}, "ceiling": {"img_s": 100.0}, "shm": {"infer_s": 50.0}}
    results = {"rounds": {"mobilenet": [one]}}
    found = {b.name: b for b in bars.information(results)}
    assert found["Served MobileNetV2 gRPC, best of c=4/8/16 vs in-process ceiling"].verdict == bars.ABOVE
    assert found["Served MobileNetV2 shm, best of c=4/8/16 vs in-process ceiling"].verdict == bars.BELOW
    assert not {b.verdict for b in found.values()} & {bars.PASS, bars.SHORT}


def test_plot_series_are_told_apart_by_colour_and_marker() -> None:
    import ast

    tree = ast.parse((Path(bars.__file__).parent / "plot.py").read_text())
    series = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SERIES"
    )
    colours, markers = [s[3] for s in series], [s[5] for s in series]
    assert len(set(colours)) == len(series) and len(set(markers)) == len(series)
