"""Bad input: 11,000 seeded malformed requests over HTTP and gRPC against the session server (~15 s).

The generator, the bar and the known gaps of Triton 2.51 live in `tests/support/badinput/`.

Every test runs twice: against Triton 2.51's own frontends (`triton`: the session server) and against a
server fronted by the validating gateway (`gateway`: `ServerConfig(gateway=True)`, the `mslite_gateway` package).
The bar is asserted in full by `test_every_malformed_request_meets_the_bar`: it holds through the gateway,
and is a strict xfail on Triton's own frontends, whose gaps are listed in `KNOWN_GAPS`;
`test_no_violation_beyond_the_known_gaps` keeps anything new from slipping in there.
Oversized bodies and the JSON request that aborts Triton 2.51 are sent to a scratch server of this module,
so the session server keeps its memory and its life.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from mslite_server import LocalServer, ServerConfig
from tests.support.badinput.bar import Outcome, Tally
from tests.support.badinput.cases import GRPC_CATEGORIES, HTTP_CATEGORIES, Case, CaseGenerator
from tests.support.badinput.encoding import HttpRequest, grpc_request, http_binary, http_json, make_tensor
from tests.support.badinput.memory import process_tree, tree_rss_kb
from tests.support.badinput.models import fetch_specs
from tests.support.badinput.sending import Sender, crash_probe, run_cases
from tests.support.server_checks import assert_never_healed, dead_workers, health_marks, log_alarms

pytestmark = pytest.mark.integration

SEED = 7
CASES = 11_000  # even indexes HTTP, odd gRPC; ~3 % are valid NaN/Inf requests
WARMUP = 300


KINDS = ("triton", "gateway")


@pytest.fixture(scope="module", params=KINDS)
def kind(request) -> str:
    """Which front the module's tests talk to: Triton's own, or the gateway's."""
    return request.param


@pytest.fixture(scope="module")
def gateway_server(repository):
    with LocalServer(ServerConfig(model_repository=repository, startup_timeout_s=240, gateway=True)) as srv:
        yield srv
        assert_never_healed(srv)


@pytest.fixture(scope="module")
def target(kind, request) -> LocalServer:
    return request.getfixturevalue("server" if kind == "triton" else "gateway_server")


def _xfail_on_triton(request, kind: str, reason: str) -> None:
    if kind == "triton":
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def _rss_kb(srv: LocalServer) -> dict[int, int]:
    """The server and its workers, and the gateway process when there is one."""
    rss = tree_rss_kb(srv.process.pid)
    if srv.gateway is not None:
        rss.update(tree_rss_kb(srv.gateway.pid))
    return rss


@dataclass
class Campaign:
    tally: Tally
    rss_before: dict[int, int]
    rss_after: dict[int, int]
    workers_before: list[int]
    log: str


@pytest.fixture(scope="module")
def campaign(target) -> Campaign:
    server = target
    gen = CaseGenerator(fetch_specs(server.http_url), SEED)
    log_start = server.log_path.stat().st_size
    warm = run_cases((gen.valid(i) for i in range(WARMUP)), server.http_url, server.grpc_url)
    assert not warm.violations, warm.report()
    pid = server.process.pid
    workers = sorted(process_tree(pid))
    before = _rss_kb(server)
    tally = run_cases(gen.cases(range(CASES)), server.http_url, server.grpc_url, threads=4)
    after = _rss_kb(server)
    with open(server.log_path, errors="replace") as f:
        f.seek(log_start)
        log = f.read()
    return Campaign(tally, before, after, workers, log)


def test_campaign_covers_every_category_on_both_protocols(campaign):
    t = campaign.tally
    assert t.malformed() >= 10_000
    assert t.malformed("http") >= 4_500 and t.malformed("grpc") >= 4_500
    for protocol, categories in (("http", HTTP_CATEGORIES), ("grpc", GRPC_CATEGORIES)):
        for category in (*categories, "valid_nan_inf"):
            assert t.count(protocol, category) >= 20, (protocol, category, t.table())


def test_nan_and_inf_are_served_with_the_right_values(campaign):
    t = campaign.tally
    assert t.count("http", "valid_nan_inf") > 50 and t.count("grpc", "valid_nan_inf") > 50
    wrong = {k: n for k, n in t.violations.items() if k[2] == "valid_nan_inf"}
    assert not wrong, t.report()


def test_no_violation_beyond_the_known_gaps(campaign):
    """Every miss of the bar is one of KNOWN_GAPS (Triton 2.51's frontends); BOOL bytes other than 0/1 are not one."""
    assert not campaign.tally.new_violations(), campaign.tally.report(only_new=True)


