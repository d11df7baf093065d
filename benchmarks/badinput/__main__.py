"""The bad-input campaign: seeded malformed requests over HTTP and gRPC, and the bar every answer must meet.

    .venv/bin/python -m benchmarks.badinput [--duration-s 300] [--requests N] [--seed 7] [--threads 4]
    .venv/bin/python -m benchmarks.badinput --replay 1234 [--seed 7]    # one case, sent and printed

Without `--http`/`--grpc` it starts its own tritonserver (`LocalServer`) on 127.0.0.1, serving the test repository
(`tiny`, `mobilenetv2` and the model zoo of tests/support/repository.py), and stops it at the end. It sends
300 valid warm-up requests, then cases from `--first` on, until `--requests` or `--duration-s`; prints the
counts per category and status, the violations of the bar (each a known gap of Triton 2.51 or NEW) and RSS;
then, unless `--no-crash-probe` or an existing server, sends the one request that aborts Triton 2.51
(`sending.crash_probe`). Writes badinput.json into `--out`. Exit code 1 on a NEW violation or a dead server.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.badinput.bar import KNOWN_GAPS, Tally, violation  # noqa: E402
from tests.support.badinput.cases import CaseGenerator  # noqa: E402
from tests.support.badinput.memory import tree_rss_kb  # noqa: E402
from tests.support.badinput.models import fetch_specs  # noqa: E402
from tests.support.badinput.sending import Sender, crash_probe, run_cases  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    http_url: str
    grpc_url: str
    pid: int | None
    stop: Callable[[], None] = field(default=lambda: None)


def start_server(*, gateway: bool = False) -> Served:
    """A `LocalServer` on loopback serving the test repository (built in a temporary directory).

    With `gateway`, the validating gateway fronts it (ServerConfig.gateway) and the URLs are the gateway's.
    """
    import tempfile

    from mslite_server import LocalServer, ServerConfig
    from tests.support.repository import build_repository  # the same models the test suite serves

    tmp = tempfile.TemporaryDirectory(prefix="mslite-badinput-")
    repo = Path(tmp.name) / "repo"
    repo.mkdir()
    build_repository(repo)
    srv = LocalServer(ServerConfig(model_repository=repo, startup_timeout_s=240, gateway=gateway)).start()
    assert srv.process is not None

    def stop() -> None:
        srv.stop()
        srv.remove_workspace()
        tmp.cleanup()

    return Served(srv.http_url, srv.grpc_url, srv.process.pid, stop)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.badinput", description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=300.0, help="stop sending after this long (default 300)")
    ap.add_argument("--requests", type=int, default=1_000_000, help="at most this many cases (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--first", type=int, default=0, help="index of the first case (default 0)")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--http", help="an existing server's HTTP URL (loopback); default: start one")
    ap.add_argument("--grpc", help="an existing server's gRPC URL, e.g. grpc://127.0.0.1:8001")
    ap.add_argument("--server-pid", type=int, help="with --http/--grpc: the server's pid, for the RSS figures")
    ap.add_argument("--replay", type=int, help="send only case REPLAY and print it with its answer")
    ap.add_argument("--no-crash-probe", action="store_true", help="skip the last step (it kills our own server)")
    ap.add_argument("--gateway", action="store_true", help="start the server with the validating gateway in front")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="where badinput.json goes")
    args = ap.parse_args(argv)
    if bool(args.http) != bool(args.grpc):
        ap.error("give both --http and --grpc, or neither")
    for url in filter(None, (args.http, args.grpc)):
        host = urllib.parse.urlsplit(url if "://" in url else "x://" + url).hostname
        if host not in ("127.0.0.1", "localhost", "::1"):
            ap.error(f"{url}: loopback only")
    t0 = time.monotonic()
    served = Served(args.http, args.grpc, args.server_pid) if args.http else start_server(gateway=args.gateway)
    try:
        gen = CaseGenerator(fetch_specs(served.http_url), args.seed)
        if args.replay is not None:
            case = gen.case(args.replay)
            sender = Sender(served.http_url, served.grpc_url)
            o = sender.send(case)
            sender.close()
            print(f"case {case.index} [{case.protocol} {case.category}] {case.what}\n  {case.describe(2000)}")
            print(f"  -> {o.status} {o.message!r}\n  bar: {violation(o) or 'met'}")
            return 0
        print(f"[{time.monotonic() - t0:6.1f}s] server ready: {served.http_url} {served.grpc_url}", flush=True)
        run_cases((gen.valid(i) for i in range(300)), served.http_url, served.grpc_url, threads=args.threads)
        before = tree_rss_kb(served.pid) if served.pid else {}
        print(f"[{time.monotonic() - t0:6.1f}s] warm-up done; RSS {sum(before.values()) / 1024:.0f} MiB", flush=True)
        tally = Tally()
        deadline = time.monotonic() + args.duration_s
        chunk = 5000
        for start in range(args.first, args.first + args.requests, chunk):
            stop = min(start + chunk, args.first + args.requests)
            run_cases(
                gen.cases(range(start, stop)),
                served.http_url,
                served.grpc_url,
                threads=args.threads,
                tally=tally,
                deadline=deadline,
            )
            rss = sum(tree_rss_kb(served.pid).values()) / 1024 if served.pid else float("nan")
            print(
                f"[{time.monotonic() - t0:6.1f}s] {tally.count()} cases ({tally.malformed()} malformed), "
                f"{sum(tally.violations.values())} violations, RSS {rss:.0f} MiB",
                flush=True,
            )
            if time.monotonic() >= deadline:
                break
        after = tree_rss_kb(served.pid) if served.pid else {}
        print("\n" + tally.table())
        print(f"\nmalformed: {tally.malformed('http')} HTTP + {tally.malformed('grpc')} gRPC in {tally.seconds:.0f} s")
        if before and after:
            growth = sum(after.values()) / sum(before.values()) - 1
            print(
                f"RSS server + workers: {sum(before.values()) / 1024:.0f} -> {sum(after.values()) / 1024:.0f} MiB "
                f"({growth:+.1%}; bar < +10%)"
            )
        print("\nviolations (known gaps by key; NEW = not explained):\n" + (tally.report() or "none"))
        for gap in KNOWN_GAPS:
            print(f"\n[{gap.key}] {gap.summary}\n    fix: {gap.fix}")
        failed = bool(tally.new_violations())
        probe = None
        if not args.no_crash_probe and not args.http:
            status, message = crash_probe(served.http_url)
            alive = _alive(served.http_url)
            probe = {"status": status, "message": message[:500], "server_alive": alive}
            print(f"\ncrash probe (JSON shape [2^40, 4] to tiny): {status} {message[:200]!r}; server alive: {alive}")
            failed = failed or not alive
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "badinput.json"
        path.write_text(json.dumps(_summary(args, tally, before, after, probe), indent=2))
        print(f"\nwritten: {path}")
        return 1 if failed else 0
    finally:
        served.stop()


def _summary(
    args: argparse.Namespace, tally: Tally, before: dict[int, int], after: dict[int, int], probe: dict[str, Any] | None
) -> dict[str, Any]:
    """Everything the run found, for benchmarks/results/badinput.json."""
    violations = []
    for (gap, protocol, category, status, why), n in sorted(tally.violations.items()):
        examples = [
            {
                "index": o.case.index,
                "what": o.case.what,
                "request": o.case.describe(1000),
                "status": o.status,
                "message": o.message[:1000],
            }
            for o in tally.samples[(gap, protocol, category, status, why)]
        ]
        violations.append(
            {
                "gap": gap,
                "protocol": protocol,
                "category": category,
                "status": status,
                "why": why,
                "count": n,
                "examples": examples,
            }
        )
    return {
        "seed": args.seed,
        "first_case": args.first,
        "cases": tally.count(),
        "malformed": {"http": tally.malformed("http"), "grpc": tally.malformed("grpc")},
        "seconds": round(tally.seconds, 1),
        "counts": [
            {"protocol": p, "category": c, "status": s, "n": n} for (p, c, s), n in sorted(tally.counts.items())
        ],
        "rss_kib": {"after_warmup": sum(before.values()), "end": sum(after.values()), "processes": len(after)},
        "violations": violations,
        "known_gaps": [{"key": g.key, "summary": g.summary, "fix": g.fix} for g in KNOWN_GAPS],
        "crash_probe": probe,
    }


def _alive(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{http_url}/v2/health/live", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
