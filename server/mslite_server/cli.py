"""`mslite-triton`: serve a model repository with a local Triton server."""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

from mslite_contract import own_server, settings
from mslite_contract.gateway_options import GatewayLimits
from mslite_server import tune
from mslite_server.local_server import LOOPBACK, LocalServer, ServerConfig, ServerStartError

DEFAULT_EXIT_TIMEOUT_S = 30

# Options of earlier releases: tritonserver's own TCP ports behind the gateway, which are Unix sockets now
_GONE_OPTIONS = ("triton_http_port", "triton_grpc_port")


def _serve(args: argparse.Namespace) -> int:
    gone = [f"--{name.replace('_', '-')}" for name in _GONE_OPTIONS if getattr(args, name) is not None]
    if gone:
        sys.stderr.write(
            f"mslite-triton: {' and '.join(gone)}: no such option any more; behind the gateway tritonserver listens on "
            "Unix sockets that only this user can reach, not on TCP ports; with --no-gateway it serves "
            "--http-port and --grpc-port itself\n"
        )
        return 2
    if args.private and (args.no_gateway or args.no_admin_key):
        sys.stderr.write("mslite-triton: --private keeps others out with its gateway and its key: it takes neither "
                         "--no-gateway nor --no-admin-key\n")  # fmt: skip
        return 2
    if not args.private:
        return _run(args, Path(args.model_repository))
    repository = Path(tempfile.mkdtemp(prefix="mslite-triton-repo-"))  # mode 0700; models are uploaded into it
    try:
        return _run(args, repository)
    finally:
        shutil.rmtree(repository, ignore_errors=True)


def _run(args: argparse.Namespace, repository: Path) -> int:
    private = args.private
    exit_timeout_s = args.exit_timeout_s
    if exit_timeout_s is None:
        exit_timeout_s = own_server.PRIVATE_EXIT_TIMEOUT_S if private else DEFAULT_EXIT_TIMEOUT_S
    config = ServerConfig(
        model_repository=repository,
        host=LOOPBACK if private else args.host,
        http_port=0 if private else args.http_port,
        grpc_port=0 if private else args.grpc_port,
        metrics_port=0 if private else args.metrics_port,
        load_models=() if private else tuple(args.model) or ("*",),
        exit_timeout_s=exit_timeout_s,
        log_verbose=args.log_verbose,
        restrict_admin=not args.no_admin_key,
        supervise=not args.no_supervisor,
        hang_s=args.hang_s,
        orphan_grace_s=args.orphan_grace_s,
        gateway=not args.no_gateway,
        gateway_limits=GatewayLimits(
            max_request_bytes=args.max_request_mib << 20,
            max_inflight_per_model=args.max_inflight_per_model,
            max_inflight_bytes=args.max_inflight_mib << 20,
            max_inflight_bytes_per_connection=args.max_inflight_mib_per_connection << 20,
            body_stall_timeout_s=args.body_stall_timeout_s,
            upstream_timeout_s=args.upstream_timeout_s,
            max_string_elements=args.max_string_elements,
            max_connections=args.max_connections,
            idle_timeout_s=args.idle_timeout_s,
            max_streams_per_connection=args.max_streams_per_connection,
            max_unread_bytes_per_connection=args.max_unread_mib_per_connection << 20,
        ),
        tritonserver=args.tritonserver,
        admin_key=None if private else settings.admin_key(),  # a private server's key is new, and printed
        private=private,
    )
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    if args.stop_on_stdin_close or private:
        threading.Thread(target=_stop_at_eof, args=(stop, received), name="stdin-watch", daemon=True).start()
    server = LocalServer(config)
    try:
        server.start()
    except ServerStartError as e:
        sys.stderr.write(f"mslite-triton: {e}\n")
        server.remove_workspace()
        return 2
    code: int | None = None
    try:  # whatever happens now (a client gone: its pipes broken), the server is stopped and its folders removed
        _announce(server, args)
        while not stop.wait(0.5):
            if not server.is_serving():  # with the supervisor: only once it could not start tritonserver again
                _say(f"mslite-triton: tritonserver exited; log tail:\n{server.log_tail()}\n")
                return 1
        _say(
            f"mslite-triton: {received[0] if received else 'stop'} received: stopping (requests in flight get up "
            f"to {exit_timeout_s} s)\n"
        )
    finally:
        code = server.stop()
        server.remove_workspace()
    _say(f"mslite-triton: stopped (tritonserver exit code {code})\n")
    return 0 if code in (0, None) else 1


