"""The `[runner] workers_num` / `thread_num` that `mslite-triton tune` writes into config.ini, without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

import mslite_triton as mslite
from mslite_server.tune import TuneOptions, Variant, _write_client_config
from mslite_triton._model_config import WorkerPlan, parse_config_file, plan_workers
from mslite_triton._pending import runner_sizes, take_runner_section


def _context(workers: int = 0, threads: int = 0) -> mslite.Context:
    context = mslite.Context()
    context.parallel.workers_num = workers
    context.cpu.thread_num = threads
    return context


def test_tune_writes_a_config_file_the_client_reads(tmp_path: Path) -> None:
    chosen = Variant("tiny_config_1", workers=3, threads=1, concurrency=4, queue_delay_us=200, throughput=9.5, p99_ms=2)
    options = TuneOptions(model_dir=tmp_path, output=tmp_path, queue_delays_us=(0, 200))
    _write_client_config(chosen, "tiny", options, tmp_path / "config.ini")
    sections = parse_config_file(str(tmp_path / "config.ini"))
    assert sections == {"runner": {"workers_num": "3", "thread_num": "1"},
                        "dynamic_batching": {"max_queue_delay_microseconds": "200"}}  # fmt: skip
    assert runner_sizes(sections, "who") == (3, 1)
    rest, limit = take_runner_section(sections, "who")
    assert rest == {"dynamic_batching": {"max_queue_delay_microseconds": "200"}} and limit.bound == 1000
    # a delay that was not swept is the config's own: not written
    _write_client_config(chosen, "tiny", TuneOptions(model_dir=tmp_path, output=tmp_path), tmp_path / "b.ini")
    assert parse_config_file(str(tmp_path / "b.ini")) == {"runner": {"workers_num": "3", "thread_num": "1"}}


def test_runner_sizes_default_to_zero_and_must_be_counts() -> None:
    assert runner_sizes({}, "who") == (0, 0)
    assert runner_sizes({"runner": {"max_pending_predicts": "5"}}, "who") == (0, 0)
    with pytest.raises(RuntimeError, match=r"^who! Error is \[runner\] workers_num must be a non-negative int"):
        runner_sizes({"runner": {"workers_num": "two"}}, "who")
    with pytest.raises(RuntimeError, match=r"\[runner\] thread_num must be a non-negative int, got '-1'"):
        take_runner_section({"runner": {"thread_num": "-1"}}, "who")


def test_the_config_applies_where_the_context_is_left_at_zero() -> None:
    assert plan_workers(_context(), cores=2) == WorkerPlan(2, 1, 1)  # MindSpore Lite's defaults
    assert plan_workers(_context(), cores=2, config_workers_num=3, config_thread_num=1) == WorkerPlan(3, 1, 1)
    assert plan_workers(_context(), cores=8, config_thread_num=2) == WorkerPlan(4, 2, 1)
    # what the code sets wins, setting by setting
    assert plan_workers(_context(workers=2), cores=2, config_workers_num=3, config_thread_num=1) == WorkerPlan(2, 1, 1)
    assert plan_workers(_context(threads=2), cores=8, config_workers_num=3, config_thread_num=1) == WorkerPlan(3, 2, 1)
    # a Model is one worker whatever the file says
    assert plan_workers(_context(), cores=8, workers_num=1, config_workers_num=3, config_thread_num=2).workers == 1
    with pytest.raises(RuntimeError, match="worker num 11 is invalid"):
        plan_workers(_context(), cores=2, config_workers_num=11)
