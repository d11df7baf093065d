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


def worker_index(model_config: dict[str, Any], instance_name: str) -> int:
    """The instance's position among all instances of the model, by instance group order.

    Triton names the k-th instance of a group `<group name>_<k>`; the group names are in the config,
    so the index is looked up, not parsed.

    Raises:
        ConfigError: the instance is not in any group (should not happen with Triton's own names).
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
