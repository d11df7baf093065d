"""One relayed `ModelStreamInfer` call as state: its phases and their transitions, and the messages either way.

A unary call carries one request message and one answer; a stream carries any number of each (Triton 2.51
answers a stream's requests in the order they came, a decoupled model's as it sends them, and a decoupled model
may answer one request any number of times; the relay's own answers go as soon as they may). So the relay
holds each of the client's messages whole (`grpc.messages.MessageReader`) and checks it before it goes on, and reads
Triton's answers message by message, both to know which of the stream's requests are over and to know where a
message of its own (an error answer) may go in between Triton's.

The call's state is two small machines side by side, each with its transition table (`grpc.call_states`):

- `Phase` (the client's side): OPEN while the client may send requests, HALF_CLOSED once it ended its side
  (answers still come), ENDED once Triton's trailers, a reset or a refusal ended the call.
- `Answers` (Triton's side): AWAITING_HEADERS until Triton's response headers went to the client (nothing of
  ours may go before them: Triton sends them with its first answer, not when the call opens), then BETWEEN
  two of Triton's messages (where ours may go) or IN_MESSAGE.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from mslite_contract.protobuf_varint import field_spans
from mslite_gateway.grpc.call_states import ANSWERS, PHASES, Answers, AnswersEvent, Phase, PhaseEvent
from mslite_gateway.grpc.checks import Pieces
from mslite_gateway.grpc.messages import Message, MessageReader, prefixed
from mslite_gateway.staging import Region
from mslite_gateway.state_machine import transition

# The parameter Triton puts on each streamed answer: False while a (decoupled) model has more to say.
FINAL_PARAMETER = "triton_final_response"
_MODEL_NAME, _ID, _PARAMETERS = 1, 3, 4  # ModelInferRequest / ModelInferResponse field numbers
_ERROR_MESSAGE, _INFER_RESPONSE = 1, 2  # ModelStreamInferResponse field numbers


class Pending:
    """A request of the stream that Triton has and has not answered for the last time."""

    __slots__ = ("request_id", "model", "nbytes", "region", "sent_at")

    def __init__(self, request_id: str, model: str, nbytes: int, region: Region | None, sent_at: float = 0.0) -> None:
        self.sent_at = sent_at  # when it went to Triton: its last answer is due within the upstream timeout
        self.request_id = request_id
        self.model = model  # counted in flight for it (`Admission.enter`)
        self.nbytes = nbytes  # request bytes counted for it
        self.region = region  # its tensors' staging region, lent until its last answer


class StreamCall:
    """A relayed ModelStreamInfer call: its phases, what it holds and what waits to go to the client."""

    __slots__ = (
        "encoding",
        "keyed",
        "phase",
        "answers",
        "denied",
        "requests",
        "replies",
        "pending",
        "errors",
        "probe",
        "charged",
        "attributed",
        "moved",
        "debt",
        "window_owed",
    )

    def __init__(self, encoding: bytes, keyed: bool, now: float) -> None:
        self.encoding = encoding
        self.keyed = keyed
        self.phase = Phase.OPEN
        self.answers = Answers.AWAITING_HEADERS
        self.denied: str | None = None  # the DATA frame being read was not admitted (why): its message is refused
        self.requests = MessageReader()  # the client's messages
        self.replies = MessageReader()  # Triton's
        self.pending: list[Pending] = []
        self.errors: list[bytes] = []  # answers of ours (whole DATA frames) waiting for a place among Triton's
        self.probe: str | None = None  # the id of our probe while its answer is awaited (`grpc.stream_calls`)
        self.charged = 0  # request bytes counted in flight for the call (a message in progress, and `pending`)
        self.attributed = 0  # of which the requests in `pending` hold
        self.moved = now  # when a byte of a message in progress last came
        self.debt = 0  # bytes we sent Triton on this stream that the client did not (its window is not theirs)
        self.window_owed = 0  # stream window the client will give back for bytes Triton did not send

    def move(self, event: PhaseEvent) -> None:
        """The client's side moves on (`grpc.call_states.PHASES`)."""
        self.phase = transition(PHASES, self.phase, event)

    def answers_move(self, event: AnswersEvent) -> None:
        """Triton's side moves on (`grpc.call_states.ANSWERS`)."""
        self.answers = transition(ANSWERS, self.answers, event)

    def sent(self, pending: Pending) -> None:
        """A request went to Triton: it holds its bytes until its last answer."""
        self.pending.append(pending)
        self.attributed += pending.nbytes

    def answered(self, request_id: str, model: str) -> Pending | None:
        """The pending request a last answer (with this id, for this model if named) ends, taken off the list.

        Ids need not be unique (clients may send none): any request with the id (and the model) stands for it,
        which keeps the counts right; an error answer names no model.
        """
        for i, p in enumerate(self.pending):
            if p.request_id == request_id and (not model or p.model == model):
                self.attributed -= p.nbytes
                self.charged -= p.nbytes
                return self.pending.pop(i)
        return None


