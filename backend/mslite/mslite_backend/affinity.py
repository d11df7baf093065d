"""Which worker this instance is, and the cores it is pinned to (MindSpore Lite's thread binding).

Worker i of N gets its own disjoint slice of cores: slice i of `thread_affinity_core_list` when one is
given (its length must be threads x workers), else slice i of the cores this process may use
(`thread_affinity_mode` 1, "big cores first": on a machine whose cores are all alike, the lowest ids).
"""

from __future__ import annotations

import os
from typing import Any

from .config import BackendConfig, group_instances
from .errors import ConfigError


def _group_position(group: dict[str, Any], instance_name: str) -> int | None:
    """The k of `<group name>_<k>`, Triton's name for the k-th instance of `group`; None for other names."""
    prefix = f"{group.get('name', '')}_"
    suffix = instance_name[len(prefix) :]
    return int(suffix) if instance_name.startswith(prefix) and suffix.isdigit() else None


def config_with_instance(model_config: dict[str, Any], instance_name: str) -> tuple[dict[str, Any], bool]:
    """The config as Triton now runs the model: the one given, or, for an added instance, its group grown.

    When a reload changes nothing but the instance counts, Triton keeps the live model and adds (or
    removes) instances, and it hands an added instance the config of the model's original load, where its
    name is missing. Such an instance belongs to the group its name starts with; its group's count is
    raised to include it, so the worker sizes its threads and picks its cores for the new count. Returns
    the config and whether the instance was added so.

    Raises:
        ConfigError: the name belongs to no group (should not happen with Triton's own names).
    """
    groups = model_config.get("instance_group") or []
    for i, group in enumerate(groups):
        k = _group_position(group, instance_name)
        if k is None:
            continue
        if k < group_instances(group):
            return model_config, False
        gpus = max(1, len(group.get("gpus") or []))  # Triton creates `count` instances on each listed GPU
        grown = [dict(g) for g in groups]
        grown[i]["count"] = k // gpus + 1
        return {**model_config, "instance_group": grown}, True
    raise ConfigError(f"instance '{instance_name}' is not in the model's instance groups")


def worker_index(model_config: dict[str, Any], instance_name: str) -> int:
    """The instance's position among all instances of the model, by instance group order.

    Triton names the k-th instance of a group `<group name>_<k>`; the group names are in the config,
    so the index is looked up, not parsed.

    Raises:
        ConfigError: the instance is not in any group (see `config_with_instance` for added instances).
    """
    offset = 0
    for group in model_config.get("instance_group") or []:
        count = group_instances(group)
        names = [f"{group.get('name', '')}_{k}" for k in range(count)]
        if instance_name in names:
            return offset + names.index(instance_name)
        offset += count
    raise ConfigError(f"instance '{instance_name}' is not in the model's instance groups")


def cores_for_worker(cfg: BackendConfig, index: int, available: list[int]) -> tuple[int, ...] | None:
    """The cores worker `index` is pinned to, or None when binding is off.

    Raises:
        ConfigError: a core list of the wrong size or naming cores this process cannot use, or more
            threads than cores.
    """
    if cfg.thread_affinity_mode == 2 or (cfg.thread_affinity_mode == 0 and not cfg.thread_affinity_core_list):
        return None
    threads = cfg.intra_op_threads
    where = f"model '{cfg.model_name}'"
    if threads > len(available):
        raise ConfigError(f"{where}: thread num {threads} more than core num {len(available)}, can not bind cpu core")
    if cfg.thread_affinity_core_list:
        wanted = list(cfg.thread_affinity_core_list)
        if len(wanted) != threads * cfg.workers:
            raise ConfigError(
                f"{where}: thread_affinity_core_list has {len(wanted)} cores, expected thread num x workers = "
                f"{threads} x {cfg.workers} = {threads * cfg.workers}"
            )
        bad = sorted(set(wanted) - set(available))
        if bad:
            raise ConfigError(f"{where}: thread_affinity_core_list names cores {bad} outside the usable {available}")
        return tuple(wanted[index * threads : (index + 1) * threads])
    ordered = sorted(available)
    start = (index * threads) % len(ordered)
    return tuple(ordered[(start + k) % len(ordered)] for k in range(threads))


def pin_process(cores: tuple[int, ...]) -> None:
    """Pin every existing thread of this process (and so the threads it creates later) to `cores`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, PermissionError):
            pass  # a thread that ended meanwhile
