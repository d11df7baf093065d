"""The validating gateway's process in front of Triton (the launcher's handle of it: `GatewayProcess`).

    python -m mslite_gateway --http-port 8000 --grpc-port 8001 --upstream-http unix:/tmp/s/http \
        --upstream-grpc unix:/tmp/s/grpc [options: `--help`, or `mslite_contract.gateway_options`]

With `ServerConfig(gateway=True)` the launcher starts Triton on Unix sockets in a private folder and this
process on the public ports (an upstream may also be `host:port`). It runs in its own process (its own GIL:
a client in the launcher's process does not slow it, and it cannot crash the caller): one asyncio loop
(uvloop where installed) serves HTTP (`http.front`) and relays gRPC frame by frame (`grpc.relay`), with one
admission control for both (`admission`). It prints `ready` once both listen; SIGTERM stops taking requests,
lets those in progress finish (up to `--grace-s`) and exits.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import sys
from collections.abc import Coroutine, Sequence
from typing import Any

from mslite_contract.gateway_options import GatewayOptions
from mslite_contract.protocol import ADMIN_KEY_HEADER, GATEWAY_READY_LINE
from mslite_contract.settings import ADMIN_KEY_ENV
from mslite_gateway.admission import Admission
from mslite_gateway.connections import Connections
from mslite_gateway.grpc.relay import start_relay
from mslite_gateway.grpc.relay_rules import RelayRules
from mslite_gateway.http.front import HttpFront
from mslite_gateway.http.messages import MAX_HEAD_BYTES
from mslite_gateway.http.upstream import Upstream
from mslite_gateway.load_failures import LoadFailures, http_reader, index_request
from mslite_gateway.model_batching import ModelBatching, http_config_reader
from mslite_gateway.offload import Offload
from mslite_gateway.staging import Staging
from mslite_gateway.upstream_address import UpstreamAddress

log = logging.getLogger(__name__)
# glibc mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_MMAP_MAX = 32 << 20  # glibc's largest mmap threshold on 64-bit
_HEAP_KEEP = 256 << 20


def keep_heap() -> bool:
    """Have glibc reuse the gateway's freed buffers instead of handing them back to the kernel.

    Every request's bytes pass through buffers of hundreds of KiB (what uvloop reads, a body). By default
    glibc serves those from fresh mmaps or trims the heap after each free, so the next request's buffers are
    new pages the kernel must fault in and zero: ~150 page faults per MobileNetV2 request, about 40 % of the
    gateway's CPU for it. Kept, the same pages serve request after request. The price is memory: the heap
    stays at its high-water mark (at most the in-flight bytes admission control allows, plus a little).
    Returns whether glibc took the settings (False on other C libraries, where nothing changes).
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS, Windows)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _HEAP_MMAP_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD, _HEAP_KEEP))


