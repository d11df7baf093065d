"""Client-side planning and translation: _model_config, _transport (error mapping) and _remote (no server)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import onnx
import pytest
import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

from mslite_contract.protocol import DEADLINE_PASSED
from mslite_triton._model_config import (
    WorkerPlan,
    build_model_config,
    default_thread_num,
    merge_sections,
    parse_config_file,
    plan_workers,
)
from mslite_triton._remote import detect_format, model_name, read_model_files
from mslite_triton._transport import RETRYABLE, Transport, classify, clean_message
from mslite_triton.context import Context
from mslite_triton.errors import (
    ExecutionTimeoutError,
    InferenceError,
    InvalidInputError,
    ModelLoadError,
    MSLiteError,
    NotFoundError,
    PermissionDeniedError,
    ServerUnavailableError,
    ServiceDenyError,
)
from tests.support import model_zoo as zoo

URL = "grpc://127.0.0.1:8001"


def _context(*, workers: int = 0, threads: int = 0, mode: int = 0, cores: list[int] | None = None) -> Context:
    context = Context()
    context.parallel.workers_num = workers
    context.cpu.thread_num = threads
    context.cpu.thread_affinity_mode = mode
    if cores is not None:
        context.cpu.thread_affinity_core_list = cores
    return context


# --- plan_workers -----------------------------------------------------------------------------


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (3, 1), (8, 4), (16, 8), (17, 8), (32, 8), (96, 8)])
def test_default_thread_num(cores: int, threads: int) -> None:
    assert default_thread_num(cores) == threads


@pytest.mark.parametrize(("cores", "workers", "threads"), [(2, 2, 1), (32, 4, 8), (16, 2, 8), (1, 1, 1)])
def test_defaults(cores: int, workers: int, threads: int) -> None:
    assert plan_workers(_context(), cores=cores) == WorkerPlan(
        workers=workers, thread_num=threads, inter_op_parallel_num=1
    )


@pytest.mark.parametrize(
    ("cores", "workers", "threads"), [(32, 2, 8), (32, 4, 8), (32, 8, 4), (32, 5, 6), (2, 1, 1), (2, 2, 1)]
)
def test_workers_given_with_thread_num_zero(cores: int, workers: int, threads: int) -> None:
    plan = plan_workers(_context(workers=workers), cores=cores)
    assert (plan.workers, plan.thread_num) == (workers, threads)


def test_workers_num_argument_overrides_the_context() -> None:
    plan = plan_workers(_context(workers=6), cores=8, workers_num=1)
    assert (plan.workers, plan.thread_num) == (1, 4)


def test_thread_num_given_sets_the_default_worker_count() -> None:
    assert plan_workers(_context(threads=2), cores=8) == WorkerPlan(4, 2, 1)
    assert plan_workers(_context(threads=3, workers=5), cores=8) == WorkerPlan(5, 3, 1)


def test_inter_op_parallel_num_is_passed_through() -> None:
    context = _context()
    context.cpu.inter_op_parallel_num = 3
    assert plan_workers(context, cores=8).inter_op_parallel_num == 3


def test_too_many_workers() -> None:
    assert plan_workers(_context(workers=10), cores=2).workers == 10
    with pytest.raises(RuntimeError, match="worker num 11 is invalid"):
        plan_workers(_context(workers=11), cores=2)
    with pytest.raises(RuntimeError, match="worker num 11"):
        plan_workers(_context(), cores=2, workers_num=11)


def test_more_threads_than_cores_cannot_be_bound() -> None:
    with pytest.raises(RuntimeError, match="thread num more than core num, can not bind cpu core"):
        plan_workers(_context(threads=3, mode=1), cores=2)
    with pytest.raises(RuntimeError, match="can not bind cpu core"):
        plan_workers(_context(threads=3, cores=[0, 1, 0]), cores=2)
    assert plan_workers(_context(threads=2, mode=1), cores=2).thread_num == 2


def test_more_threads_than_cores_without_binding() -> None:
    assert plan_workers(_context(threads=4, workers=1), cores=2).thread_num == 4
    # More than 5 x the cores is cut down to 5 x the cores, as MindSpore Lite does.
    assert plan_workers(_context(threads=11, workers=1), cores=2).thread_num == 10


# --- build_model_config -----------------------------------------------------------------------


def _params(config: dict[str, Any]) -> dict[str, str]:
    return {k: v["string_value"] for k, v in config["parameters"].items()}


def test_cpu_config() -> None:
    context = _context(mode=1, cores=[0, 1, 2, 3])
    context.cpu.precision_mode = "preferred_fp16"
    config = build_model_config("net_abc", context, WorkerPlan(2, 2, 1))
    assert config["name"] == "net_abc" and config["backend"] == "mslite"
    assert config["instance_group"] == [{"kind": "KIND_CPU", "count": 1}, {"kind": "KIND_CPU", "count": 1}]
    assert "default_queue_policy" not in config["dynamic_batching"]  # no queue bound unless asked for
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 0
    assert _params(config) == {
        "thread_num": "2",
        "inter_op_parallel_num": "1",
        "thread_affinity_mode": "1",
        "precision_mode": "preferred_fp16",
        "thread_affinity_core_list": "0,1,2,3",
    }
    # Inputs, outputs and max_batch_size come from the backend's auto-complete.
    assert not {"input", "output", "max_batch_size"} & config.keys()


def test_cpu_config_without_core_list_and_with_sections() -> None:
    sections = {"common_context": {"enable_parallel": "false"}, "weight": {"weight_path": "w"}}
    params = _params(build_model_config("n", _context(), WorkerPlan(1, 4, 2), sections=sections))
    assert "thread_affinity_core_list" not in params
    assert params["thread_num"] == "4" and params["inter_op_parallel_num"] == "2"
    assert params["common_context.enable_parallel"] == "false"
    assert params["weight.weight_path"] == "w"


def test_gpu_config_assigns_device_ids_round_robin() -> None:
    context = _context()
    context.target = ["gpu"]
    context.parallel.device_ids = [0, 1]
    context.gpu.precision_mode = "preferred_fp16"
    config = build_model_config("n", context, WorkerPlan(3, 1, 1))
    assert config["instance_group"] == [
        {"kind": "KIND_GPU", "count": 1, "gpus": [0]},
        {"kind": "KIND_GPU", "count": 1, "gpus": [1]},
        {"kind": "KIND_GPU", "count": 1, "gpus": [0]},
    ]
    assert _params(config)["precision_mode"] == "preferred_fp16"


def test_gpu_config_without_device_ids_uses_the_gpu_device_id() -> None:
    context = _context()
    context.target = ["gpu", "cpu"]
    context.gpu.device_id = 2
    groups = build_model_config("n", context, WorkerPlan(2, 1, 1))["instance_group"]
    assert groups == [{"kind": "KIND_GPU", "count": 1, "gpus": [2]}] * 2


def test_ascend_maps_to_model_kind_workers_with_device_ids() -> None:
    context = _context()
    context.target = ["ascend"]
    context.ascend.provider = "ge"
    context.ascend.precision_mode = "preferred_fp32"
    context.parallel.device_ids = [4, 5]
    config = build_model_config("n", context, WorkerPlan(3, 1, 1))
    assert config["instance_group"] == [{"kind": "KIND_MODEL", "count": 1}] * 3
    params = {k: v["string_value"] for k, v in config["parameters"].items()}
    assert params["ascend_device_ids"] == "4,5,4"  # worker i on device_ids[i % len]
    assert params["ascend_provider"] == "ge"
    assert params["ascend_precision_mode"] == "preferred_fp32"


def test_ascend_without_device_ids_uses_the_ascend_device_id() -> None:
    context = _context()
    context.target = ["ascend"]
    context.ascend.device_id = 3
    config = build_model_config("n", context, WorkerPlan(2, 1, 1))
    assert config["parameters"]["ascend_device_ids"]["string_value"] == "3,3"


# --- parse_config_file / merge_sections -------------------------------------------------------


def test_parse_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.ini"
    path.write_text(
        "\n".join(
            [
                "orphan=before any section",
                "# [commented]",
                "   [common_context]   ",
                "  key1 =  value1  ",
                "key1=second wins not",
                "  # key2=commented",
                "k=",  # 2 characters: skipped
                "ab",
                "a=b",
                "eq = x=y=z",
                "no equals sign here",
                "[ second ]",
                "x=1",
                "[common_context]",
                "key3=3",
                "key1=third",
                "[]",
            ]
        ),
        encoding="utf-8",
    )
    assert parse_config_file(str(path)) == {
        "common_context": {"key1": "value1", "a": "b", "eq": "x=y=z", "key3": "3"},
        "second": {"x": "1"},
    }


def test_parse_empty_config_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.ini"
    path.write_text("\n\n# nothing\n", encoding="utf-8")
    assert parse_config_file(str(path)) == {}


def test_merge_sections_later_layers_win_key_by_key() -> None:
    from_file = {"a": {"x": "1", "y": "1"}, "b": {"z": "1"}}
    from_dict = {"a": {"y": "2"}, "c": {"w": "2"}}
    merged = merge_sections(from_file, None, from_dict)
    assert merged == {"a": {"x": "1", "y": "2"}, "b": {"z": "1"}, "c": {"w": "2"}}
    assert from_file == {"a": {"x": "1", "y": "1"}, "b": {"z": "1"}}  # inputs untouched
    assert merge_sections() == {} and merge_sections(None) == {}


# --- _transport: classify / clean_message -----------------------------------------------------


def _classify(message: str, status: str | None, **kw: Any) -> MSLiteError:
    return classify(InferenceServerException(message, status), URL, **kw)


@pytest.mark.parametrize("status", ["StatusCode.UNAVAILABLE", "503"])
def test_queue_full_is_service_deny(status: str) -> None:
    error = _classify("Exceeds maximum queue size", status)
    assert type(error) is ServiceDenyError
    assert isinstance(error, RuntimeError)
    assert error.status == "kLiteServiceDeny" and error.code == -11
    assert "Exceeds maximum queue size" in str(error)


@pytest.mark.parametrize("status", ["StatusCode.INVALID_ARGUMENT", "400"])
def test_invalid_argument_is_invalid_input(status: str) -> None:
    text = "[request id: <id_unknown>] model 'm', input 'a': shape expected [-1, 3], got [2, 4]"
    error = _classify(text, status)
    assert type(error) is InvalidInputError
    assert isinstance(error, ValueError)
    assert str(error) == "model 'm', input 'a': shape expected [-1, 3], got [2, 4]"


@pytest.mark.parametrize("status", ["StatusCode.INTERNAL", "500"])
def test_a_request_past_the_models_execute_deadline_is_a_timeout_not_retried(status: str) -> None:
    text = (
        f"model 'spin': the request {DEADLINE_PASSED} (execute_deadline_s 3 s); the worker running it was ended "
        "and is replaced"
    )
    error = _classify(text, status)
    assert type(error) is ExecutionTimeoutError and error.status == "kLiteTimeout"
    assert not isinstance(error, RETRYABLE) and "execute_deadline_s 3 s" in str(error)


@pytest.mark.parametrize("status", ["StatusCode.PERMISSION_DENIED", "403"])
def test_forbidden_is_permission_denied(status: str) -> None:
    error = _classify("explicit model load / unload is not allowed if polling is enabled", status)
    assert type(error) is PermissionDeniedError and isinstance(error, RuntimeError)


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("Request for unknown model: 'nope' is not found", "StatusCode.NOT_FOUND"),
        ("Request for unknown model: 'nope' is not found", "400"),
        ("Request for unknown model: 'nope' has no available versions", "StatusCode.UNAVAILABLE"),
        ("whatever", "404"),
    ],
)
def test_unknown_model_is_not_found(message: str, status: str) -> None:
    assert type(_classify(message, status)) is NotFoundError


@pytest.mark.parametrize(
    ("message", "status"),
    [
        (
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused",
            "StatusCode.UNAVAILABLE",
        ),
        ("[Errno 111] Connection refused", None),
        ("timed out", None),
    ],
)
def test_connection_refused_is_server_unavailable_naming_the_url(message: str, status: str | None) -> None:
    error = _classify(message, status)
    assert type(error) is ServerUnavailableError and isinstance(error, RuntimeError)
    assert URL in str(error) and error.url == URL


def test_other_errors_use_the_default() -> None:
    assert type(_classify("inference failed: boom", "StatusCode.INTERNAL")) is InferenceError
    assert type(_classify("boom", "500", default=ModelLoadError)) is ModelLoadError


LOAD_ERROR = (  # as the real server sends it (gRPC and HTTP alike)
    "load failed for model 'net_0123': version 1 is at UNAVAILABLE state: Internal: TritonModelException: "
    "model 'net_0123': model file 'model.onnx' is not a valid ONNX model (DecodeError)\n\nAt:\n"
    "  /tmp/x/backends/mslite/model.py(40): initialize\n;\n"
)


def test_load_error_traceback_and_paths_are_stripped() -> None:
    message = clean_message(LOAD_ERROR)
    assert message.startswith("load failed for model 'net_0123'")
    assert message.endswith("(DecodeError)")
    assert "At:" not in message and "/tmp/x" not in message and "model.py" not in message
    error = _classify(LOAD_ERROR, "StatusCode.INTERNAL", default=ModelLoadError)
    assert "At:" not in str(error) and "/tmp/x" not in str(error)


class _FakeLoader:
    def __init__(self, error: InferenceServerException) -> None:
        self.error = error

    def load_model(self, name: str, **kw: Any) -> None:
        raise self.error

    def close(self) -> None:
        pass


def _fake_clients(monkeypatch: pytest.MonkeyPatch, url: str, make: Any) -> list[Any]:
    """tritonclient's clients for `url`'s protocol replaced by `make()`; the list of those made so far."""
    made: list[Any] = []

    def client(*args: Any, **kwargs: Any) -> Any:
        made.append(make())
        return made[-1]

    module = tritonclient.grpc if url.startswith("grpc") else tritonclient.http
    monkeypatch.setattr(module, "InferenceServerClient", client)
    return made


@pytest.mark.parametrize(("url", "status"), [("grpc://h:1", "StatusCode.INVALID_ARGUMENT"), ("http://h:1", "400")])
def test_load_failure_is_a_model_load_error(monkeypatch: pytest.MonkeyPatch, url: str, status: str) -> None:
    # Triton answers a failed load with INVALID_ARG (gRPC INVALID_ARGUMENT, HTTP 400), the status of a bad
    # inference input too; a build must still fail with a RuntimeError, as in MindSpore Lite.
    _fake_clients(monkeypatch, url, lambda: _FakeLoader(InferenceServerException(LOAD_ERROR, status)))
    transport = Transport(url)
    with pytest.raises(ModelLoadError) as exc:
        transport.load_model("net_0123", {"backend": "mslite"}, {"file:1/model.onnx": b"\x08"})
    assert type(exc.value) is ModelLoadError and isinstance(exc.value, RuntimeError)
    assert not isinstance(exc.value, ValueError)
    assert "not a valid ONNX model" in str(exc.value)
    assert "At:" not in str(exc.value) and "/tmp/x" not in str(exc.value)


def test_clean_message() -> None:
    assert clean_message("") == "" and clean_message(None) == ""  # type: ignore[arg-type]
    assert clean_message("[request id: 7] bad input") == "bad input"
    assert clean_message("cannot open /opt/models/m/1/model.onnx") == "cannot open <path>"
    assert clean_message("input 'input:0/x' is bad") == "input 'input:0/x' is bad"


def test_clean_message_keeps_tensor_names_with_slashes() -> None:
    text = "model 'm', input 'encoder/layer_0/dense:0': data type expected FP32, got INT32"
    assert clean_message(text) == text


# --- Transport --------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["ftp://x", "grpc://", "127.0.0.1:8001", ""])
def test_transport_refuses_bad_urls(url: str) -> None:
    with pytest.raises(ValueError, match="grpc://host:port"):
        Transport(url)


@pytest.mark.parametrize(
    ("url", "protocol"), [("grpc://h:8001", "grpc"), ("http://h:8000", "http"), ("https://h", "http")]
)
def test_transport_accepts_good_urls_without_connecting(url: str, protocol: str) -> None:
    with Transport(url) as transport:
        assert transport.protocol == protocol and transport.host == "h"
    transport.close()  # safe twice


class _FakeClient:
    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.closed = False

    def is_model_ready(self, name: str, headers: Any = None) -> bool:
        raise self.error

    def close(self) -> None:
        self.closed = True


def test_transport_maps_errors_and_keeps_healthy_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    unknown = InferenceServerException("Request for unknown model: 'x' is not found", "StatusCode.NOT_FOUND")
    made = _fake_clients(monkeypatch, "grpc://h:1", lambda: _FakeClient(unknown))
    transport = Transport("grpc://h:1")
    assert transport.is_model_ready("x") is False
    assert transport.is_model_ready("x") is False
    assert len(made) == 1 and not made[0].closed  # an answer, even "not found": the connection is kept, reused


def test_transport_drops_broken_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _fake_clients(monkeypatch, "http://h:1", lambda: _FakeClient(ConnectionRefusedError(111, "refused")))
    transport = Transport("http://h:1")
    with pytest.raises(ServerUnavailableError, match=re.escape("http://h:1")) as exc:
        transport.is_model_ready("x")
    assert exc.value.__cause__ is None and exc.value.__suppress_context__
    assert len(made) == 1 and made[0].closed
    with pytest.raises(ServerUnavailableError):
        transport.is_model_ready("x")
    assert len(made) == 2  # the next call connects afresh


# --- _remote ----------------------------------------------------------------------------------


def test_detect_format() -> None:
    assert detect_format(zoo.multi_io().SerializeToString()[:16]) == "onnx"
    assert detect_format(b"\x0a\x051.1.0\x12\x04MindSpore") == "mindir"
    assert detect_format(b"\x1c\x00\x00\x00MSL2\x00\x00\x00\x00") == "ms"
    assert detect_format(zoo.broken_bytes()[:16]) == "unknown"
    assert detect_format(b"") == "unknown"


def test_detect_format_onnx_from_an_mslite_producer() -> None:
    model = zoo.multi_io()
    model.producer_name = "MSLite converter"
    assert detect_format(model.SerializeToString()[:16]) == "onnx"


def test_read_model_files(tmp_path: Path) -> None:
    path = tmp_path / "net.onnx"
    onnx.save(zoo.multi_io(), str(path))
    files = read_model_files(str(path))
    assert files == {"file:1/model.onnx": path.read_bytes()}


def test_read_model_files_includes_external_data(tmp_path: Path) -> None:
    path = tmp_path / "big.onnx"
    zoo.save_with_external_data(zoo.big_weights(mb=1), path)
    files = read_model_files(str(path))
    assert set(files) == {"file:1/model.onnx", "file:1/big.onnx.data"}
    assert files["file:1/big.onnx.data"] == (tmp_path / "big.onnx.data").read_bytes()
    # The ONNX file names its weights by the original basename, which is why the .data keeps it.
    locations = {
        e.value for t in onnx.load(str(path), load_external_data=False).graph.initializer for e in t.external_data
    }
    assert "big.onnx.data" in locations


@pytest.mark.parametrize(
    ("head", "what"),
    [
        (b"\x1c\x00\x00\x00MSL2\x00\x00\x00\x00", ".ms format cannot be served"),
        (b"junk junk junk junk", "neither an ONNX nor a MindIR model"),
    ],
)
def test_read_model_files_refuses_other_formats(tmp_path: Path, head: bytes, what: str) -> None:
    path = tmp_path / "net.mindir"
    path.write_bytes(head)
    with pytest.raises(RuntimeError) as exc:
        read_model_files(str(path))
    message = str(exc.value)
    assert "kLiteNotSupport" in message and "'net.mindir'" in message and what in message
    assert str(tmp_path) not in message


def test_read_model_files_sends_mindir_for_the_server_to_convert(tmp_path: Path) -> None:
    path = tmp_path / "net.bin"
    path.write_bytes(b"\x0a\x051.1.0\x12\x04MindSpore" + bytes(8))
    assert read_model_files(str(path)) == {"file:1/model.mindir": path.read_bytes()}


def test_model_name_is_stable_and_tracks_file_and_config(tmp_path: Path) -> None:
    path = str(tmp_path / "net.onnx")
    files = {"file:1/model.onnx": zoo.multi_io().SerializeToString()}
    config = build_model_config("", _context(), WorkerPlan(2, 1, 1))
    name = model_name(path, files, config)
    assert re.fullmatch(r"net_[0-9a-f]{12}", name)
    assert model_name(path, dict(files), build_model_config("", _context(), WorkerPlan(2, 1, 1))) == name
    other_file = {"file:1/model.onnx": zoo.odd_names().SerializeToString()}
    assert model_name(path, other_file, config) != name
    with_data = {**files, "file:1/net.onnx.data": b"\x00"}
    assert model_name(path, with_data, config) != name
    assert model_name(path, files, build_model_config("", _context(), WorkerPlan(3, 1, 1))) != name


@pytest.mark.parametrize("filename", ["my model:v1.onnx", "résumé.net.onnx", ".onnx", "a" * 80 + ".onnx"])
def test_model_name_characters(tmp_path: Path, filename: str) -> None:
    name = model_name(str(tmp_path / filename), {"file:1/model.onnx": b"\x08\x08"}, {})
    assert re.fullmatch(r"[A-Za-z0-9_]+", name), name
    assert len(name) <= 40 + 1 + 12


def test_model_name_of_an_odd_file_name(tmp_path: Path) -> None:
    name = model_name(str(tmp_path / "my model:v1.onnx"), {"file:1/model.onnx": b"\x08\x08"}, {})
    assert name.startswith("my_model_v1_")


def test_free_ports_picked_together_are_distinct() -> None:
    from mslite_server.errors import ServerStartError
    from mslite_server.ports import pick_ports

    for _ in range(50):
        ports = pick_ports([("127.0.0.1", 0, "http"), ("127.0.0.1", 0, "grpc"), ("127.0.0.1", 0, "metrics")])
        assert len(set(ports)) == 3
    taken = pick_ports([("127.0.0.1", 0, "x")])[0]
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", taken))
        with pytest.raises(ServerStartError, match=f"grpc port {taken} on 127.0.0.1 is already in use"):
            pick_ports([("127.0.0.1", 0, "http"), ("127.0.0.1", taken, "grpc")])


@pytest.mark.parametrize("workers", [1, 2])
def test_queue_bound_only_when_asked_and_zero_means_none(workers: int) -> None:
    context = _context(mode=0, cores=[])
    plan = WorkerPlan(workers, 1, 1)
    assert "default_queue_policy" not in build_model_config("net", context, plan)["dynamic_batching"]
    asked = build_model_config("net", context, plan, sections={"dynamic_batching": {"max_queue_size": "8"}})
    assert asked["dynamic_batching"]["default_queue_policy"] == {"max_queue_size": 8}
    zero = build_model_config("net", context, plan, sections={"dynamic_batching": {"max_queue_size": "0"}})
    assert "default_queue_policy" not in zero["dynamic_batching"]


def test_client_and_auto_complete_share_one_batcher_rule() -> None:
    """The config the client builds has what auto-complete would fill, so the backend adds nothing to it."""
    from mslite_backend.graph import batcher_defaults as auto_complete_fill

    for target, workers in (("cpu", 1), ("cpu", 2), ("gpu", 2)):
        context = _context(mode=0, cores=[])
        context.target = [target]
        for sections in (
            {},
            {"dynamic_batching": {"max_queue_size": "0"}},
            {"dynamic_batching": {"max_queue_size": "9"}},
        ):
            for light in (False, True):
                config = build_model_config(
                    "net", context, WorkerPlan(workers, 1, 1), sections=sections, batchable=True, light=light
                )
                fill = auto_complete_fill(config, config["max_batch_size"], light=light)
                assert fill == {}, (target, workers, sections, light)
