"""The GPU proof's configs and bar arithmetic (the run itself needs a GPU; its CPU dry run is `--dry-run`)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import gpu_proof
from mslite_contract.protocol import GPU_MAX_QUEUE_DELAY_US


def test_the_shipped_gpu_variant_leaves_the_batcher_to_auto_complete() -> None:
    text = gpu_proof.config_text("ours_defaults", "gpu", None, "mslite", gpu_proof.BIND % "true")
    assert "dynamic_batching" not in text  # Triton takes auto-complete's batcher fields only then
    assert "kind: KIND_GPU, count: 2 gpus: [ 0 ]" in text and "max_batch_size: 64" in text


def test_the_peer_gets_our_gpu_batcher_and_fp32_options() -> None:
    text = gpu_proof.config_text("cpp_peer", "gpu", None, "onnxruntime", "")
    assert 'backend: "onnxruntime"' in text
    assert (
        f"preferred_batch_size: [ 2, 4, 8, 16, 32, 64 ] max_queue_delay_microseconds: {GPU_MAX_QUEUE_DELAY_US}" in text
    )
    assert 'gpu_execution_accelerator: [ { name: "cuda" parameters { key: "use_tf32" value: "0" } } ]' in text


def test_the_bars_read_the_shipped_variant_and_say_by_how_much(tmp_path: Path) -> None:
    def point(model: str, c: int, shm: bool, img_s: float, p50: float = 5.0, p99: float = 8.0) -> list:
        return [model, c, shm, {"infer_s": img_s, "p50_ms": p50, "p99_ms": p99, "avg_batch": 2.0}]

    r = {
        "steps": {
            "inprocess_plain_c8": {"img_s": 2000.0},
            "inprocess_c1": {"p50_ms": 1.0},
            "served_outputs": {"max_abs_diff_single": 0.0, "max_abs_diff_merged": 2e-6},
            "latency_loop_batch1": {"max_ms": 30.0},
        },
        "served_medians": [
            point("ours_defaults", 8, True, 2100.0),
            point("ours_defaults", 8, False, 1700.0, p99=12.0),
            point("ours_defaults", 1, True, 400.0, p50=1.3),
            point("ours_defaults", 1, False, 350.0, p50=1.6),
            point("ours_plain", 8, True, 9999.0),  # not the shipped variant: never read by a bar
            point("cpp_peer", 8, True, 2000.0),
        ],
        "gpu_mem_per_worker_gb": 1.2,
    }
    figures = gpu_proof.bar_figures(r)
    assert figures["vs_inprocess_c8_shm"] == 2100.0 / 2000.0 and figures["vs_inprocess_c8_grpc"] == 0.85
    assert figures["vs_cpp_c8_shm"] == 1.05 and figures["vs_cpp_c32_shm"] is None
    assert figures["p99_over_p50_c8"] == 12.0 / 5.0  # the worse of gRPC and shared memory
    assert abs(figures["c1_p50_over_inprocess_ms"] - 0.6) < 1e-9  # the worse one, minus in-process
    bars = gpu_proof.verdict(figures)
    assert bars["vs_inprocess_c8_shm"]["result"] == "PASS"
    assert (
        bars["vs_inprocess_c8_grpc"]["result"] == "FAIL" and abs(bars["vs_inprocess_c8_grpc"]["off_by"] + 0.05) < 1e-9
    )
    assert bars["max_abs_diff_merged"]["result"] == "FAIL" and bars["vs_cpp_c32_grpc"]["result"] == "MISSING"
    assert bars["gpu_mem_per_worker_gb"]["result"] == "PASS" and bars["max_request_ms"]["result"] == "PASS"


def test_worker_pids_come_from_the_ready_lines(tmp_path: Path) -> None:
    log = tmp_path / "tritonserver.log"
    log.write_text(
        "I1127 model.py:150] mslite: instance 'ours_defaults_0_0' ready: providers=['CUDAExecutionProvider'] "
        "executor=bound pid=41\n"
        "I1127 model.py:150] mslite: instance 'ours_defaults_1_0' ready: providers=[] executor=bound pid=40\n"
        "I1127 model.py:150] mslite: instance 'ours_plain_0_0' ready: providers=[] executor=general pid=7\n"
    )
    assert gpu_proof.worker_pids(log, "ours_defaults") == [40, 41]
