"""What the parts of the gRPC relay share: the gateway's rules (`RelayRules`), and what each part needs of another.

`RelayRules` is one per gateway: the checks per method, the limits, the counters; `Later`, work a call waits
for off the event loop (which the adapter runs, and hands the core its outcome). The protocols name what a
part asks of the one that owns it, so that each can be read (and tested) alone: the checked calls of their
connection (`Link`: `grpc.core.RelayCore`), each kind of call of the checked calls (`Calls`:
`grpc.calls.CheckedCalls`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from mslite_contract.settings import (
    GATEWAY_MAX_STREAMS_PER_CONNECTION,
    GATEWAY_MAX_STRING_ELEMENTS,
    GATEWAY_MAX_UNREAD_BYTES_PER_CONNECTION,
    GATEWAY_UPSTREAM_TIMEOUT_S,
)
from mslite_gateway.admission import Account, Admission
from mslite_gateway.grpc.checks import (
    SERVICE,
    VERSIONED,
    check_model_infer,
    check_register,
    check_unregister,
    check_versioned,
)
from mslite_gateway.grpc.frames import Frames
from mslite_gateway.grpc.link_state import LinkState
from mslite_gateway.grpc.unary_state import Check
from mslite_gateway.grpc.window_credit import WindowCredit
from mslite_gateway.load_failures import LoadFailures
from mslite_gateway.model_batching import ModelBatching
from mslite_gateway.model_control import grpc_load_message, grpc_unload_message
from mslite_gateway.staging import Staging

INFLATED, BATCHING = "inflated", "batching"  # the kinds of work a call waits for off the loop


class Later:
    """Work a call waits for, done off the event loop by the adapter (`grpc.relay`), then `RelayCore.resolved`.

    `kind` INFLATED: `run()` inflates and checks a compressed message, in a thread (zlib lets go of the GIL);
    BATCHING: `run()` is a coroutine function that asks Triton for a model's max_batch_size (`model_batching`).
    """

    __slots__ = ("kind", "run")

    def __init__(self, kind: str, run: Callable[[], Any]) -> None:
        self.kind = kind
        self.run = run

    @property
    def in_thread(self) -> bool:
        """Whether `run` is plain blocking work for a thread (else a coroutine function)."""
        return self.kind == INFLATED


class RelayRules:
    """What every connection of one gateway shares: the checks per method, the limits, the counters."""

    def __init__(
        self,
        *,
        max_request_bytes: int,
        admission: Admission,
        staging: Staging | None,
        admin_key: str | None = None,
        failures: LoadFailures | None = None,
        batching: ModelBatching | None = None,
        max_strings: int = GATEWAY_MAX_STRING_ELEMENTS,
        upstream_timeout_s: float = GATEWAY_UPSTREAM_TIMEOUT_S,
        max_streams: int = GATEWAY_MAX_STREAMS_PER_CONNECTION,
        max_unread_bytes: int = GATEWAY_MAX_UNREAD_BYTES_PER_CONNECTION,
        key_on_every_request: bool = False,
    ) -> None:
        self.admin_key = admin_key
        self.key_on_every_request = key_on_every_request  # a private server: no call without the key
        self.batching = batching  # whether a model batches, for a request of batch size 0
        self.max_strings = max_strings
        # a call Triton has not answered whole by then (its answer waiting for the client's window too) is ended
        self.upstream_timeout_s = upstream_timeout_s
        self.max_streams = max_streams  # streams one connection may have open (SETTINGS_MAX_CONCURRENT_STREAMS)
        self.max_unread_bytes = max_unread_bytes  # our own answers one connection's client may leave unread
        self.staging = staging
        self.explain = None if failures is None else failures.explain_now  # a not-ready error: why
        self.cap = max_request_bytes
        self.admission = admission
        self.refused = 0
        self.calmed = 0  # connections ended for too many resets
        self.closing = False  # the gateway is stopping: new calls are refused
        self.infer_path = f"/{SERVICE}/ModelInfer".encode()
        # (a ModelInfer call's check runs as `read_model_infer` in `grpc.unary_calls`, which also needs the request
        # for staging and the batch-of-0 rule; this entry names the path as checked, and is the same check)
        self.checks: dict[bytes, Check] = {
            self.infer_path: lambda data, keyed: check_model_infer(
                data, self.cap, keyed=keyed, max_strings=self.max_strings
            )
        }
        for name, (kind, field) in VERSIONED.items():
            self.checks[f"/{SERVICE}/{name}".encode()] = check_versioned(kind, field)
        # the gateway's own regions are not the clients' to register or unregister; after any unregister
        # call (one without a name unregisters them all) staging checks its registrations again
        self.unregister_path = f"/{SERVICE}/SystemSharedMemoryUnregister".encode()
        self.checks[self.unregister_path] = check_unregister
        self.checks[f"/{SERVICE}/SystemSharedMemoryRegister".encode()] = check_register
        self.stream_path = f"/{SERVICE}/ModelStreamInfer".encode()  # held and checked message by message
        # calls whose message may be sent on changed or refused (`model_control`): held until whole (up to the
        # cap, an upload's files too: its keys are checked), then rewritten; an unload's model name is checked
        self.rewrites = {
            f"/{SERVICE}/RepositoryModelLoad".encode(): grpc_load_message,
            f"/{SERVICE}/RepositoryModelUnload".encode(): grpc_unload_message,
        }


class Link(Protocol):
    """What the calls need of their connection (`grpc.core.RelayCore`)."""

    now: float  # the time of the latest call (seconds)
    state: LinkState  # the connection's life (`grpc.link_state`)
    open: set[int]  # streams forwarded to Triton and not ended there
    later: list[tuple[int, Later]]  # work for calls that the adapter runs off the loop

    @property
    def alone(self) -> bool:
        """Triton could not be reached: every call is answered here."""

    @property
    def for_triton(self) -> list[bytes]:
        """Frames of ours for Triton, written at the client's next frame boundary."""

    def calm(self) -> None:
        """Too many resets: GOAWAY ENHANCE_YOUR_CALM to the client, and the connection closed."""

    def send(self, data: bytes) -> None:
        """A frame of ours to the client (at the next frame boundary in Triton's byte stream)."""

    def close(self) -> None:
        """Close both sides once what is written goes."""


class Calls(Protocol):
    """What a kind of checked call needs of its connection's checked calls (`grpc.calls.CheckedCalls`)."""

    rules: RelayRules
    link: Link
    frames: Frames  # the client's byte stream: its `out` is what goes to Triton
    account: Account  # request bytes the connection has in flight
    window: WindowCredit  # what is owed to the client for DATA Triton never saw

    def take_bytes(self, sid: int, call: Any, length: int) -> str | None:
        """Admit a DATA frame's bytes to the budget (None), or say why not."""

    def refuse(self, sid: int, code: int, message: str) -> None:
        """Answer call `sid` with this status ourselves (trailers of ours to the client), and reset it at Triton."""

    def finish(self, sid: int, *, answered: bool = False) -> None:
        """Call `sid` is over: what it holds is given back."""