def test_every_malformed_request_meets_the_bar(campaign, kind, request):
    """4xx-class answer naming the problem, no path or traceback, for every malformed request; 0 server errors."""
    _xfail_on_triton(
        request,
        kind,
        "Triton 2.51 frontends: HTTP 500 for unparsable bodies, closed connections for bad HTTP framing, gRPC "
        "INTERNAL for unparsable protobuf, batch dims read modulo 2^32, lenient gRPC versions "
        "(see KNOWN_GAPS in tests/support/badinput/bar.py)",
    )
    assert not campaign.tally.violations, campaign.tally.report()


def test_no_path_or_traceback_in_any_message(campaign):
    """Whatever the status: a 500 (or a served answer) carrying a path leaks as much as a 400 does."""
    t = campaign.tally
    samples = [f"case {o.case.index} ({o.case.what}) -> {o.status} {o.message[:300]!r}" for o in t.leak_samples]
    assert not t.leaks, (dict(t.leaks), samples)


def test_no_backend_error_or_crash_in_the_log(campaign):
    assert not log_alarms(campaign.log)


def test_server_serves_correct_results_afterwards(target, campaign):
    server = target
    assert server.is_running()
    assert sorted(process_tree(server.process.pid)) == campaign.workers_before, (
        f"a worker died or was replaced: {health_marks(server)[1]} {dead_workers(server)}"  # how it ended
    )
    rng = np.random.default_rng(SEED)
    for protocol in ("http", "grpc"):
        mod = httpclient if protocol == "http" else grpcclient
        url = (server.http_url if protocol == "http" else server.grpc_url).split("://", 1)[1]
        client = mod.InferenceServerClient(url)
        try:
            for batch in (1, 2, 7, 64):
                x = rng.standard_normal((batch, 4), dtype=np.float32)
                item = mod.InferInput("x", list(x.shape), "FP32")
                item.set_data_from_numpy(x)
                y = client.infer("tiny", [item]).as_numpy("y")
                np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(1))
            a, b = rng.standard_normal((2, 3, 3), dtype=np.float32)
            inputs = [mod.InferInput(n, [3, 3], "FP32") for n in ("a", "b")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer("multi_io", inputs)
            np.testing.assert_array_equal(result.as_numpy("sum"), a + b)
            np.testing.assert_array_equal(result.as_numpy("prod"), a * b)
        finally:
            client.close()


def test_rss_of_server_and_workers_grows_under_10_percent(campaign):
    before, after = sum(campaign.rss_before.values()), sum(campaign.rss_after.values())
    print(f"RSS server + {len(campaign.rss_before) - 1} workers: {before / 1024:.0f} -> {after / 1024:.0f} MiB")
    assert after < before * 1.10, (campaign.rss_before, campaign.rss_after)


# -- oversized bodies and the crash, on a scratch server -----------------------------------------------------------
@pytest.fixture(scope="module")
def scratch(repository, kind):
    config = ServerConfig(model_repository=repository, load_models=("tiny", "variable_seq"), gateway=kind == "gateway")
    with LocalServer(config) as srv:
        yield srv


def _shm_mib(srv: LocalServer) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(f"/dev/shm/{srv.workspace.shm_prefix}*")) >> 20