def error_answer(request_id: str, message: str) -> bytes:
    """A ModelStreamInferResponse carrying an error for the request `request_id`, as a gRPC message."""
    body = pb.ModelStreamInferResponse(error_message=message, infer_response=pb.ModelInferResponse(id=request_id))
    return prefixed(body.SerializeToString())


def _fields(
    buf: Any, start: int, end: int, wanted: tuple[int, ...], *, partial: bool = False
) -> dict[int, list[tuple[int, int, int]]]:
    """Where the length-delimited fields `wanted` lie in the protobuf message buf[start:end] (top level).

    Each is (where its tag begins, where its value begins, its end). `partial`: a message cut short (or not
    protobuf) gives the fields before the break.

    Raises:
        ValueError, IndexError: framing it does not take (unless `partial`).
    """
    found: dict[int, list[tuple[int, int, int]]] = {}
    tag = start
    try:
        for number, wire, value, stop in field_spans(buf, start, end):
            if wire == 2 and number in wanted:
                found.setdefault(number, []).append((tag, value, stop))
            tag = stop
    except (ValueError, IndexError):
        if not partial:
            raise
    return found


def _indexable(data: Pieces) -> Any:
    """What to read bytes of `data` from by position: its one piece where it is one (faster than `Pieces`)."""
    return data.parts[0] if len(data.parts) == 1 else data


def _text(data: Pieces, span: tuple[int, int, int]) -> str:
    return b"".join(data.views(span[1], span[2])).decode("utf-8", "replace")


def request_id(message: Message) -> str:
    """The id of a client's request, read from what of it was kept ("" where it cannot be read)."""
    data = message.body()
    spans = _fields(_indexable(data), 0, len(data), (_ID,), partial=True).get(_ID)
    return _text(data, spans[-1]) if spans else ""


def read_answer(message: Message) -> tuple[str, str, bool]:
    """(request id, model name, whether it ends its request) of one of Triton's answers.

    Only the top-level fields are read where they lie (an answer's tensors are not copied). An answer ends its
    request unless it says `triton_final_response` false (a decoupled model's answer with more to come); one
    that cannot be read is taken as an error answer, which ends its request.
    """
    data = message.body()
    buf = _indexable(data)
    try:
        inner = _fields(buf, 0, len(data), (_INFER_RESPONSE,)).get(_INFER_RESPONSE)
        fields = _fields(buf, inner[-1][1], inner[-1][2], (_MODEL_NAME, _ID, _PARAMETERS)) if inner else {}
    except (ValueError, IndexError):
        return "", "", True
    rid = _text(data, fields[_ID][-1]) if _ID in fields else ""
    model = _text(data, fields[_MODEL_NAME][-1]) if _MODEL_NAME in fields else ""
    if _PARAMETERS not in fields:
        return rid, model, True
    head = pb.ModelInferResponse()
    try:  # the parameters alone, as a message of their own
        head.MergeFromString(b"".join(b"".join(data.views(tag, stop)) for tag, _, stop in fields[_PARAMETERS]))
    except DecodeError:
        return rid, model, True
    final = head.parameters[FINAL_PARAMETER].bool_param if FINAL_PARAMETER in head.parameters else True
    return rid, model, final
