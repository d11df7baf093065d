"""The one rule for a model name that reaches the file system: uploads, loads, unloads, config rewrites.

Triton 2.51 takes any name in a load (`..` included) and the launcher keeps an uploaded model's files in a
folder of that name (`<workspace>/uploads/<name>`), so a name must be one plain path component: the gateway
refuses the others (400 / INVALID_ARGUMENT) on both protocols, and the launcher never makes a path of one
(it takes names from Triton, which a `--no-gateway` server hears unchecked).
"""

from __future__ import annotations

MAX_MODEL_NAME_BYTES = 200  # in UTF-8; a path component may have 255, and ours get suffixes (`.tmp`, versions)
MODEL_NAME_RULE = (
    f"a model name is 1 to {MAX_MODEL_NAME_BYTES} bytes of UTF-8, does not begin with '.', and holds no "
    "'..', '/', '\\' or NUL"
)


def model_name_problem(name: str) -> str | None:
    """What breaks `MODEL_NAME_RULE` in `name` (a short phrase), or None for a good name."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    if size == 0:
        return "it is empty"
    if size > MAX_MODEL_NAME_BYTES:
        return f"it has {size} bytes"
    if name.startswith("."):
        return "it begins with '.'"
    for part, words in (("..", "'..'"), ("/", "'/'"), ("\\", "'\\'"), ("\0", "NUL")):
        if part in name:
            return f"it holds {words}"
    return None


def check_model_name(name: str) -> None:
    """Refuse a name that breaks `MODEL_NAME_RULE`.

    Raises:
        ValueError: naming the rule and what breaks it.
    """
    problem = model_name_problem(name)
    if problem is not None:
        raise ValueError(f"invalid model name {name[:64]!r}: {problem}; {MODEL_NAME_RULE}")