def _oversized_cases() -> dict[str, Case]:
    """64 MiB bodies, two of them well-formed; the JSON one makes Triton allocate the 64 MiB it declares."""
    mib64 = 64 << 20
    tiny = make_tensor("x", "FP32", [64, 4], np.zeros(256, np.float32))
    tiny.data = bytes(mib64)
    seq = make_tensor("tokens", "FP32", [1, mib64 // 4], np.zeros(mib64 // 4, np.float32))
    declared = make_tensor("tokens", "FP32", [1, mib64 // 4], np.zeros(1, np.float32))
    total = [{"name": "total"}]
    requests = {
        "HTTP tiny [64,4] with 64 MiB binary": ("http", http_binary("tiny", [tiny])),
        "gRPC tiny [64,4] with 64 MiB raw": ("grpc", grpc_request("tiny", [tiny])),
        "HTTP variable_seq [1,16Mi], 64 MiB": ("http", http_binary("variable_seq", [seq], outputs=total)),
        "gRPC variable_seq [1,16Mi], 64 MiB": ("grpc", grpc_request("variable_seq", [seq], outputs=["total"])),
        "HTTP JSON variable_seq declares [1,16Mi], 1 value": ("http", http_json("variable_seq", [declared])),
    }
    return {name: Case(0, protocol, "oversized", "", name, request) for name, (protocol, request) in requests.items()}


@dataclass
class Oversized:
    outcomes: dict[str, Outcome]
    rss_mib: tuple[int, int]
    shm_mib: tuple[int, int]


@pytest.fixture(scope="module")
def oversized(scratch) -> Oversized:
    sender = Sender(scratch.http_url, scratch.grpc_url, timeout_s=120)
    rss0, shm0 = sum(_rss_kb(scratch).values()) >> 10, _shm_mib(scratch)
    outcomes = {}
    try:
        for name, case in _oversized_cases().items():
            outcomes[name] = sender.send(case)
            case.request = b""  # 64 MiB each: keep them out of pytest's reprs
    finally:
        sender.close()
    rss1, shm1 = sum(_rss_kb(scratch).values()) >> 10, _shm_mib(scratch)
    for name, o in outcomes.items():
        print(f"{name}: {o.status} in {o.seconds:.2f} s: {o.message[:160]!r}")
    print(f"scratch server RSS {rss0} -> {rss1} MiB, /dev/shm {shm0} -> {shm1} MiB")
    return Oversized(outcomes, (rss0, rss1), (shm0, shm1))


def test_oversized_bodies_get_an_answer_and_the_server_keeps_serving(scratch, oversized):
    for name, o in oversized.outcomes.items():
        assert o.status not in ("NO_ANSWER", "TIMEOUT"), (name, o.status)
    assert scratch.is_running()
    client = grpcclient.InferenceServerClient(scratch.grpc_url.split("://", 1)[1])
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        item = grpcclient.InferInput("x", [2, 4], "FP32")
        item.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("tiny", [item]).as_numpy("y"), x * 2 + 1)
    finally:
        client.close()


def test_oversized_bodies_are_refused_and_leave_no_memory_behind(oversized, kind, request):
    _xfail_on_triton(
        request,
        kind,
        "no size cap in Triton 2.51 or in our backend: 64 MiB inputs are served and the python backend's shm "
        "grows for good; a JSON body makes Triton allocate its declared size, then answers 500",
    )
    for name, o in oversized.outcomes.items():
        ok = (o.case.protocol == "http" and o.status.isdigit() and 400 <= int(o.status) < 500) or o.status in (
            "INVALID_ARGUMENT",
            "RESOURCE_EXHAUSTED",
            "OUT_OF_RANGE",
        )
        assert ok, f"{name}: {o.status} {o.message[:200]!r}"
    assert oversized.shm_mib[1] <= oversized.shm_mib[0], f"/dev/shm grew {oversized.shm_mib} MiB"
    assert oversized.rss_mib[1] < oversized.rss_mib[0] * 1.10, f"RSS grew {oversized.rss_mib} MiB"


def test_json_declaring_16_tib_does_not_kill_the_server(scratch, oversized, kind, request):
    """Runs last on the scratch server: on Triton's own frontend the one 90-byte request below kills it."""
    _xfail_on_triton(
        request,
        kind,
        "Triton 2.51 allocates a JSON input's declared size before reading it: std::bad_alloc aborts the server",
    )
    status, message = crash_probe(scratch.http_url)
    time.sleep(1)  # on purpose: a crash has no event to wait for; on Triton's frontend it comes within this second
    # the supervisor would restart a dead server: its restart count tells
    assert scratch.is_running() and scratch.restarts == 0, f"the server died; the request got {status} {message!r}"
    assert status.isdigit() and 400 <= int(status) < 500, (status, message)


def test_grpc_invalid_argument_names_the_size_for_a_short_tensor(target):
    """One end-to-end message check through the plain client (the campaign checks the rest by pattern)."""
    server = target
    channel = grpc.insecure_channel(server.grpc_url.split("://", 1)[1])
    try:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        tensor = make_tensor("x", "FP32", [1, 4], np.zeros(4, np.float32))
        with pytest.raises(grpc.RpcError) as info:
            call(grpc_request("tiny", [tensor], raw=[bytes(12)]), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "input byte size mismatch for input 'x' for model 'tiny'. Expected 16, got 12" in info.value.details()
    finally:
        channel.close()


def test_http_json_with_nan_and_infinity_literals_is_served(target):
    server = target
    body = b'{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[NaN,Infinity,-Infinity,1]}]}'
    want = np.array([[np.nan, np.inf, -np.inf, 3]], np.float32)

    def check(out: dict[str, np.ndarray]) -> str | None:
        return None if np.array_equal(out["y"], want, equal_nan=True) else f"y = {out['y']}"

    request = HttpRequest("/v2/models/tiny/infer", body, {"Content-Type": "application/json"})
    sender = Sender(server.http_url, server.grpc_url)
    try:
        o = sender.send(Case(0, "http", "valid_nan_inf", "tiny", "literals", request, valid=True, check=check))
    finally:
        sender.close()
    assert o.status == "200" and o.problem is None, (o.status, o.message, o.problem)
