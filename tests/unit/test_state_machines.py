"""The gateway's protocol states: one idiom (`mslite_gateway.state_machine`), found by scanning the package.

Every transition table in the gateway (a mapping of (state, event) pairs to states, at a module's or a class's
top level) is listed in `MACHINES`, with its Enum states and events; each is read only as an argument of
`transition`, and a state attribute it moves is set elsewhere only in `__init__`. The gateway's exceptions are
listed too, so a second illegal-move error (or a private copy of the lookup) cannot come back unnoticed.
"""

from __future__ import annotations

import ast
import enum
import importlib
import pkgutil
from pathlib import Path

import pytest

import mslite_gateway
from mslite_gateway.state_machine import FastState, IllegalTransition, transition

GATEWAY = Path(mslite_gateway.__file__).parent

# the tables: where each lives -> (its states, its events)
MACHINES = {
    "mslite_gateway.http.connection.CLIENT_MOVES": ("Client", "HttpEvent"),  # the HTTP/1.1 client's side
    "mslite_gateway.http.connection.OUR_MOVES": ("Ours", "HttpEvent"),  # the HTTP/1.1 answering side
    "mslite_gateway.grpc.call_states.UNARY": ("CallState", "UnaryEvent"),  # a checked unary gRPC call
    "mslite_gateway.grpc.call_states.PHASES": ("Phase", "PhaseEvent"),  # a ModelStreamInfer call, the client's side
    "mslite_gateway.grpc.call_states.ANSWERS": ("Answers", "AnswersEvent"),  # ... and Triton's side
    "mslite_gateway.http.bodies.CHUNK_MOVES": ("Chunked", "ChunkEvent"),  # a chunked HTTP body's reading
    "mslite_gateway.grpc.link_state.LINK_MOVES": ("LinkState", "LinkEvent"),  # the relay's connection
}
# every exception class the gateway defines, and what it stands for: none is a second illegal-move error
EXCEPTIONS = {
    "mslite_gateway.state_machine.IllegalTransition": "a move a transition table lacks (a bug)",
    "mslite_gateway.http.messages.HttpError": "an HTTP request refused, with its status",
    "mslite_gateway.rules.Refusal": "a gRPC call refused, with its status",
    "mslite_gateway.admission.Overloaded": "a request past an in-flight bound",
    "mslite_gateway.http.upstream._Unanswered": "Triton closed a connection before answering",
    "mslite_gateway.staging._Refused": "a staging region Triton would not register",
}


def _modules() -> list:
    return [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages([str(GATEWAY)], "mslite_gateway.")
        if not info.name.endswith("__main__")
    ]


def _keyed_by_tuples(value: object) -> bool:
    """A non-empty dict whose keys are all pairs or triples of names: a transition table, or something shaped as
    one (string states and events, or a joint table of two sides). A cache keyed by other tuples (of bytes,
    numbers, flags) is not one, however full other tests left it."""
    return (
        isinstance(value, dict)
        and bool(value)
        and all(
            isinstance(k, tuple) and len(k) in (2, 3) and all(isinstance(p, (enum.Enum, str)) for p in k) for k in value
        )
    )


def _is_table(value: object) -> bool:
    """A non-empty mapping of (Enum, Enum) pairs to members of the first one's Enum."""
    if not isinstance(value, dict) or not value:
        return False
    return all(
        isinstance(key, tuple)
        and len(key) == 2
        and all(isinstance(part, enum.Enum) for part in key)
        and type(after) is type(key[0])
        for key, after in value.items()
    )


def _assigned_here(module: object, name: str) -> bool:
    """Whether `module`'s own source assigns `name` at its top level or in a class (not an import of it)."""
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def _tables() -> dict[str, dict]:
    """Every dict keyed by tuples in the gateway, by where it is defined (a name imported elsewhere counted once)."""
    found = {}
    for module in _modules():
        spaces = [(module.__name__, vars(module))]
        spaces += [
            (f"{module.__name__}.{name}", vars(c))
            for name, c in vars(module).items()
            if isinstance(c, type) and c.__module__ == module.__name__
        ]
        for prefix, space in spaces:
            for name, value in space.items():
                if _keyed_by_tuples(value) and _assigned_here(module, name):
                    found[f"{prefix}.{name}"] = value
    return found


def _trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(GATEWAY.rglob("*.py"))}


def test_the_gateway_has_the_transition_tables_listed_and_no_other() -> None:
    tables = _tables()
    assert set(tables) == set(MACHINES)
    assert [where for where, table in tables.items() if not _is_table(table)] == []


@pytest.mark.parametrize("where", sorted(MACHINES))
def test_each_machine_has_enum_states_and_enum_events_with_identity_hashes(where: str) -> None:
    table = _tables()[where]
    states, events = MACHINES[where]
    assert {type(s).__name__ for s, _ in table} == {type(a).__name__ for a in table.values()} == {states}
    assert {type(e).__name__ for _, e in table} == {events}
    for member in (*table, *table.values()):
        for part in member if isinstance(member, tuple) else (member,):
            assert isinstance(part, FastState)


@pytest.mark.parametrize("where", sorted(MACHINES))
def test_each_machine_moves_by_its_table_and_refuses_what_it_lacks(where: str) -> None:
    table = _tables()[where]
    state_type, event_type = type(next(iter(table))[0]), type(next(iter(table))[1])
    for state in state_type:
        for event in event_type:
            if (state, event) in table:
                assert transition(table, state, event) is table[state, event]
            else:
                with pytest.raises(IllegalTransition, match=f"{event.name} is not a move from {state.name}"):
                    transition(table, state, event)


