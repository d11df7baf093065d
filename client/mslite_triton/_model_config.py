"""Context + config sections -> a Triton model config for the `mslite` backend (the one place this happens)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from mslite_contract.protocol import (
    ASCEND_DEVICE_IDS_PARAMETER,
    ASCEND_PRECISION_MODE_PARAMETER,
    ASCEND_PROVIDER_PARAMETER,
    BACKEND_NAME,
    BATCHING_KEYS,
    BATCHING_SECTION,
    DEFAULT_GPU_BUCKETS,
    DEFAULT_MAX_BATCH_SIZE,
    INTER_OP_PARALLEL_NUM_PARAMETER,
    MAX_BATCH_SIZE_KEY,
    MAX_QUEUE_DELAY_KEY,
    MAX_QUEUE_SIZE_KEY,
    PRECISION_MODE_PARAMETER,
    PREFERRED_BATCH_SIZE_KEY,
    RESIZED_INPUTS_PARAMETER,
    THREAD_AFFINITY_CORE_LIST_PARAMETER,
    THREAD_AFFINITY_MODE_PARAMETER,
    THREAD_NUM_PARAMETER,
    batcher_defaults,
    capped_buckets,
    queue_policy,
    section_parameter,
)

from .context import Context

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerPlan:
    """How many workers, and how many threads each, a build asks for."""

    workers: int
    thread_num: int
    inter_op_parallel_num: int


def default_thread_num(cores: int) -> int:
    """MindSpore Lite's default threads per worker: half the cores up to 16 cores (at least 1), else 8."""
    return max(1, cores // 2) if cores <= 16 else 8


def plan_workers(
    context: Context,
    *,
    cores: int,
    workers_num: int | None = None,
    config_workers_num: int = 0,
    config_thread_num: int = 0,
) -> WorkerPlan:
    """Apply MindSpore Lite's rules for workers_num / thread_num defaults and limits.

    Args:
        context: the user's context.
        cores: cores the server's workers may use.
        workers_num: overrides `context.parallel.workers_num` (a plain Model has one worker).
        config_workers_num: the config's `[runner] workers_num` (a tuned config.ini): used when the context's is 0.
        config_thread_num: the config's `[runner] thread_num`: used when `context.cpu.thread_num` is 0.

    Raises:
        RuntimeError: too many workers, or threads that cannot be bound (MindSpore Lite's Init errors).
    """
    workers = (context.parallel.workers_num or config_workers_num) if workers_num is None else workers_num
    threads = context.cpu.thread_num or config_thread_num
    binding = context.cpu.thread_affinity_mode != 0 or bool(context.cpu.thread_affinity_core_list)
    if workers > 5 * cores:
        raise RuntimeError(f"user set worker num {workers} is invalid: more than 5 x {cores} cores")
    if threads > cores and binding:
        raise RuntimeError("thread num more than core num, can not bind cpu core")
    if threads > 5 * cores:
        log.warning("thread num %d is more than 5 x %d cores: set to %d", threads, cores, 5 * cores)
        threads = 5 * cores
    if threads == 0:
        threads = default_thread_num(cores)
        if workers > 0 and workers * threads > cores:
            threads = cores // workers if cores >= workers else cores  # MindSpore Lite's rule
    if workers == 0:
        workers = max(1, cores // threads)
    if workers * threads > cores and context.target[0] == "cpu":
        log.warning(
            "workers_num %d x thread_num %d = %d threads on %d cores: the workers will wait for each other "
            "(MindSpore Lite's guidance: workers x threads should not exceed the cores)",
            workers,
            threads,
            workers * threads,
            cores,
        )
    inter = context.cpu.inter_op_parallel_num or 1
    return WorkerPlan(workers=workers, thread_num=threads, inter_op_parallel_num=inter)


def parse_config_file(path: str) -> dict[str, dict[str, str]]:
    """Read MindSpore Lite's INI-like config file.

    Lines are trimmed; lines of 2 characters or fewer and `#` comments are skipped; `[section]` opens a
    section; `key=value` splits on the first `=`; the first occurrence of a key wins.
    """
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    with open(path, encoding="utf-8") as f:
        for raw in f.read().splitlines()[:100_000]:
            line = raw.strip()
            if len(line) <= 2 or line.startswith("#"):
                continue
            if line.startswith("[") and line.endswith("]"):
                current = sections.setdefault(line[1:-1].strip(), {})
            elif "=" in line and current is not None:
                key, value = (s.strip() for s in line.split("=", 1))
                if current is sections.get("execution_plan"):  # MindSpore Lite strips quotes only here
                    value = value.replace('"', "").replace("'", "")
                current.setdefault(key, value)
    return sections


def merge_sections(*layers: dict[str, dict[str, str]] | None) -> dict[str, dict[str, str]]:
    """Later layers override earlier ones, key by key within a section."""
    merged: dict[str, dict[str, str]] = {}
    for layer in layers:
        for section, entries in (layer or {}).items():
            merged.setdefault(section, {}).update(entries)
    return merged


def build_model_config(
    name: str,
    context: Context,
    plan: WorkerPlan,
    *,
    sections: dict[str, dict[str, str]] | None = None,
    batchable: bool = False,
    light: bool = False,
    resized: dict[str, list[int]] | None = None,
) -> dict[str, Any]:
    """The Triton model config (JSON dict) for one build.

    Inputs, outputs, dims and max_batch_size are left to the backend's auto-complete, which reads
    them from the ONNX file. Each worker is its own instance group, so worker i is group i.

    With `batchable` (every graph tensor has a dynamic first dimension) max_batch_size is 64, and the
    batcher's defaults are the backend's auto-complete rule (`protocol.batcher_defaults`: on CPU, up to 2
    queued requests per `execute`, each run alone, or every queued one for a `light` model
    (`protocol.is_light`); on GPU the buckets above 1 as preferred sizes and `protocol.GPU_MAX_QUEUE_DELAY_US`).
    No queue bound unless the `[dynamic_batching]` section sets `max_queue_size` (`protocol.queue_policy` says
    what it costs).

    Worker i runs on device `device_ids[i % len(device_ids)]` (`parallel.device_ids`, else the target's
    `device_id`).

    `resized` (input name -> full shape) asks the backend to make the fixed dims those shapes change
    symbolic, and to run the shapes once at load (`protocol.RESIZED_INPUTS_PARAMETER`).
    """
    target = context.target[0]
    params: dict[str, Any] = {
        THREAD_NUM_PARAMETER: plan.thread_num,
        INTER_OP_PARALLEL_NUM_PARAMETER: plan.inter_op_parallel_num,
        THREAD_AFFINITY_MODE_PARAMETER: context.cpu.thread_affinity_mode,
        PRECISION_MODE_PARAMETER: (context.gpu if target == "gpu" else context.cpu).precision_mode,
    }
    device = context.ascend if target == "ascend" else context.gpu
    device_ids = context.parallel.device_ids or [device.device_id]
    per_worker = [device_ids[i % len(device_ids)] for i in range(plan.workers)]  # MindSpore Lite's rule
    if target == "gpu":
        groups = [{"kind": "KIND_GPU", "count": 1, "gpus": [d]} for d in per_worker]
    elif target == "ascend":
        # Triton has no Ascend kind: KIND_MODEL workers, each told its device by position
        groups = [{"kind": "KIND_MODEL", "count": 1} for _ in per_worker]
        params[ASCEND_DEVICE_IDS_PARAMETER] = ",".join(str(d) for d in per_worker)
        params[ASCEND_PROVIDER_PARAMETER] = context.ascend.provider
        if context.ascend.precision_mode:
            params[ASCEND_PRECISION_MODE_PARAMETER] = context.ascend.precision_mode
    else:
        groups = [{"kind": "KIND_CPU", "count": 1} for _ in per_worker]
    if resized:
        params[RESIZED_INPUTS_PARAMETER] = json.dumps(resized, sort_keys=True)
    if context.cpu.thread_affinity_core_list:
        params[THREAD_AFFINITY_CORE_LIST_PARAMETER] = ",".join(str(c) for c in context.cpu.thread_affinity_core_list)
    sections = dict(sections or {})
    batching = sections.pop(BATCHING_SECTION, {})
    for section, entries in sections.items():
        for key, value in entries.items():
            params[section_parameter(section, key)] = value
    config: dict[str, Any] = {
        "name": name,
        "backend": BACKEND_NAME,
        "instance_group": groups,
        BATCHING_SECTION: _dynamic_batching(batching),
        "parameters": {k: {"string_value": str(v)} for k, v in params.items()},
    }
    dynamic = config[BATCHING_SECTION]
    if MAX_BATCH_SIZE_KEY in batching:
        config[MAX_BATCH_SIZE_KEY] = _int(batching, MAX_BATCH_SIZE_KEY)
    elif batchable:
        # set here, not left to auto-complete: Triton checks preferred sizes against it before auto-complete
        config[MAX_BATCH_SIZE_KEY] = max([DEFAULT_MAX_BATCH_SIZE, *dynamic.get(PREFERRED_BATCH_SIZE_KEY, [])])
    elif PREFERRED_BATCH_SIZE_KEY in dynamic:
        raise ValueError(
            f"[{BATCHING_SECTION}] {PREFERRED_BATCH_SIZE_KEY} needs a model with a dynamic batch dimension"
        )
    if batchable:
        cpu_only = target == "cpu"
        mbs = config[MAX_BATCH_SIZE_KEY]
        gpu_buckets = capped_buckets(DEFAULT_GPU_BUCKETS, mbs) if target == "gpu" else ()
        if gpu_buckets and MAX_QUEUE_DELAY_KEY not in batching:
            del dynamic[MAX_QUEUE_DELAY_KEY]  # the GPU delay, as auto-complete gives it
        dynamic.update(
            batcher_defaults(dynamic, max_batch_size=mbs, cpu_only=cpu_only, light=light, gpu_buckets=gpu_buckets)
        )
    return config


def _int(section: dict[str, str], key: str) -> int:
    try:
        value = int(section[key])
    except ValueError:
        raise ValueError(f"[{BATCHING_SECTION}] {key} must be an int, got '{section[key]}'") from None
    if value < 0:
        raise ValueError(f"[{BATCHING_SECTION}] {key} must be >= 0, got {value}")
    return value


def _dynamic_batching(section: dict[str, str]) -> dict[str, Any]:
    """Triton's dynamic batcher from the `[dynamic_batching]` section.

    The queue is unbounded unless the section sets `max_queue_size` above 0 (`protocol.queue_policy`).

    Raises:
        ValueError: an unknown key, or a value that is not what the key takes.
    """
    unknown = sorted(set(section) - set(BATCHING_KEYS))
    if unknown:
        raise ValueError(f"[{BATCHING_SECTION}] unknown keys {unknown}; known: {list(BATCHING_KEYS)}")
    batching: dict[str, Any] = {
        MAX_QUEUE_DELAY_KEY: _int(section, MAX_QUEUE_DELAY_KEY) if MAX_QUEUE_DELAY_KEY in section else 0
    }
    if MAX_QUEUE_SIZE_KEY in section:
        batching.update(queue_policy(_int(section, MAX_QUEUE_SIZE_KEY)))
    if section.get(PREFERRED_BATCH_SIZE_KEY):
        try:
            batching[PREFERRED_BATCH_SIZE_KEY] = [int(v) for v in section[PREFERRED_BATCH_SIZE_KEY].split(",")]
        except ValueError:
            raise ValueError(
                f"[{BATCHING_SECTION}] {PREFERRED_BATCH_SIZE_KEY} must be ints separated by commas, "
                f"got '{section[PREFERRED_BATCH_SIZE_KEY]}'"
            ) from None
    return batching


def local_cores() -> int:
    """Cores this process may use (the server's, when it runs on this host)."""
    return len(os.sched_getaffinity(0))
