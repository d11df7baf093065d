"""The checked unary calls of one relayed gRPC connection: each request message held, checked and passed on.

A checked call's DATA frames are passed on as they arrive (and kept, as views of what was read, for the
check), except one that may complete the message (and the first, before the message's size is known), which
is held until whole: when the message is whole it is checked (`grpc.checks.read_model_infer`, on the pieces
where they lie) and the frame is passed on, or the call is refused (`CheckedCalls.refuse`: reset at Triton,
which never saw a whole message, so never ran it; the client gets a trailers-only answer). A compressed
message is inflated and checked off the event loop, and a request of batch size 0 may wait for its model's
max_batch_size (`Later`): meanwhile the frame that completed it waits here (CHECKING).

A large uncompressed ModelInfer message goes to Triton through a staging region (`staging`), the client's
bytes staying here; a model load's message is rewritten (`model_control`). Each call's state and its moves:
`grpc.call_states.CallState`.
"""

from __future__ import annotations

import logging
from typing import Any

from mslite_gateway.admission import Overloaded
from mslite_gateway.grpc.call_states import ADMIT, ANSWER, ANSWERING, CHECKING, END, RECEIVING, REWRITE, SENT
from mslite_gateway.grpc.checks import read_model_infer, staged_model_infer, whole
from mslite_gateway.grpc.frames import (
    COLLECT,
    DATA,
    DROP,
    END_STREAM,
    INTERNAL,
    INVALID_ARGUMENT,
    MIN_MAX_FRAME_SIZE,
    PADDED,
    PASS,
    RESOURCE_EXHAUSTED,
    TAP,
    UNAVAILABLE,
    frame,
    grpc_code,
    joined,
    unpadded,
)
from mslite_gateway.grpc.messages import PREFIX, inflate, prefixed
from mslite_gateway.grpc.relay_rules import BATCHING, INFLATED, Calls, Later
from mslite_gateway.grpc.unary_state import UnaryCall
from mslite_gateway.rules import Refusal, check_batches, empty_batches

log = logging.getLogger(__name__)
# The most we send Triton in place of a staged message: within its stream window (4 MiB), which the client,
# whose bytes we credit back at once, does not hold back for.
_STAGED_MAX_BYTES = 1 << 20


