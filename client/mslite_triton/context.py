"""Context: MindSpore Lite's build options (target devices, CPU/GPU/Ascend infos, parallel).

Pure configuration: nothing here talks to the server. Setters validate with MindSpore Lite's
exact exception types and messages; the transport turns the values into a Triton model
configuration later.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ._checkparam import (
    Check,
    Checked,
    check_isinstance,
    check_list_of_element,
    instance_of,
    list_of,
    missing_file,
    non_negative_int,
    one_of,
)

__all__ = ["Context"]

_LOG = logging.getLogger(__name__)

_TARGETS = ["cpu", "gpu", "ascend"]
_FP_MODES = ["enforce_fp32", "preferred_fp16"]
_FP_MODE_DOC = 'str: ``"enforce_fp32"`` (default) or ``"preferred_fp16"``.'
_ASCEND_MODES = ["enforce_fp32", "preferred_fp32", "enforce_fp16", "enforce_origin", "preferred_optimal"]
_URL_SCHEMES = ["grpc://", "http://", "https://"]
# RunnerConfig::SetConfigInfo limits: past these a section is dropped with an error log.
_MAX_SECTIONS = 100
_MAX_SECTION_ENTRIES = 1000
_WARNED: set[str] = set()  # settings already reported as having no effect (once per process)


def _affinity_mode(arg_name: str, value: Any) -> int:
    # MindSpore Lite's native Context falls back to no binding rather than refusing the value.
    check_isinstance(arg_name, value, int)
    if value not in (0, 1, 2):
        _LOG.warning("Invalid thread affinity mode %s, changed to 0 (no bind).", value)
        return 0
    return int(value)


class _CPU:
    """CPU options. Thread settings are shared by all devices of the Context, as natively."""

    precision_mode = Checked("cpu_precision_mode", one_of(_FP_MODES), _FP_MODE_DOC)
    thread_num = Checked(
        "cpu_thread_num", non_negative_int(), "int: Threads per worker; 0 (default) chooses automatically."
    )
    inter_op_parallel_num = Checked(
        "cpu_inter_op_parallel_num",
        non_negative_int(),
        "int: Operators run in parallel; 0 (default) chooses automatically.",
    )
    thread_affinity_mode = Checked(
        "cpu_thread_affinity_mode",
        Check(_affinity_mode, ("TypeError: not an int.",)),
        "int: 0 no binding (default), 1 big cores first, 2 middle cores first; other values become 0, with a warning.",
    )
    thread_affinity_core_list = Checked(
        "cpu_thread_affinity_core_list",
        list_of(int),
        "list[int]: Cores to bind threads to; overrides the mode when non-empty. Default ``[]``.",
    )

    def __init__(self) -> None:
        self._precision_mode = "enforce_fp32"
        self._thread_num = 0
        self._inter_op_parallel_num = 0
        self._thread_affinity_mode = 0
        self._thread_affinity_core_list: list[int] = []

    def __str__(self) -> str:
        return (
            f"device_type: DeviceType.kCPU,\n"
            f"precision_mode: {self.precision_mode},\n"
            f"thread_num: {self.thread_num},\n"
            f"inter_op_parallel_num: {self.inter_op_parallel_num},\n"
            f"thread_affinity_mode: {self.thread_affinity_mode},\n"
            f"thread_affinity_core_list: {self.thread_affinity_core_list}."
        )


class _GPU:
    """GPU options."""

    precision_mode = Checked("gpu_precision_mode", one_of(_FP_MODES), _FP_MODE_DOC)
    device_id = Checked("gpu_device_id", non_negative_int(), "int: GPU index, default 0.")

    def __init__(self) -> None:
        self._precision_mode = "enforce_fp32"
        self._device_id = 0

    def __str__(self) -> str:
        return (
            f"device_type: DeviceType.kGPU,\n"
            f"precision_mode: {self.precision_mode},\n"
            f"device_id: {self.device_id},\n"
            f"rank_id: {self.rank_id},\n"
            f"group_size: {self.group_size}."
        )

    @property
    def rank_id(self) -> int:
        """int: Rank of this device in the cluster (read-only, 0)."""
        return 0

    @property
    def group_size(self) -> int:
        """int: Number of devices in the cluster (read-only, 1)."""
        return 1


class _Ascend:
    """Ascend options."""

    precision_mode = Checked(
        "ascend_precision_mode", one_of(_ASCEND_MODES), 'str: Precision mode; default ``""`` (unset).'
    )
    device_id = Checked("ascend_device_id", non_negative_int(), "int: Device index, default 0.")
    rank_id = Checked("ascend_rank_id", non_negative_int(), "int: Rank of this device in the cluster, default 0.")
    provider = Checked(
        "ascend_provider",
        instance_of(str),
        'str: ``""`` (default) or ``"ge"``; not checked further, as in MindSpore Lite.',
    )

    def __init__(self) -> None:
        self._precision_mode = ""
        self._device_id = 0
        self._rank_id = 0
        self._provider = ""

    def __str__(self) -> str:
        # The missing line breaks are MindSpore Lite's.
        return (
            f"device_type: DeviceType.kAscend,\n"
            f"precision_mode: {self.precision_mode},\n"
            f"device_id: {self.device_id}."
            f"provider: {self.provider}."
            f"rank_id: {self.rank_id}."
        )


def _device_ids(arg_name: str, value: Any) -> list[int]:
    check_list_of_element(arg_name, value, int)
    if any(d < 0 for d in value):
        raise ValueError("Set parallel failed, device_ids contain a negative number.")
    return list(value)


class _Parallel:
    """ModelParallelRunner options (MindSpore Lite's RunnerConfig)."""

    workers_num = Checked(
        "workers_num",
        non_negative_int("Set parallel failed, workers_num must be a non-negative int."),
        "int: Number of workers; 0 (default) chooses automatically.",
    )
    device_ids = Checked(
        "device_ids",
        Check(_device_ids, ("TypeError: not a list of int.", "ValueError: an id is negative.")),
        "list[int]: Worker i uses ``device_ids[i % len(device_ids)]``. Default ``[]``.",
    )

    def __init__(self) -> None:
        self._workers_num = 0
        self._config_info: dict[str, dict[str, str]] = {}
        self._config_path = ""
        self._device_ids: list[int] = []

    def __str__(self) -> str:
        return f"workers num: {self.workers_num},\nconfig info: {self.config_info},\nconfig file: {self.config_path}."

    @property
    def config_info(self) -> str:
        """Options by section. Set a ``dict[str, dict[str, str]]``; reads back as a string.

        The string is ``"section: key value"`` lines in sorted order, as MindSpore Lite prints
        it. Setting replaces the sections given and keeps the others.

        Raises:
            TypeError: any level of the dict has the wrong type.
        """
        lines = []
        for section in sorted(self._config_info):
            entries = sorted(self._config_info[section].items())
            lines.append(f"{section}: " + "".join(f"{k} {v}\n" for k, v in entries))
        return "".join(lines).rstrip("\n")

    @config_info.setter
    def config_info(self, config_info: dict[str, dict[str, str]]) -> None:
        check_isinstance("config_info", config_info, dict)
        for key, value in config_info.items():
            check_isinstance("config_info_key", key, str)
            check_isinstance("config_info_value", value, dict)
            for v_key, v_value in value.items():
                check_isinstance("config_info_value_key", v_key, str)
                check_isinstance("config_info_value_value", v_value, str)
        for key, value in config_info.items():
            if len(self._config_info) > _MAX_SECTIONS:
                _LOG.error("config_info has over %d sections, section %s ignored.", _MAX_SECTIONS, key)
            elif len(value) > _MAX_SECTION_ENTRIES:
                _LOG.error("config_info section %s has over %d entries, ignored.", key, _MAX_SECTION_ENTRIES)
            else:
                self._config_info[key] = dict(value)

    @property
    def config_path(self) -> str:
        """str: Path of an INI-like config file; setting ``""`` is ignored. Default ``""``.

        Raises:
            TypeError: not a str.
            ValueError: the file does not exist.
        """
        return self._config_path

    @config_path.setter
    def config_path(self, config_path: str) -> None:
        check_isinstance("config_path", config_path, str)
        if config_path != "":
            if not os.path.exists(config_path):
                raise ValueError(missing_file("Set parallel failed", "config_path", config_path))
            self._config_path = config_path


def _targets(arg_name: str, value: Any) -> list[str]:
    value = ["cpu"] if not value else value
    check_list_of_element(arg_name, value, str)
    for element in value:
        if element.lower() not in _TARGETS:
            raise ValueError(f"target elements must be in ['cpu', 'gpu', 'ascend'], but got {element.lower()}.")
    return [element.lower() for element in value]


def _server_url(arg_name: str, value: Any) -> str | None:
    check_isinstance(arg_name, value, str, True)
    if value is not None and not value.startswith(tuple(_URL_SCHEMES)):
        raise ValueError(f"server_url must start with one of {_URL_SCHEMES}, but got {value}.")
    return value


class Context:
    """Options used to build a Model or ModelParallelRunner.

    Attributes:
        cpu: CPU options (``thread_num``, ``inter_op_parallel_num``, ``thread_affinity_mode``,
            ``thread_affinity_core_list``, ``precision_mode``).
        gpu: GPU options (``device_id``, ``precision_mode``, read-only ``rank_id``/``group_size``).
        ascend: Ascend options (``device_id``, ``rank_id``, ``provider``, ``precision_mode``).
        parallel: ModelParallelRunner options (``workers_num``, ``config_info``, ``config_path``,
            ``device_ids``).
    """

    target = Checked(
        "target",
        Check(
            _targets,
            ("TypeError: not a list, or an element is not a str.", "ValueError: an element is not a known device."),
        ),
        'list[str]: Devices in order of preference, among "cpu", "gpu", "ascend".\n\n'
        'Case-insensitive, stored lower-case; an empty (or falsy) value means ``["cpu"]``.',
    )
    group_info_file = Checked(
        "group_info_file", instance_of(str), 'str: Communication group file for distributed inference. Default ``""``.'
    )
    server_url = Checked(
        "server_url",
        Check(
            _server_url,
            (
                "TypeError: neither a str nor None.",
                "ValueError: the URL does not start with grpc://, http:// or https://.",
            ),
        ),
        'Optional[str]: Triton server to use, e.g. ``"grpc://127.0.0.1:8001"``. Default ``None``.',
    )

    def __init__(self) -> None:
        self.cpu = _CPU()
        self.gpu = _GPU()
        self.ascend = _Ascend()
        self.parallel = _Parallel()
        self._group_info_file = ""
        self._server_url: str | None = None
        self._target: list[str] = ["cpu"]

    def __str__(self) -> str:
        return f"target: {self.target}."

    def _warn_unused_settings(self) -> None:
        """Log once per process each setting that a build accepts but that does nothing on this server."""
        unused = []
        if self._group_info_file:
            unused.append("group_info_file: distributed (pipeline) inference is not served; the file is not read")
        if self._target[0] == "cpu" and self.cpu.precision_mode == "preferred_fp16":
            unused.append("cpu.precision_mode 'preferred_fp16': CPU workers compute in the model's own types")
        for message in unused:
            if message not in _WARNED:
                _WARNED.add(message)
                _LOG.warning("%s (setting has no effect on this server)", message)
