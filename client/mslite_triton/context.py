"""Context: MindSpore Lite's build options (target devices, CPU/GPU/Ascend infos, parallel).

Pure configuration: nothing here talks to the server. Setters validate with MindSpore Lite's
exact exception types and messages; the transport turns the values into a Triton model
configuration later.
"""

from __future__ import annotations

import logging
import os

from ._checkparam import check_isinstance, check_list_of_element, check_non_negative_int, missing_file

__all__ = ["Context"]

_LOG = logging.getLogger(__name__)

_TARGETS = ["cpu", "gpu", "ascend"]
_FP_MODES = ["enforce_fp32", "preferred_fp16"]
_ASCEND_MODES = ["enforce_fp32", "preferred_fp32", "enforce_fp16", "enforce_origin", "preferred_optimal"]
_URL_SCHEMES = ["grpc://", "http://", "https://"]
# RunnerConfig::SetConfigInfo limits: past these a section is dropped with an error log.
_MAX_SECTIONS = 100
_MAX_SECTION_ENTRIES = 1000
_WARNED: set[str] = set()  # settings already reported as having no effect (once per process)


class _CPU:
    """CPU options. Thread settings are shared by all devices of the Context, as natively."""

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

    @property
    def precision_mode(self) -> str:
        """str: ``"enforce_fp32"`` (default) or ``"preferred_fp16"``.

        Raises:
            TypeError: not a str.
            ValueError: not one of the two modes.
        """
        return self._precision_mode

    @precision_mode.setter
    def precision_mode(self, cpu_precision_mode: str) -> None:
        check_isinstance("cpu_precision_mode", cpu_precision_mode, str)
        if cpu_precision_mode not in _FP_MODES:
            raise ValueError(
                f"cpu_precision_mode must be in [enforce_fp32, preferred_fp16], but got {cpu_precision_mode}."
            )
        self._precision_mode = cpu_precision_mode

    @property
    def thread_num(self) -> int:
        """int: Threads per worker; 0 (default) chooses automatically.

        Raises:
            TypeError: not an int.
            ValueError: negative.
        """
        return self._thread_num

    @thread_num.setter
    def thread_num(self, cpu_thread_num: int) -> None:
        self._thread_num = check_non_negative_int("cpu_thread_num", cpu_thread_num)

    @property
    def inter_op_parallel_num(self) -> int:
        """int: Operators run in parallel; 0 (default) chooses automatically.

        Raises:
            TypeError: not an int.
            ValueError: negative.
        """
        return self._inter_op_parallel_num

    @inter_op_parallel_num.setter
    def inter_op_parallel_num(self, cpu_inter_op_parallel_num: int) -> None:
        self._inter_op_parallel_num = check_non_negative_int("cpu_inter_op_parallel_num", cpu_inter_op_parallel_num)

    @property
    def thread_affinity_mode(self) -> int:
        """int: 0 no binding (default), 1 big cores first, 2 middle cores first.

        Other values become 0 with a warning, as in MindSpore Lite's native Context.

        Raises:
            TypeError: not an int.
        """
        return self._thread_affinity_mode

    @thread_affinity_mode.setter
    def thread_affinity_mode(self, cpu_thread_affinity_mode: int) -> None:
        check_isinstance("cpu_thread_affinity_mode", cpu_thread_affinity_mode, int)
        if cpu_thread_affinity_mode not in (0, 1, 2):
            _LOG.warning("Invalid thread affinity mode %s, changed to 0 (no bind).", cpu_thread_affinity_mode)
            cpu_thread_affinity_mode = 0
        self._thread_affinity_mode = int(cpu_thread_affinity_mode)

    @property
    def thread_affinity_core_list(self) -> list[int]:
        """list[int]: Cores to bind threads to; overrides the mode when non-empty. Default ``[]``.

        Raises:
            TypeError: not a list of int.
        """
        return list(self._thread_affinity_core_list)

    @thread_affinity_core_list.setter
    def thread_affinity_core_list(self, cpu_thread_affinity_core_list: list[int]) -> None:
        check_list_of_element("cpu_thread_affinity_core_list", cpu_thread_affinity_core_list, int)
        self._thread_affinity_core_list = list(cpu_thread_affinity_core_list)


