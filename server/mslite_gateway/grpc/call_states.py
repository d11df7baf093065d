"""The states of a checked gRPC call and their transitions, one table per machine (as h2 keeps a stream's).

A unary call (`grpc.unary_state.UnaryCall`) is one machine, `CallState`:

    RECEIVING --whole, work off the loop--> CHECKING --(again: the model's batching asked)--> CHECKING
    RECEIVING | CHECKING --admitted--> SENT --Triton's answer began--> ANSWERING
    RECEIVING --rewritten (a model load: not timed)--> ANSWERING
    any but ENDED --end (Triton's trailers, a reset, a refusal, the connection closed)--> ENDED

A `ModelStreamInfer` call (`grpc.stream_state.StreamCall`) carries messages both ways at once, so it is two
machines side by side, each side's events moving only its own: `Phase` (the client's side: OPEN, HALF_CLOSED
once it ended its side, ENDED) and `Answers` (Triton's side: AWAITING_HEADERS until Triton's response headers
went to the client, then BETWEEN two of Triton's messages, where one of ours may go, or IN_MESSAGE).

Each machine has its Enum of events (`UnaryEvent`, `PhaseEvent`, `AnswersEvent`); moves go through
`state_machine.transition`, and a move a table does not hold raises `IllegalTransition`.
"""

from __future__ import annotations

from mslite_gateway.state_machine import FastState


class CallState(FastState):
    """Where a checked unary call is."""

    RECEIVING = "receiving"  # its request message is arriving (checked once whole)
    CHECKING = "checking"  # whole; its check goes on off the event loop, the frame that completed it held here
    SENT = "sent"  # checked and passed on; Triton's answer has not begun (timed: the upstream timeout)
    ANSWERING = "answering"  # Triton's answer began, or a call Triton takes as long as it needs (not timed)
    ENDED = "ended"  # answered, reset, refused or cut off: what it held is given back


# The members (and the unary events below) as module names, which the relay reads on every frame: a name of
# the module costs a few ns, `CallState.SENT` (through the enum's class) 0.1 us in CPython 3.11.
RECEIVING, CHECKING, SENT, ANSWERING, ENDED = (
    CallState.RECEIVING,
    CallState.CHECKING,
    CallState.SENT,
    CallState.ANSWERING,
    CallState.ENDED,
)


class UnaryEvent(FastState):
    """What moves a unary call on."""

    CHECK_OFF_LOOP = "check off the loop"  # whole, its check (inflating, the model's batching) goes on off the loop
    ADMIT = "admit"  # checked and admitted: passed on to Triton
    REWRITE = "rewrite"  # a call the relay answers with a message of its own (a model load): not timed
    ANSWER = "answer"  # Triton's answer began
    END = "end"  # Triton's trailers, a reset, a refusal, the connection closed


CHECK_OFF_LOOP, ADMIT, REWRITE, ANSWER, END = (
    UnaryEvent.CHECK_OFF_LOOP,
    UnaryEvent.ADMIT,
    UnaryEvent.REWRITE,
    UnaryEvent.ANSWER,
    UnaryEvent.END,
)

UNARY: dict[tuple[CallState, UnaryEvent], CallState] = {
    (RECEIVING, CHECK_OFF_LOOP): CHECKING,
    (CHECKING, CHECK_OFF_LOOP): CHECKING,  # inflated, then the model's batching asked
    (RECEIVING, ADMIT): SENT,
    (CHECKING, ADMIT): SENT,
    (RECEIVING, REWRITE): ANSWERING,
    (SENT, ANSWER): ANSWERING,
    **{(state, END): ENDED for state in CallState if state is not ENDED},
}


class Phase(FastState):
    """The client's side of a stream call."""

    OPEN = "open"
    HALF_CLOSED = "half-closed"
    ENDED = "ended"


class Answers(FastState):
    """Triton's side of a stream call, as far as where a message of ours may go."""

    AWAITING_HEADERS = "awaiting headers"
    BETWEEN = "between messages"
    IN_MESSAGE = "in a message"


class PhaseEvent(FastState):
    """What moves the client's side of a stream call on."""

    HALF_CLOSE = "half-close"  # the client ended its side
    END = "end"  # Triton's trailers, a reset or a refusal ended the call


class AnswersEvent(FastState):
    """What moves Triton's side of a stream call on."""

    HEADERS = "headers"  # Triton's response headers went to the client
    BEGIN = "begin"  # one of Triton's messages began and did not end in the same frame
    COMPLETE = "complete"  # one of Triton's messages ended


PHASES: dict[tuple[Phase, PhaseEvent], Phase] = {
    (Phase.OPEN, PhaseEvent.HALF_CLOSE): Phase.HALF_CLOSED,
    (Phase.OPEN, PhaseEvent.END): Phase.ENDED,
    (Phase.HALF_CLOSED, PhaseEvent.END): Phase.ENDED,
}
ANSWERS: dict[tuple[Answers, AnswersEvent], Answers] = {
    (Answers.AWAITING_HEADERS, AnswersEvent.HEADERS): Answers.BETWEEN,
    (Answers.BETWEEN, AnswersEvent.BEGIN): Answers.IN_MESSAGE,
    (Answers.IN_MESSAGE, AnswersEvent.COMPLETE): Answers.BETWEEN,
    (Answers.BETWEEN, AnswersEvent.COMPLETE): Answers.BETWEEN,  # a message begun and ended within one frame
}
