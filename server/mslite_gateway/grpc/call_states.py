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

Moves go through `state_machine.transition`; a move a table does not hold raises `IllegalTransition`.
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


# The members as module names, which the relay reads on every frame: a name of the module costs a few ns,
# `CallState.SENT` (through the enum's class) 0.1 us in CPython 3.11.
RECEIVING, CHECKING, SENT, ANSWERING, ENDED = (
    CallState.RECEIVING,
    CallState.CHECKING,
    CallState.SENT,
    CallState.ANSWERING,
    CallState.ENDED,
)

# Events: "check_off_loop", "admit", "rewrite", "answer", "end"
UNARY: dict[tuple[CallState, str], CallState] = {
    (RECEIVING, "check_off_loop"): CHECKING,
    (CHECKING, "check_off_loop"): CHECKING,  # inflated, then the model's batching asked
    (RECEIVING, "admit"): SENT,
    (CHECKING, "admit"): SENT,
    (RECEIVING, "rewrite"): ANSWERING,
    (SENT, "answer"): ANSWERING,
    **{(state, "end"): ENDED for state in CallState if state is not ENDED},
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


PHASES: dict[tuple[Phase, str], Phase] = {
    (Phase.OPEN, "half_close"): Phase.HALF_CLOSED,
    (Phase.OPEN, "end"): Phase.ENDED,
    (Phase.HALF_CLOSED, "end"): Phase.ENDED,
}
ANSWERS: dict[tuple[Answers, str], Answers] = {
    (Answers.AWAITING_HEADERS, "headers"): Answers.BETWEEN,
    (Answers.BETWEEN, "begin"): Answers.IN_MESSAGE,
    (Answers.IN_MESSAGE, "complete"): Answers.BETWEEN,
    (Answers.BETWEEN, "complete"): Answers.BETWEEN,  # a message begun and ended within one frame
}