async def serve(options: GatewayOptions, upstream_http: UpstreamAddress, upstream_grpc: UpstreamAddress) -> None:
    """Run both fronts until SIGTERM or SIGINT, then drain and stop (the upstreams: `options`' parsed)."""
    limits = options.limits
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    staging = None
    if options.staging:  # its regions together stay within what admission control lets be in flight
        staging = Staging(upstream_http, os.environ.get(ADMIN_KEY_ENV), max_bytes=limits.max_inflight_bytes)
    upstream = Upstream(upstream_http, timeout_s=limits.upstream_timeout_s, retry_s=limits.upstream_retry_s)
    admission = Admission(
        max_inflight_per_model=limits.max_inflight_per_model,
        max_inflight_bytes=limits.max_inflight_bytes,
        max_inflight_bytes_per_connection=limits.max_inflight_bytes_per_connection,
        body_stall_timeout_s=limits.body_stall_timeout_s,
    )
    admin_key = os.environ.get(ADMIN_KEY_ENV) or None
    # both ports' client connections: one cap (a gRPC one holds one of Triton's too), one idle time-out
    connections = Connections(max_connections=limits.max_connections, idle_timeout_s=limits.idle_timeout_s)
    offload = Offload()
    # why a model failed to load, for callers without the key: read with the gateway's own key, on its upstream
    failures = LoadFailures(http_reader(upstream.exchange, index_request(ADMIN_KEY_HEADER.encode(), admin_key)))
    # whether a model batches, for a request of batch size 0 (`model_batching`): read the same way
    batching = ModelBatching(http_config_reader(upstream.exchange, ADMIN_KEY_HEADER.encode(), admin_key))
    front = HttpFront(
        upstream,
        max_request_bytes=limits.max_request_bytes,
        admission=admission,
        staging=staging,
        admin_key=admin_key,
        offload=offload,
        failures=failures,
        batching=batching,
        max_strings=limits.max_string_elements,
        idle_timeout_s=limits.idle_timeout_s,
        connections=connections,
        key_on_every_request=options.key_on_every_request,
    )
    # The ports first, and no task before them: a start that cannot bind one ends at once, with the reason.
    # The launcher binds them once and hands each gateway it starts the same sockets (`http_fd`, `grpc_fd`), so
    # a restart never lets a port go; a gateway run alone binds them itself.
    http_sock, grpc_sock = _inherited(options.http_fd), _inherited(options.grpc_fd)
    try:
        if http_sock is not None:
            http_server = await asyncio.start_server(front.handle, sock=http_sock, limit=MAX_HEAD_BYTES, backlog=1024)
        else:
            http_server = await asyncio.start_server(
                front.handle, options.host, options.http_port, limit=MAX_HEAD_BYTES, backlog=1024, reuse_address=True
            )
    except OSError as e:
        raise RuntimeError(f"HTTP port {options.http_port} on {options.host} could not be bound: {e}") from None
    try:
        rules = RelayRules(
            max_request_bytes=limits.max_request_bytes,
            admission=admission,
            staging=staging,
            admin_key=admin_key,
            failures=failures,
            batching=batching,
            max_strings=limits.max_string_elements,
            upstream_timeout_s=limits.upstream_timeout_s,
            max_streams=limits.max_streams_per_connection,
            max_unread_bytes=limits.max_unread_bytes_per_connection,
            key_on_every_request=options.key_on_every_request,
        )
        grpc_server, relay = await start_relay(
            options.host, options.grpc_port, upstream_grpc, rules, connections, sock=grpc_sock
        )
    except OSError as e:
        raise RuntimeError(f"gRPC port {options.grpc_port} on {options.host} could not be bound: {e}") from None
    if staging is not None:
        staging.start()
    sys.stdout.write(GATEWAY_READY_LINE + "\n")
    sys.stdout.flush()
    await stop.wait()
    http_server.close()
    grpc_server.close()
    await asyncio.gather(front.drain_and_close(options.grace_s), relay.drain_and_close(options.grace_s))
    connections.close()
    offload.close()
    if staging is not None:
        log.warning("%d requests' tensors went to Triton through shared memory", staging.staged)
        await staging.close()
    log.warning(
        "gateway stopped; refused %d HTTP and %d gRPC requests (%d of them by admission control); cancelled %d "
        "HTTP requests whose client hung up; %d idle connections closed for room, %d by the idle time-out, %d "
        "refused at the cap",
        front.refused,
        relay.refused,
        admission.denied,
        front.gone,
        connections.dropped_for_room,
        connections.idled_out,
        connections.refused,
    )


def _inherited(fd: int) -> socket.socket | None:
    """The listening socket of inherited descriptor `fd` (None for -1: the port is bound here)."""
    if fd < 0:
        return None
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    return sock


def _run(main: Coroutine[Any, Any, None]) -> None:
    """Run on uvloop where it is installed: measured here, a fifth less gateway CPU per HTTP request."""
    try:
        import uvloop
    except ImportError:  # not on Windows; the stdlib loop serves the same, a little slower
        asyncio.run(main)
        return
    uvloop.run(main)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the gateway process."""
    options = GatewayOptions.from_argv(argv, description=__doc__.split("\n\n")[0])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s gateway %(levelname)s %(message)s")
    try:
        upstreams = UpstreamAddress.parse(options.upstream_http), UpstreamAddress.parse(options.upstream_grpc)
    except ValueError as e:
        log.error("%s", e)
        return 2
    keep_heap()
    try:
        _run(serve(options, *upstreams))
    except (OSError, RuntimeError) as e:
        log.error("%s", e)
        return 2
    return 0
