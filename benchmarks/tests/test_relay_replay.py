"""The relay replay's second version (`--against`): loaded beside the installed gateway, not in its place."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from benchmarks.relay_replay import load_gateway, replay
from tests.support import relay_traffic

SERVER = Path(__file__).resolve().parents[2] / "server"


def test_a_second_version_is_loaded_apart_and_replays_the_same_traffic(tmp_path: Path) -> None:
    shutil.copytree(SERVER / "mslite_gateway", tmp_path / "mslite_gateway")
    ours, other = load_gateway(), load_gateway(tmp_path)
    assert ours["RelayCore"] is not other["RelayCore"]
    # each one's code runs in its own module globals; the installed package stays the one others import
    assert ours["RelayCore"].feed.__globals__["__file__"] == str(SERVER / "mslite_gateway" / "grpc_core.py")
    assert other["RelayCore"].feed.__globals__["__file__"] == str(tmp_path / "mslite_gateway" / "grpc_core.py")
    assert sys.modules["mslite_gateway.grpc_core"].RelayCore is ours["RelayCore"]
    reads = relay_traffic.load(relay_traffic.HERE / "perf_analyzer_tiny.reads")
    (_, requests), (_, other_requests) = replay(reads, ours), replay(reads, other)
    assert requests == other_requests > 100
