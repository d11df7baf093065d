"""The relay replay's second version (`--against`): loaded beside the installed gateway, not in its place."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from benchmarks.relay_replay import HTTP_REPEAT, exchanges, load_gateway, replay, replay_http
from tests.support import relay_traffic

SERVER = Path(__file__).resolve().parents[2] / "server"


def test_a_second_version_is_loaded_apart_and_replays_the_same_traffic(tmp_path: Path) -> None:
    shutil.copytree(SERVER / "mslite_gateway", tmp_path / "mslite_gateway")
    ours, other = load_gateway(), load_gateway(tmp_path)
    assert ours["RelayCore"] is not other["RelayCore"]
    # each one's code runs in its own module globals; the installed package stays the one others import
    assert ours["RelayCore"].feed.__globals__["__file__"] == str(SERVER / "mslite_gateway" / "grpc" / "core.py")
    assert other["RelayCore"].feed.__globals__["__file__"] == str(tmp_path / "mslite_gateway" / "grpc" / "core.py")
    assert sys.modules["mslite_gateway.grpc.core"].RelayCore is ours["RelayCore"]
    reads = relay_traffic.load(relay_traffic.HERE / "perf_analyzer_tiny.reads")
    (_, requests), (_, other_requests) = replay(reads, ours), replay(reads, other)
    assert requests == other_requests > 100


def test_the_http_replay_answers_every_recorded_request_in_both_versions(tmp_path: Path) -> None:
    shutil.copytree(SERVER / "mslite_gateway", tmp_path / "mslite_gateway")
    reads = relay_traffic.load(relay_traffic.HERE / "perf_analyzer_tiny_http.reads")
    requests, answers = exchanges(reads)
    assert len(requests) == len(answers) > 50
    (_, answered), (_, other_answered) = replay_http(reads), replay_http(reads, load_gateway(tmp_path))
    assert answered == other_answered == len(requests) * HTTP_REPEAT
