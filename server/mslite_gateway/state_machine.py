"""The one way the gateway's protocol states move: a transition table per machine, one illegal-move error.

Every connection, call and stream the gateway keeps (the HTTP/1.1 connection, a gRPC unary call, a
`ModelStreamInfer` call, the relay's connection) is an Enum state changed only by `transition`, from a table
of `(state, event) -> next state` with Enum events, as h2 keeps a stream's. A move the table does not hold
raises `IllegalTransition`: a state the code never meant to reach is a bug, not a combination of flags to
be read on.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

State = TypeVar("State", bound=enum.Enum)
Event = TypeVar("Event", bound=enum.Enum)


class IllegalTransition(RuntimeError):
    """A machine was asked to move on by an event its state does not take."""


def transition(table: Mapping[tuple[State, Event], State], state: State, event: Event) -> State:
    """The state `event` moves `state` to, by `table`.

    Raises:
        IllegalTransition: `table` has no such move.
    """
    try:
        return table[(state, event)]
    except KeyError:
        raise IllegalTransition(f"{event.name} is not a move from {state.name}") from None


class FastState(enum.Enum):
    """An Enum whose members hash by identity: the base of every machine's states and events.

    The tables are read per frame, keyed by (state, event) tuples; Enum's own hash is Python code.
    """

    __hash__ = object.__hash__