class _GPU:
    """GPU options."""

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
    def precision_mode(self) -> str:
        """str: ``"enforce_fp32"`` (default) or ``"preferred_fp16"``.

        Raises:
            TypeError: not a str.
            ValueError: not one of the two modes.
        """
        return self._precision_mode

    @precision_mode.setter
    def precision_mode(self, gpu_precision_mode: str) -> None:
        check_isinstance("gpu_precision_mode", gpu_precision_mode, str)
        if gpu_precision_mode not in _FP_MODES:
            raise ValueError(
                f"gpu_precision_mode must be in [enforce_fp32, preferred_fp16], but got {gpu_precision_mode}."
            )
        self._precision_mode = gpu_precision_mode

    @property
    def device_id(self) -> int:
        """int: GPU index, default 0.

        Raises:
            TypeError: not an int.
            ValueError: negative.
        """
        return self._device_id

    @device_id.setter
    def device_id(self, gpu_device_id: int) -> None:
        self._device_id = check_non_negative_int("gpu_device_id", gpu_device_id)

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

    @property
    def precision_mode(self) -> str:
        """str: One of enforce_fp32, preferred_fp32, enforce_fp16, enforce_origin, preferred_optimal.

        Default ``""`` (unset).

        Raises:
            TypeError: not a str.
            ValueError: not one of the five modes.
        """
        return self._precision_mode

    @precision_mode.setter
    def precision_mode(self, ascend_precision_mode: str) -> None:
        check_isinstance("ascend_precision_mode", ascend_precision_mode, str)
        if ascend_precision_mode not in _ASCEND_MODES:
            raise ValueError(
                f"ascend_precision_mode must be in [enforce_fp32, preferred_fp32, enforce_fp16, "
                f"enforce_origin, preferred_optimal], but got {ascend_precision_mode}."
            )
        self._precision_mode = ascend_precision_mode

    @property
    def device_id(self) -> int:
        """int: Device index, default 0.

        Raises:
            TypeError: not an int.
            ValueError: negative.
        """
        return self._device_id

    @device_id.setter
    def device_id(self, ascend_device_id: int) -> None:
        self._device_id = check_non_negative_int("ascend_device_id", ascend_device_id)

    @property
    def rank_id(self) -> int:
        """int: Rank of this device in the cluster, default 0.

        Raises:
            TypeError: not an int.
            ValueError: negative.
        """
        return self._rank_id

    @rank_id.setter
    def rank_id(self, ascend_rank_id: int) -> None:
        self._rank_id = check_non_negative_int("ascend_rank_id", ascend_rank_id)

    @property
    def provider(self) -> str:
        """str: ``""`` (default) or ``"ge"``; not checked further, as in MindSpore Lite.

        Raises:
            TypeError: not a str.
        """
        return self._provider

    @provider.setter
    def provider(self, ascend_provider: str) -> None:
        self._provider = check_isinstance("ascend_provider", ascend_provider, str)


class _Parallel:
    """ModelParallelRunner options (MindSpore Lite's RunnerConfig)."""

    def __init__(self) -> None:
        self._workers_num = 0
        self._config_info: dict[str, dict[str, str]] = {}
        self._config_path = ""
        self._device_ids: list[int] = []

    def __str__(self) -> str:
        return f"workers num: {self.workers_num},\nconfig info: {self.config_info},\nconfig file: {self.config_path}."

    @property
    def workers_num(self) -> int:
        """int: Number of workers; 0 (default) chooses automatically.

        Raises:
            TypeError: not an int.
            ValueError: negative.
        """
        return self._workers_num

    @workers_num.setter
    def workers_num(self, workers_num: int) -> None:
        self._workers_num = check_non_negative_int(
            "workers_num", workers_num, "Set parallel failed, workers_num must be a non-negative int."
        )

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

    @property
    def device_ids(self) -> list[int]:
        """list[int]: Worker i uses ``device_ids[i % len(device_ids)]``. Default ``[]``.

        Raises:
            TypeError: not a list of int.
            ValueError: an id is negative.
        """
        return list(self._device_ids)

    @device_ids.setter
    def device_ids(self, device_ids: list[int]) -> None:
        check_list_of_element("device_ids", device_ids, int)
        if any(d < 0 for d in device_ids):
            raise ValueError("Set parallel failed, device_ids contain a negative number.")
        self._device_ids = list(device_ids)


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

    @property
    def target(self) -> list[str]:
        """list[str]: Devices in order of preference, among "cpu", "gpu", "ascend".

        Case-insensitive, stored lower-case; an empty (or falsy) value means ``["cpu"]``.

        Raises:
            TypeError: not a list, or an element is not a str.
            ValueError: an element is not a known device.
        """
        return list(self._target)

    @target.setter
    def target(self, target: list[str]) -> None:
        target = ["cpu"] if not target else target
        check_list_of_element("target", target, str)
        for element in target:
            if element.lower() not in _TARGETS:
                raise ValueError(f"target elements must be in ['cpu', 'gpu', 'ascend'], but got {element.lower()}.")
        self._target = [element.lower() for element in target]

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

    @property
    def group_info_file(self) -> str:
        """str: Communication group file for distributed inference. Default ``""``.

        Raises:
            TypeError: not a str.
        """
        return self._group_info_file

    @group_info_file.setter
    def group_info_file(self, group_info_file: str) -> None:
        self._group_info_file = check_isinstance("group_info_file", group_info_file, str)

    @property
    def server_url(self) -> str | None:
        """Optional[str]: Triton server to use, e.g. ``"grpc://127.0.0.1:8001"``. Default ``None``.

        Raises:
            TypeError: neither a str nor None.
            ValueError: the URL does not start with grpc://, http:// or https://.
        """
        return self._server_url

    @server_url.setter
    def server_url(self, server_url: str | None) -> None:
        check_isinstance("server_url", server_url, str, True)
        if server_url is not None and not server_url.startswith(tuple(_URL_SCHEMES)):
            raise ValueError(f"server_url must start with one of {_URL_SCHEMES}, but got {server_url}.")
        self._server_url = server_url