class UnaryCalls:
    """The checked unary calls of one connection (a part of its `grpc.calls.CheckedCalls`)."""

    __slots__ = ("owner", "calls")

    def __init__(self, owner: Calls) -> None:
        self.owner = owner
        self.calls: dict[int, UnaryCall] = {}

    # -- the client's DATA --
    def data_header(self, sid: int, call: UnaryCall, length: int, flags: int) -> int:
        """A DATA frame's header: what the frame reader does with it (`grpc.frames` PASS, TAP, COLLECT, DROP)."""
        state = call.state
        if state is not RECEIVING:  # passed on: later frames go through; CHECKING: no more of it
            if state is CHECKING:
                self.owner.window.owe(length)
                return DROP
            return PASS
        owner = self.owner
        refusal = owner.take_bytes(sid, call, length)
        if refusal is not None:
            owner.window.owe(length)
            owner.refuse(sid, UNAVAILABLE, refusal)
            return DROP
        if not call.replaced and not flags & (PADDED | END_STREAM) and call.cannot_complete(length):
            call.got += length  # all message bytes, and not the last: they go on as they arrive
            owner.frames.tap = call.parts
            return TAP
        return COLLECT  # held until whole: it may complete the message (or end the stream early)

    def data_frame(self, sid: int, call: UnaryCall, flags: int, raw: bytes, parts: list[Any]) -> None:
        """A whole DATA frame the reader held (`COLLECT`): passed on, kept (its window given back), or set aside."""
        self._decided(sid, flags, raw, parts, self._data(sid, call, flags, parts))

    def _decided(self, sid: int, flags: int, raw: bytes, parts: list[Any], verdict: bool | None) -> None:
        if verdict:
            out = self.owner.frames.out
            out.append(raw)
            out += parts
        elif verdict is None:
            self.calls[sid].wait((flags, raw, parts))
        else:
            call = self.calls.get(sid)
            staged = call is not None and call.replaced and not flags & END_STREAM
            self.owner.window.owe(sum(len(p) for p in parts), sid if staged else 0)

    def _data(self, sid: int, call: UnaryCall, flags: int, parts: list[Any]) -> bool | None:
        """Whether this (whole) DATA frame goes on to Triton (None: decided later, `Later`)."""
        first = call.got == 0
        sized = False
        if flags & PADDED:
            sized = call.add(unpadded(joined(parts), flags) if parts else b"")
        else:
            for part in parts:
                sized = call.add(part) or sized
        owner = self.owner
        cap = owner.rules.cap
        if first and call.rewrite is not None and call.size > cap:
            # an upload larger than the request cap (a big model's files) is not held: it goes through as it
            # comes, unread, so its file names are not checked (`model_control`; loads need the admin key)
            owner.finish(sid)
            return True
        if call.size > cap or (call.size < 0 and call.got > cap):
            owner.refuse(
                sid,
                RESOURCE_EXHAUSTED,
                f"the request message of {call.size} bytes is over this server's limit of {cap} bytes",
            )
            return False
        if sized and call.infer:  # a large uncompressed one goes to Triton through shared memory
            staging = owner.rules.staging
            if staging is not None and not call.parts[0][0] and staging.wants(call.size):
                call.region = staging.take(call.size)
        if call.whole:
            return self._complete(sid, call, flags)
        if flags & END_STREAM:
            owner.refuse(sid, INVALID_ARGUMENT, "the request ended before its message did")
            return False
        return not call.replaced  # a staged or rewritten call's bytes stay here

    def _complete(self, sid: int, call: UnaryCall, flags: int) -> bool | None:
        """The message is whole: check it (None: the check goes on off the loop, `Later`), then admit it."""
        owner = self.owner
        if call.got > PREFIX + call.size:
            owner.refuse(sid, INVALID_ARGUMENT, "a unary call carries one request message; this one carries more")
            return False
        rules = owner.rules
        cap, keyed, max_strings = rules.cap, call.keyed, rules.max_strings
        try:
            if call.rewrite is not None:
                data = whole(call.message(cap))
                self._send_message(sid, flags, call.rewrite(data) or data)
                call.move(REWRITE)
                return False
            if call.compressed:
                # 60 KiB may inflate to 60 MiB: inflated (and checked) in a thread, as HTTP bodies are
                packed, encoding, check = call.packed(), call.encoding, call.check
                if call.infer:
                    job = Later(
                        INFLATED,
                        lambda: read_model_infer(
                            inflate(encoding, packed, cap), cap, keyed=keyed, max_strings=max_strings
                        ),
                    )
                else:
                    job = Later(INFLATED, lambda: check(inflate(encoding, packed, cap), keyed))
                owner.link.later.append((sid, job))
                return None
            if not call.infer:
                return self._admit(sid, call, flags, call.check(call.message(cap), keyed), None)
            checked = read_model_infer(call.message(cap), cap, keyed=keyed, max_strings=max_strings)
        except Refusal as e:
            owner.refuse(sid, grpc_code(e.status), e.message)
            return False
        return self._infer_checked(sid, call, flags, checked)

    def _infer_checked(self, sid: int, call: UnaryCall, flags: int, checked: tuple[Any, Any]) -> bool | None:
        """A checked ModelInfer request: refused when it is a batch of 0 for a model that batches, else admitted."""
        req = checked[0]
        model = str(req.model_name)
        batching = self.owner.rules.batching
        empty = empty_batches((inp.name, inp.shape) for inp in req.inputs)
        if empty and batching is not None:
            fresh, size = batching.known(model)
            if not fresh:  # Triton is asked (off the loop); the frame waits
                call.checked = checked
                self.owner.link.later.append((sid, Later(BATCHING, lambda: batching.max_batch_size(model))))
                return None
            if size is not None:
                try:
                    check_batches(model, empty, size)
                except Refusal as e:
                    self.owner.refuse(sid, grpc_code(e.status), e.message)
                    return False
        return self._admit(sid, call, flags, model, checked)

    def resolve(self, sid: int, job: Later, value: Any, error: BaseException | None) -> None:
        """Work set aside for call `sid` (`Later`) is done: go on with the call where it stopped.

        A call reset or closed meanwhile is gone, and so is the outcome.
        """
        call = self.calls.get(sid)
        held = call.take_held() if call is not None else None
        if call is None or held is None:
            return
        owner = self.owner
        flags, raw, parts = held
        verdict: bool | None = False
        if isinstance(error, Refusal):
            owner.refuse(sid, grpc_code(error.status), error.message)
        elif error is not None:
            log.error("a gRPC request's check failed: %r", error)
            owner.refuse(sid, INTERNAL, "the server could not check this request")
        elif job.kind == INFLATED:
            if call.infer:
                verdict = self._infer_checked(sid, call, flags, value)
            else:
                verdict = self._admit(sid, call, flags, value, None)
        else:  # BATCHING: the model's max_batch_size (None: unreadable; Triton then answers for itself)
            checked, call.checked = call.checked, None
            assert checked is not None
            model = str(checked[0].model_name)
            try:
                if value is not None:
                    check_batches(model, empty_batches((i.name, i.shape) for i in checked[0].inputs), value)
            except Refusal as e:
                owner.refuse(sid, grpc_code(e.status), e.message)
            else:
                verdict = self._admit(sid, call, flags, model, checked)
        self._decided(sid, flags, raw, parts, verdict)

    def _admit(self, sid: int, call: UnaryCall, flags: int, model: str | None, checked: tuple[Any, Any] | None) -> bool:
        """A message that passed its check: counted for its model, then passed on (or staged) to Triton."""
        owner = self.owner
        staged = b""
        if call.region is not None and checked is not None:
            staged = staged_model_infer(checked[0], checked[1], call.region.name, call.region.view)
        if model is not None:
            try:
                owner.rules.admission.enter(model)
            except Overloaded as e:
                owner.refuse(sid, UNAVAILABLE, e.message)
                return False
            call.model = model
        call.move(ADMIT, owner.link.now)
        if call.region is None:
            return True
        if len(staged) > _STAGED_MAX_BYTES:  # typed `contents`, not raw bytes: it would not fit Triton's window
            owner.refuse(
                sid,
                RESOURCE_EXHAUSTED,
                f"the request holds {len(staged)} bytes besides raw_input_contents, over this server's limit of "
                f"{_STAGED_MAX_BYTES} bytes; send large tensors as raw_input_contents",
            )
            return False
        self._send_message(sid, flags, staged)  # in place of the client's: Triton reads the region
        return False

    def _send_message(self, sid: int, flags: int, body: bytes) -> None:
        """Send Triton `body` as call `sid`'s (uncompressed) message, in place of the client's held DATA."""
        message = prefixed(body)
        self.owner.window.sent_instead(len(message))
        out = self.owner.frames.out
        last = len(message) - 1
        for a in range(0, len(message), MIN_MAX_FRAME_SIZE):
            end = flags & END_STREAM if a + MIN_MAX_FRAME_SIZE > last else 0
            out.append(frame(DATA, end, sid, message[a : a + MIN_MAX_FRAME_SIZE]))

    # -- ends --
    def stalled_ids(self, now: float, stall_s: float) -> list[int]:
        """Calls whose message brought no byte for the stall timeout (and waits for none off the loop)."""
        return [sid for sid, c in self.calls.items() if c.state is RECEIVING and now - c.moved > stall_s]

    def overdue_ids(self, now: float, limit_s: float) -> list[int]:
        """Calls sent on to Triton whose answer is not whole at the client within `limit_s`.

        The clock runs from the call's admission to Triton's trailers, so an answer that waits for a client that
        reads nothing (its window at 0) counts, and its model's slot comes back (a model load is not timed).
        """
        return [
            sid
            for sid, c in self.calls.items()
            if (c.state is SENT or c.state is ANSWERING) and c.moved and now - c.moved > limit_s
        ]

    def answering(self, sid: int) -> None:
        """Triton began its answer on call `sid` (its response headers went to the client); still timed."""
        call = self.calls.get(sid)
        if call is not None and call.state is SENT:
            call.move(ANSWER, call.moved)

    def headers_sent(self, sid: int) -> bool:
        """Whether Triton's response headers for call `sid` went to the client (our trailers must have none)."""
        call = self.calls.get(sid)
        return call is not None and call.state is ANSWERING and bool(call.moved)

    def finish(self, sid: int, *, answered: bool) -> bool:
        """Call `sid` is over, if it is one of these: what it holds is given back."""
        call = self.calls.pop(sid, None)
        if call is None:
            return False
        passed_on = call.state is SENT or call.state is ANSWERING
        call.move(END)
        owner = self.owner
        rules = owner.rules
        if call.region is not None and rules.staging is not None:
            if answered or not passed_on:
                rules.staging.give_back(call.region)
            else:  # sent, then reset or cut off: Triton may still read the region
                rules.staging.abandon(call.region)
        if answered and call.answered is not None:
            call.answered()
        if call.charged:
            rules.admission.give_bytes(call.charged, owner.account)
        if call.model is not None:
            rules.admission.leave(call.model)
        return True
