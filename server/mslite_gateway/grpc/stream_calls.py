"""The relayed `ModelStreamInfer` calls of one connection: each request message checked whole, each answer read.

A stream's DATA is held (never passed on as it arrives, as a unary call's is) and split into messages
(`grpc.stream_state.MessageReader`); each whole message gets `ModelInfer`'s checks (`grpc.checks.read_model_infer`:
size, shapes, datatypes, shared-memory names) and the per-model in-flight limit, and its frames' admission to
the byte budget. A message that passes goes to Triton in DATA frames of ours (its own bytes, or through a
staging region as a unary request would); one that fails is answered on the stream with a
ModelStreamInferResponse carrying the error and the request's id, as Triton answers a request it fails, and the
stream goes on. A message over the size cap ends the call with RESOURCE_EXHAUSTED, as Triton ends a call whose
message is over its own limit.

Triton's answers are read as messages too: each last answer of a request (an error, or an answer without
`triton_final_response` false) gives back what the request held (its model's in-flight count, its bytes, its
staging region), and an answer of ours goes only between two of Triton's messages, and only after Triton's
response headers: Triton sends those with its first answer, so when an answer of ours has none to follow, the
relay sends Triton a probe (a request for a model no repository can hold) and drops Triton's answer to it.

Flow control stays exact per stream and connection: window for the client's bytes Triton never saw (refused,
staged, padding) is given back to the client here, less the probe's bytes; the bytes of our own answers are
held back from the client's window updates to Triton, and the bytes of a dropped answer given to Triton here.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import service_pb2 as pb

from mslite_gateway.admission import Overloaded
from mslite_gateway.grpc.call_states import Answers, AnswersEvent, Phase, PhaseEvent
from mslite_gateway.grpc.checks import read_model_infer, staged_model_infer
from mslite_gateway.grpc.frames import (
    COLLECT,
    DATA,
    END_STREAM,
    INVALID_ARGUMENT,
    MIN_MAX_FRAME_SIZE,
    PADDED,
    RESOURCE_EXHAUSTED,
    U32,
    WINDOW_UPDATE,
    frame,
    joined,
    unpadded,
)
from mslite_gateway.grpc.messages import PREFIX, Message, inflate, prefixed
from mslite_gateway.grpc.relay_rules import Calls
from mslite_gateway.grpc.stream_state import Pending, StreamCall, error_answer, read_answer, request_id
from mslite_gateway.model_batching import ModelBatching
from mslite_gateway.rules import Refusal, check_batches, empty_batch_refusal, empty_batches

# A model name no repository can hold (models are directories): Triton answers it at once with an error.
_PROBE_MODEL = "/"
_PROBE_ID = "mslite-gateway-probe-"  # + the stream's id: how its answer is told from the client's
_MAX_ERROR_CHARS = 4000  # of an error answer's message: it stays within one 16 KiB frame
# Bytes of our answers on one call that wait to go, or went and the client has not given back window for. A
# client that reads gives it back within its window (64 KiB at first); one that sends failing requests and
# reads nothing would otherwise have the gateway write answers without end. Past this, the call ends.
_MAX_ANSWER_BACKLOG_BYTES = 1 << 20


class StreamCalls:
    """The ModelStreamInfer calls of one connection (a part of its `grpc.calls.CheckedCalls`)."""

    __slots__ = ("owner", "calls", "window_owed")

    def __init__(self, owner: Calls) -> None:
        self.owner = owner
        self.calls: dict[int, StreamCall] = {}
        self.window_owed = 0  # connection window the client will give back for bytes Triton did not send

    def open(self, sid: int, encoding: bytes, keyed: bool) -> None:
        """Stream `sid` is a ModelStreamInfer call."""
        self.calls[sid] = StreamCall(encoding, keyed, self.owner.link.now)

    # -- the client's messages --
    def data_header(self, sid: int, call: StreamCall, length: int) -> int:
        """A DATA frame's header: admitted to the byte budget (or its message refused), and held (COLLECT)."""
        # refused: its bytes are read but neither kept nor counted; its message is answered
        call.denied = self.owner.take_bytes(sid, call, length)
        return COLLECT

    def data_frame(self, sid: int, call: StreamCall, flags: int, parts: list[Any]) -> None:
        """A whole DATA frame of the client's: the messages it completes go on or are answered here."""
        owner = self.owner
        if call.phase is not Phase.OPEN:
            owner.refuse(sid, INVALID_ARGUMENT, "a message came after the request stream ended")
            return
        payload = parts
        if flags & PADDED and parts:
            whole = joined(parts)
            payload = [unpadded(whole, flags)]
            self._credit(sid, call, len(whole) - len(payload[0]))
        messages: list[Message] = []
        for part in payload:
            messages += call.requests.feed(part, call.denied)
        call.denied = None
        cap = owner.rules.cap
        for message in messages:
            if message.length - PREFIX > cap:
                break
            self._request(sid, call, message)
        reader = call.requests
        size = max([reader.length] + [m.length for m in messages]) - PREFIX
        if size > cap:  # too large to hold: the call ends, as Triton ends it
            limit = f"the request message of {size} bytes is over this server's limit of {cap} bytes"
            owner.refuse(sid, RESOURCE_EXHAUSTED, limit)
        elif flags & END_STREAM:
            if not reader.between:
                owner.refuse(sid, INVALID_ARGUMENT, "the request stream ended inside a message")
                return
            call.move(PhaseEvent.HALF_CLOSE)
            owner.frames.out.append(frame(DATA, END_STREAM, sid))

    def _request(self, sid: int, call: StreamCall, message: Message) -> None:
        """A whole request message: checked, counted and sent on, or answered with its error."""
        owner = self.owner
        rules = owner.rules
        nbytes = min(call.charged - call.attributed, message.length)  # what of `charged` is this message's
        if message.refusal is not None:
            self._refuse(sid, call, message, message.refusal, nbytes)
            return
        try:
            body: Any = message.body()
            if message.compressed:
                body = inflate(call.encoding, body.join(), rules.cap)
            req, raw = read_model_infer(body, rules.cap, keyed=call.keyed, max_strings=rules.max_strings)
            model = str(req.model_name)
            _check_empty_batch(rules.batching, model, req)
            rules.admission.enter(model)
        except (Refusal, Overloaded) as e:
            self._refuse(sid, call, message, e.message, nbytes)
            return
        staging = rules.staging
        region = None
        if staging is not None and not message.compressed and staging.wants(message.length - PREFIX):
            region = staging.take(message.length - PREFIX)
        if region is None:
            self._send(sid, message.parts, message.length)
        else:
            staged = staged_model_infer(req, raw, region.name, region.view)
            sent = prefixed(staged)
            self._send(sid, [sent], len(sent))
            self._credit(sid, call, message.length - len(sent))  # Triton reads the rest from the region
        call.sent(Pending(str(req.id), model, nbytes, region, owner.link.now))

    def _send(self, sid: int, parts: list[Any], length: int) -> None:
        """A message (with its prefix) to Triton on stream `sid`, in DATA frames of ours (views, no copy)."""
        out = self.owner.frames.out
        pos, i, offset = 0, 0, 0  # bytes framed; the part being framed and where in it
        while pos < length:
            n = min(MIN_MAX_FRAME_SIZE, length - pos)
            out.append(n.to_bytes(3, "big") + bytes((DATA, 0)) + U32.pack(sid))  # a DATA frame's header
            left = n
            while left:
                part = parts[i]
                take = min(left, len(part) - offset)
                out.append(part[offset : offset + take] if take < len(part) else part)
                offset += take
                left -= take
                if offset == len(part):
                    i, offset = i + 1, 0
            pos += n

    def _refuse(self, sid: int, call: StreamCall, message: Message, reason: str, nbytes: int) -> None:
        """A request message that failed a check: its bytes given back, and its error answered on the stream."""
        owner = self.owner
        owner.rules.refused += 1
        owner.rules.admission.give_bytes(nbytes, owner.account)
        call.charged -= nbytes
        if len(reason) > _MAX_ERROR_CHARS:
            reason = reason[:_MAX_ERROR_CHARS] + "..."
        answer = error_answer(request_id(message), reason)
        if call.window_owed + sum(map(len, call.errors)) + len(answer) > _MAX_ANSWER_BACKLOG_BYTES:
            owner.refuse(sid, RESOURCE_EXHAUSTED, "too many failed requests whose answers the client has not read")
            return
        if self.unread() + len(answer) > owner.rules.max_unread_bytes:
            owner.refuse(
                sid,
                RESOURCE_EXHAUSTED,
                "too many failed requests whose answers the client has not read on this connection "
                f"(this server's limit: {owner.rules.max_unread_bytes} bytes, gateway option "
                "--max-unread-bytes-per-connection)",
            )
            return
        call.errors.append(frame(DATA, 0, sid, answer))
        if call.answers is Answers.BETWEEN:
            self._flush(call)
        elif call.answers is Answers.AWAITING_HEADERS and call.probe is None:
            self._probe(sid, call)
        self._credit(sid, call, message.length)  # Triton never sees it (less the probe's bytes, which it does)

    def _probe(self, sid: int, call: StreamCall) -> None:
        """Have Triton send its response headers: a request it answers at once with an error, dropped here."""
        call.probe = f"{_PROBE_ID}{sid}"
        body = pb.ModelInferRequest(model_name=_PROBE_MODEL, id=call.probe).SerializeToString()
        message = prefixed(body)
        self.owner.frames.out.append(frame(DATA, 0, sid, message))
        self.owner.window.sent_instead(len(message))  # Triton gives window back for it: the client never sent it
        call.debt += len(message)

    def _credit(self, sid: int, call: StreamCall, n: int) -> None:
        """Window for `n` of the client's bytes that Triton never saw, given back (less what we sent instead)."""
        paid = min(n, call.debt)
        call.debt -= paid
        self.owner.window.owe(n, sid, n - paid)  # on the connection, the window's `debt` is set off against it

    def _flush(self, call: StreamCall) -> None:
        """Our answers waiting for a place among Triton's messages, to the client now."""
        link = self.owner.link
        for data in call.errors:
            link.send(data)
            self._owe_window(call, len(data) - 9)
        call.errors.clear()

    # -- Triton's answers --
    def triton_headers(self, sid: int, call: StreamCall, flags: int) -> None:
        """Triton's response headers (their first frame) went to the client: our answers may follow them."""
        if call.answers is Answers.AWAITING_HEADERS:
            call.answers_move(AnswersEvent.HEADERS)
            self._flush(call)  # after the header block (`send` waits for its end)

    def triton_data(self, sid: int, call: StreamCall, flags: int, raw: bytes, parts: list[Any]) -> list[Any]:
        """A whole DATA frame of Triton's on stream `sid`: the requests its answers end, and what goes on."""
        was_between = call.replies.between
        payload = joined(parts) if parts and (call.probe is not None or flags & PADDED) else None
        if payload is not None:
            payload = unpadded(payload, flags)
            messages = call.replies.feed(payload)
        else:
            messages = [m for part in parts for m in call.replies.feed(part)]
        out: list[Any] = [raw, *parts]
        for message in messages:
            rid, model, final = read_answer(message)
            if call.probe is not None and rid == call.probe and not model:
                call.probe = None
                if message.tail == message.length:  # all in this frame (else it went on: the client sees it)
                    out = self._without(sid, flags, payload, message, len(joined(parts)) if parts else 0)
                continue
            if final:
                pending = call.answered(rid, model)
                if pending is not None:
                    self.release(pending, answered=True)
        if call.replies.between:
            call.answers_move(AnswersEvent.COMPLETE)
        elif was_between:
            call.answers_move(AnswersEvent.BEGIN)
        if call.answers is Answers.BETWEEN and call.errors:
            out += call.errors
            for data in call.errors:
                self._owe_window(call, len(data) - 9)
            call.errors = []
        return out

    def _without(self, sid: int, flags: int, payload: Any, answer: Message, size: int) -> list[Any]:
        """The frame without Triton's answer to our probe; the window it took given back to Triton at once."""
        rest = bytes(payload[: answer.end - answer.length]) + bytes(payload[answer.end :])
        dropped = U32.pack(size - len(rest))
        self.owner.link.for_triton.append(frame(WINDOW_UPDATE, 0, 0, dropped) + frame(WINDOW_UPDATE, 0, sid, dropped))
        return [frame(DATA, flags & END_STREAM, sid, rest)] if rest or flags & END_STREAM else []

    def _owe_window(self, call: StreamCall, n: int) -> None:
        """`n` bytes of ours went to the client: its window updates for them are not Triton's (`window_update`)."""
        call.window_owed += n
        self.window_owed += n

    def window_update(self, sid: int, increment: int) -> int:
        """What of a client's window update goes to Triton: less the bytes of ours it gives back for."""
        owed = self.window_owed if sid == 0 else self.calls[sid].window_owed if sid in self.calls else 0
        held = min(max(owed, 0), increment)
        if sid == 0:
            self.window_owed -= held
        elif held:
            self.calls[sid].window_owed -= held
        return increment - held

    def owes(self, sid: int) -> bool:
        """Whether window updates of the client's on `sid` (0: the connection) are to be held back in part."""
        if sid == 0:
            return self.window_owed > 0
        call = self.calls.get(sid)
        return call is not None and call.window_owed > 0

    def unread(self) -> int:
        """Bytes of our answers on this connection the client has not read: sent and not given back, or waiting."""
        return self.window_owed + sum(len(data) for call in self.calls.values() for data in call.errors)

    # -- ends --
    def overdue_ids(self, now: float, limit_s: float) -> list[int]:
        """Calls with a request whose last answer did not reach the client within `limit_s` of its sending."""
        return [sid for sid, c in self.calls.items() if c.pending and now - c.pending[0].sent_at > limit_s]

    def stalled_ids(self, now: float, stall_s: float) -> list[int]:
        """Calls whose message in progress brought no byte for the stall timeout."""
        return [sid for sid, c in self.calls.items() if not c.requests.between and now - c.moved > stall_s]

    def release(self, pending: Pending, *, answered: bool) -> None:
        """A request is over: its model's count, its bytes and its region are given back."""
        owner = self.owner
        rules = owner.rules
        rules.admission.leave(pending.model)
        rules.admission.give_bytes(pending.nbytes, owner.account)
        if pending.region is not None and rules.staging is not None:
            if answered:
                rules.staging.give_back(pending.region)
            else:  # Triton may still read it
                rules.staging.abandon(pending.region)

    def finish(self, sid: int, *, answered: bool) -> bool:
        """Stream `sid` is over, if it is a call of ours: everything it holds is given back."""
        call = self.calls.pop(sid, None)
        if call is None:
            return False
        call.move(PhaseEvent.END)
        owner = self.owner
        for pending in call.pending:
            self.release(pending, answered=answered)
        call.charged -= call.attributed
        if call.charged:
            owner.rules.admission.give_bytes(call.charged, owner.account)
        return True

    def headers_sent(self, sid: int) -> bool:
        """Whether Triton's response headers for call `sid` went to the client (our trailers must have none)."""
        call = self.calls.get(sid)
        return call is not None and call.answers is not Answers.AWAITING_HEADERS


def _check_empty_batch(batching: ModelBatching | None, model: str, req: pb.ModelInferRequest) -> None:
    """A stream's request of batch size 0: refused unless the model is known not to batch (`rules.check_batches`).

    A unary call waits for the model's configuration (`grpc.relay_rules.Later`); a stream's messages are answered in
    order, so one never answered would hold every answer after it, and the stream cannot wait for a reading
    either. So here a batch of 0 goes on only where a fresh reading says the model does not batch (or could not
    be read: Triton then answers for itself), and is refused where the model batches or was not read lately.

    Raises:
        Refusal: an input of batch size 0 and the model batches, or is not known not to.
    """
    empty = empty_batches((inp.name, inp.shape) for inp in req.inputs)
    if not empty or batching is None:
        return
    fresh, size = batching.known(model)
    if fresh:
        if size is not None:
            check_batches(model, empty, size)
        return
    raise empty_batch_refusal(
        model, empty, "a stream takes one only for a model known not to batch: send it as ModelInfer"
    )