def _is_transition(node: ast.AST) -> bool:
    """A call of `transition(...)`, or a tuple of them (both sides of a connection moved at once)."""
    if isinstance(node, ast.Tuple):
        return all(_is_transition(element) for element in node.elts)
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "transition"


def _reads_outside_transition(trees: dict[Path, ast.Module], names: set[str]) -> list[str]:
    """Where a table's name is read other than as the first argument of `transition(...)`."""
    wrong = []
    for path, tree in trees.items():
        calls = (call for call in ast.walk(tree) if isinstance(call, ast.Call) and _is_transition(call))
        allowed = {id(call.args[0]) for call in calls if call.args}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
                if id(node) not in allowed:
                    wrong.append(f"{path.name}:{node.lineno} reads {node.id}")
    return wrong


def _classes(trees: dict[Path, ast.Module]) -> list[tuple[Path, ast.ClassDef]]:
    return [(path, node) for path, tree in trees.items() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def _moved_attributes(cls: ast.ClassDef) -> set[str]:
    """The attributes of `self` a class sets from `transition(...)`: its machines' states."""
    return {
        part.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign) and _is_transition(node.value)
        for target in node.targets
        for part in ast.walk(target)
        if isinstance(part, ast.Attribute) and getattr(part.value, "id", None) == "self"
    }


def _states_set_by_hand(trees: dict[Path, ast.Module]) -> list[str]:
    """Where a class with a machine sets its state other than from `transition(...)`, outside `__init__`; and
    where code outside any such class sets an attribute of that name on something not `self`."""
    wrong, moved_anywhere = [], set()
    for path, cls in _classes(trees):
        moved = _moved_attributes(cls)
        moved_anywhere |= moved
        for func in cls.body:
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) and func.name != "__init__":
                wrong += [f"{path.name}:{line} sets .{attr}" for line, attr, _ in _sets(func, moved)]
    for path, tree in trees.items():
        wrong += [f"{path.name}:{line} sets .{attr}" for line, attr, on in _sets(tree, moved_anywhere) if on != "self"]
    return sorted(set(wrong))


def _sets(scope: ast.AST, attrs: set[str]) -> list[tuple[int, str, str]]:
    """(line, attribute, what it is set on) for each attribute in `attrs` set in `scope` not by `transition`."""
    found = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and not _is_transition(node.value):
            targets: list[ast.expr] = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and part.attr in attrs:
                    found.append((node.lineno, part.attr, ast.unparse(part.value)))
    return found


def _private_lookups(trees: dict[Path, ast.Module]) -> list[str]:
    """Where a pair (or triple) is looked up under `except KeyError`: a copy of `transition`'s own lookup."""
    wrong = []
    for path, tree in trees.items():
        if path.name == "state_machine.py":
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try) or "KeyError" not in {getattr(h.type, "id", None) for h in node.handlers}:
                continue
            subscripts = (sub for stmt in node.body for sub in ast.walk(stmt) if isinstance(sub, ast.Subscript))
            if any(isinstance(sub.slice, ast.Tuple) for sub in subscripts):
                wrong.append(f"{path.name}:{node.lineno}")
    return wrong


def test_tables_are_read_only_through_transition() -> None:
    names = {where.rsplit(".", 1)[1] for where in MACHINES}
    assert not _reads_outside_transition(_trees(), names)


def test_a_machines_state_is_set_only_by_transition_or_in_init() -> None:
    trees = _trees()
    moved = set().union(*(_moved_attributes(cls) for _, cls in _classes(trees)))
    assert moved >= {"client", "ours", "state", "phase", "answers"}  # http.bodies' `phase` too
    assert not _states_set_by_hand(trees)


def test_no_private_copy_of_the_lookup_catches_a_tables_key_error() -> None:
    assert not _private_lookups(_trees())


def test_the_gateway_defines_one_illegal_move_error_and_only_the_exceptions_listed() -> None:
    found = {
        f"{module.__name__}.{name}"
        for module in _modules()
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__
    }
    assert found == set(EXCEPTIONS)


# the idioms this replaced, planted: each scan above must name them
PLANTED = """
class Call:
    def __init__(self):
        self.state = RECEIVING

    def move(self, event):
        try:
            self.state = UNARY[(self.state, event)]
        except KeyError:
            raise IllegalTransition(event) from None

    def stream_move(self, event):
        self.phase = transition(PHASES, self.phase, event)

    def close(self):
        self.state = self.phase = ENDED


def _move(conn, event):
    conn.phase = ENDED
    try:
        conn.client, conn.ours = _MOVES[conn.client, conn.ours, event]
    except KeyError:
        raise ProtocolBug(event) from None
"""


def test_the_scans_name_the_planted_idioms() -> None:
    class S(FastState):
        A = "a"
        B = "b"

    class E(FastState):
        GO = "go"

    assert _is_table({(S.A, E.GO): S.B})
    assert not _is_table({("A", "go"): "B"}) and not _is_table({(S.A, E.GO): E.GO})
    # found, so that they must be listed: a table of strings, a joint table of two sides
    assert _keyed_by_tuples({("A", "go"): "B"}) and _keyed_by_tuples({("A", "B", "go"): ("B", "A")})
    assert not _keyed_by_tuples({"A": "B"}) and not _keyed_by_tuples({})
    trees = {Path("planted.py"): ast.parse(PLANTED)}
    assert _reads_outside_transition(trees, {"UNARY", "PHASES"}) == ["planted.py:8 reads UNARY"]
    assert _states_set_by_hand(trees) == ["planted.py:16 sets .phase", "planted.py:20 sets .phase"]
    assert sorted(_private_lookups(trees)) == ["planted.py:21", "planted.py:7"]
