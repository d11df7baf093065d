"""Clients that hold or churn the gateway's budgets, and what the others see (loopback only, bounded).

  hold:  a gateway (the defaults of `mslite-triton serve`) in front of tritonserver serving `tiny`; 4 HTTP
         connections announce a 64 MiB body and send none of it, one gRPC connection opens 33 ModelInfer calls
         that each send 8 MiB of a 64 MiB message and stop; meanwhile 4 threads of raw tritonclient (2 HTTP,
         2 gRPC) predict for --seconds. Prints their predicts ok and failed (bar: >= 95 % ok) and the calls the
         attack held.
  reset: HTTP/2 rapid reset: --connections connections one after the other, each sending up to --pairs
         ModelInfer HEADERS + RST_STREAM pairs, through the gateway, or with --direct straight at tritonserver
         (what every relayed reset did). Prints how many connections were closed with ENHANCE_YOUR_CALM and
         tritonserver's RSS before and after.

Run: .venv/bin/python -m benchmarks.gateway_abuse hold [--seconds 5]
     .venv/bin/python -m benchmarks.gateway_abuse reset [--connections 5] [--pairs 20000] [--direct]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from mslite_gateway.grpc_frames import ENHANCE_YOUR_CALM  # noqa: E402
from mslite_server import LocalServer, ServerConfig  # noqa: E402
from mslite_server.gateway_process import GatewayProcess  # noqa: E402
from tests.support.processes import free_port  # noqa: E402
from tests.support.raw_h2 import announce, goaway_code, rapid_reset, stall_streams  # noqa: E402


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _predicts(kind: str, port: int, until: float, counts: dict[str, int], lock: threading.Lock) -> None:
    if kind == "http":
        import tritonclient.http as client_module
    else:
        import tritonclient.grpc as client_module  # type: ignore[no-redef]
    client = client_module.InferenceServerClient(f"127.0.0.1:{port}")
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    while time.monotonic() < until:
        item = client_module.InferInput("x", [1, 4], "FP32")
        item.set_data_from_numpy(x)
        try:
            ok = client.infer("tiny", [item]).as_numpy("y").tolist() == (x * 2 + 1).tolist()
        except Exception:  # counted: the figure is how many failed
            ok = False
            time.sleep(0.05)
        with lock:
            counts["ok" if ok else "failed"] += 1
    client.close()


def hold(http_port: int, grpc_port: int, seconds: float) -> None:
    """The attack of the module's docstring, and other clients' predicts meanwhile."""
    announced = announce(http_port, 4, 64 << 20)
    attacker, held = stall_streams(grpc_port, 33, sent=8 << 20, size=64 << 20)
    counts, lock = {"ok": 0, "failed": 0}, threading.Lock()
    until = time.monotonic() + seconds
    ports = {"http": http_port, "grpc": grpc_port}
    threads = [
        threading.Thread(target=_predicts, args=(k, ports[k], until, counts, lock)) for k in ("http", "grpc") * 2
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    still = sum(1 for sid in held if sid not in attacker.ended)
    attacker.close()
    for s in announced:
        s.close()
    ok, failed = counts["ok"], counts["failed"]
    print(f"other clients' predicts: {ok} ok, {failed} failed ({100 * ok / max(ok + failed, 1):.1f} % ok)")
    print(f"stalled gRPC calls held: {len(held)} of 33 after sending, {still} at the end")


def reset(grpc_port: int, triton_pid: int, connections: int, pairs: int) -> None:
    """Rapid reset, one connection after the other."""
    before, calmed = _rss_mib(triton_pid), 0
    for _ in range(connections):
        goaway, _closed = rapid_reset(grpc_port, pairs)
        calmed += goaway is not None and goaway_code(goaway) == ENHANCE_YOUR_CALM
    time.sleep(2)
    after = _rss_mib(triton_pid)
    print(f"{calmed} of {connections} connections closed with ENHANCE_YOUR_CALM")
    print(f"tritonserver RSS {before:.0f} MiB -> {after:.0f} MiB ({after - before:+.0f})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", choices=["hold", "reset"])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=20_000)
    ap.add_argument("--direct", action="store_true", help="reset: straight at tritonserver, without the gateway")
    args = ap.parse_args(argv)
    if not (ROOT / "model_repository" / "tiny" / "1" / "model.onnx").exists():
        sys.exit("run `make models` first")
    config = ServerConfig(model_repository=ROOT / "model_repository", load_models=("tiny",), supervise=False)
    with LocalServer(config) as srv, tempfile.TemporaryDirectory() as tmp:
        assert srv.process is not None
        gateway = GatewayProcess(
            host="127.0.0.1",
            http_port=free_port(),
            grpc_port=free_port(),
            upstream_http=srv.triton.http_address,  # a server without a gateway of its own: Triton on TCP
            upstream_grpc=srv.triton.grpc_address,
            grace_s=1,
            log_path=Path(tmp) / "gateway.log",
        )
        gateway.start()
        try:
            http_port, grpc_port = (int(a.split("=", 1)[1]) for a in gateway.args[1:3])
            if args.case == "hold":
                hold(http_port, grpc_port, args.seconds)
            else:
                port = srv.triton.grpc_port if args.direct else grpc_port
                reset(port, srv.process.pid, args.connections, args.pairs)
        finally:
            gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