def _say(text: str) -> None:
    """A line on standard error, unless no one reads it any more (a client that started this server has gone)."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError:
        pass


def _announce(server: LocalServer, args: argparse.Namespace) -> None:
    """The start-up lines (`mslite_contract.own_server`), up to `SERVING_LINE`."""
    private, config = args.private, server.config
    out = sys.stdout
    out.write(f"{own_server.HTTP_LINE}   {server.http_url}\n{own_server.GRPC_LINE}   {server.grpc_url}\n")
    if not private:  # a private server serves no metrics port
        out.write(f"{own_server.METRICS_LINE}{server.metrics_url}\n")
    out.write(f"{own_server.LOG_LINE}    {server.log_path}\n")
    if server.gateway is not None:
        triton = server.triton_endpoints
        out.write(
            f"GATEWAY on the ports above, requests up to {args.max_request_mib} MiB, at most "
            f"{args.max_inflight_per_model} in flight per model and {args.max_inflight_mib} MiB in flight in all "
            f"(beyond: 503 / UNAVAILABLE kLiteServiceDeny); tritonserver itself on Unix sockets in "
            f"{triton.socket_dir}/ (mode 0700: this user only; gRPC: {triton.grpc_address})\n"
        )
    key_dir = server.workspace.key_files[0].parent if server.workspace.key_files else None
    if private:  # standard output is a pipe only the client that started this server reads
        out.write(f"{own_server.TRITON_GRPC_LINE}{server.triton_endpoints.grpc_address}\n")
        out.write(f"{own_server.KEY_LINE}{server.admin_key}  (in no file; every request needs it)\n")
    elif server.admin_key and config.admin_key:  # the deployment's: not written into its logs
        out.write(f"{own_server.KEY_LINE}from {settings.ADMIN_KEY_ENV}  (also in {key_dir}/, mode 0600)\n")
    elif server.admin_key:
        out.write(f"{own_server.KEY_LINE}{server.admin_key}  (also in {key_dir}/, mode 0600)\n")
    else:
        out.write(
            "ADMIN APIs UNRESTRICTED (--no-admin-key): anyone who reaches the ports can load models "
            "and update weights\n"
        )
    if server.gateway is None:  # what this mode gives up (docs/reliability.md, "The boundary")
        if server.admin_key:
            out.write(
                "WARNING (--no-gateway): the admin key is on tritonserver's command line (its restricted-API "
                "flags), which every local account can read (ps): any local user can load models and run code "
                "as this user\n"
            )
        out.write(
            "WARNING (--no-gateway): tritonserver binds the ports itself, so a restart lets them go: another "
            "local process may take one meanwhile and receive what clients send there\n"
        )
    for m in server.model_states():
        reason = f"  ({m.reason.splitlines()[0]})" if m.reason and not m.ready else ""
        out.write(f"model {m.name} v{m.version}: {m.state}{reason}\n")
    out.write(f"{own_server.SERVING_LINE} Ctrl-C or SIGTERM stops\n")
    out.flush()


def _stop_at_eof(stop: threading.Event, received: list[str]) -> None:
    """Set `stop` once standard input ends.

    The process holding its other end (a C++ or Java client that started this server) has then ended, however
    it ended (a signal it could not catch included).
    """
    while sys.stdin.buffer.read(4096):
        pass
    received.append("end of standard input")
    stop.set()


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="mslite-triton", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start a Triton server on a model repository")
    serve.add_argument("--model-repository", default="model_repository", help="model repository directory")
    serve.add_argument("--host", default=LOOPBACK, help="address to bind (default: loopback only)")
    serve.add_argument(
        "--http-port", type=int, default=8000, help="KServe v2 HTTP/REST port; 0: a free one (default %(default)s)"
    )
    serve.add_argument(
        "--grpc-port", type=int, default=8001, help="KServe v2 gRPC port; 0: a free one (default %(default)s)"
    )
    serve.add_argument(
        "--metrics-port", type=int, default=8002, help="Prometheus metrics port; 0: a free one (default %(default)s)"
    )
    for name in _GONE_OPTIONS:  # refused with a reason (`_serve`), not as an unknown option
        serve.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=argparse.SUPPRESS)
    serve.add_argument(
        "--tritonserver",
        type=Path,
        default=settings.server_bin(),
        help=f"the tritonserver binary to start, with its installation's python backend beside it (the Triton "
        f"image's /opt/tritonserver/bin/tritonserver); default: {settings.SERVER_BIN_ENV}, else the nvidia-pytriton "
        "wheel's",
    )
    serve.add_argument("--model", action="append", default=[], help="model to load (repeatable; default: all)")
    serve.add_argument(
        "--exit-timeout-s",
        type=int,
        default=None,
        help=f"how long shutdown waits for requests (default {DEFAULT_EXIT_TIMEOUT_S}; "
        f"{own_server.PRIVATE_EXIT_TIMEOUT_S} with --private)",
    )
    serve.add_argument(
        "--log-verbose",
        type=int,
        default=0,
        help="tritonserver's --log-verbose level into the LOG file; 1 logs each model load and request "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--no-admin-key",
        action="store_true",
        help="leave model control, shared memory, logging, trace and weights updates open (local benchmarking: "
        f"perf_analyzer cannot send the key over gRPC); by default they need the key {settings.ADMIN_KEY_ENV} "
        "names, or else a new one made at start",
    )
    serve.add_argument("--no-supervisor", action="store_true", help="do not restart the server when a worker dies")
    serve.add_argument(
        "--stop-on-stdin-close",
        action="store_true",
        help="stop when standard input ends: a program that starts this server as its child keeps the other end "
        "open, so the server stops when that program ends, however it ends",
    )
    serve.add_argument(
        "--private",
        action="store_true",
        help="a program's own server (how the clients start one when given no URL): a temporary model repository "
        "of its own, free loopback ports, the gateway answering only requests with the admin key, which is new "
        "and printed on standard output only, no metrics port; stops when standard input ends and removes "
        "what it made; --model-repository and the port options are ignored",
    )
    serve.add_argument(
        "--hang-s",
        type=_positive_float,
        default=ServerConfig.hang_s,
        help="the supervisor kills and replaces a gateway or worker process stopped or not answering for this "
        "long (default %(default)s)",
    )
    serve.add_argument(
        "--orphan-grace-s",
        type=_positive_float,
        default=ServerConfig.orphan_grace_s,
        help="the supervisor kills a worker still running this long after its model was unloaded or loaded again "
        "(a request that never ends keeps it in execute; default %(default)s)",
    )
    serve.add_argument(
        "--no-gateway",
        action="store_true",
        help="serve tritonserver directly on the ports, without the validating gateway (which answers malformed "
        "requests with a 4xx naming the problem, refuses oversized ones before they reach Triton and bounds "
        "what is in flight; it costs about 0.4 ms of CPU per 600 KB request, 0.05 ms per small one)",
    )
    serve.add_argument(
        "--max-request-mib",
        type=_positive,
        default=GatewayLimits.max_request_bytes >> 20,
        help="the largest request the gateway accepts; larger ones get 413 / RESOURCE_EXHAUSTED (default %(default)s)",
    )
    serve.add_argument(
        "--max-inflight-per-model",
        type=_positive,
        default=GatewayLimits.max_inflight_per_model,
        help="gateway admission control: inference requests one model may have in flight (sent on to Triton, "
        "not yet answered); more are refused at once with 503 / UNAVAILABLE kLiteServiceDeny (default %(default)s)",
    )
    serve.add_argument(
        "--max-inflight-mib",
        type=_positive,
        default=GatewayLimits.max_inflight_bytes >> 20,
        help="gateway admission control: request bytes in flight across all connections (each chunk of a chunked "
        "HTTP body counts 512 bytes more); beyond, 503 / UNAVAILABLE kLiteServiceDeny (default %(default)s)",
    )
    serve.add_argument(
        "--max-inflight-mib-per-connection",
        type=_positive,
        default=GatewayLimits.max_inflight_bytes_per_connection >> 20,
        help="gateway admission control: the same bytes, for one client connection (a gRPC connection carries "
        "many calls); one request alone always fits; beyond, 503 / UNAVAILABLE kLiteServiceDeny (default %(default)s)",
    )
    serve.add_argument(
        "--body-stall-timeout-s",
        type=_positive_float,
        default=GatewayLimits.body_stall_timeout_s,
        help="gateway: a request body (HTTP) or message (gRPC) that brings no new byte for this long is dropped, "
        "with 408 / DEADLINE_EXCEEDED, and what it held is given back (default %(default)s)",
    )
    serve.add_argument(
        "--upstream-timeout-s",
        type=_positive_float,
        default=GatewayLimits.upstream_timeout_s,
        help="gateway: how long it waits for tritonserver's answer to one request; then 504 / DEADLINE_EXCEEDED, "
        "and the request's place under --max-inflight-per-model is free again (default %(default)s)",
    )
    serve.add_argument(
        "--max-string-elements",
        type=_positive,
        default=GatewayLimits.max_string_elements,
        help="gateway: string (BYTES) elements one request may declare over all its inputs; more are refused "
        "with 413 / RESOURCE_EXHAUSTED (default %(default)s)",
    )
    serve.add_argument(
        "--max-connections",
        type=_positive,
        default=GatewayLimits.max_connections,
        help="gateway: open client connections, both ports together; at the cap the one idle the longest is closed "
        "for a new client, and only when every one has a call in flight is the new one refused (default %(default)s)",
    )
    serve.add_argument(
        "--idle-timeout-s",
        type=_positive_float,
        default=GatewayLimits.idle_timeout_s,
        help="gateway: a client connection with no call in flight and no byte for this long is closed "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--max-streams-per-connection",
        type=_positive,
        default=GatewayLimits.max_streams_per_connection,
        help="gateway: gRPC streams one connection may have open; more are refused with REFUSED_STREAM "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--max-unread-mib-per-connection",
        type=_positive,
        default=GatewayLimits.max_unread_bytes_per_connection >> 20,
        help="gateway: the gateway's own gRPC answers one connection may leave unread; beyond, the stream ends with "
        "RESOURCE_EXHAUSTED or the connection closes (default %(default)s)",
    )
    serve.set_defaults(func=_serve)
    tune.add_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
