"""One model parameter's text to its typed value, every error naming the model and the key.

Triton gives a model's parameters as strings (`parameters { key: "..." value { string_value: "..." } }`);
`config.BackendConfig` reads each through `Parameters` with one of the parse functions here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import ConfigError

_OPT_LEVELS = {"disable_all": 0, "basic": 1, "extended": 2, "all": 99}


class Parameters:
    """Reads typed parameter values, naming the model and key in every error."""

    def __init__(self, model: str, params: dict[str, str]) -> None:
        self.model = model
        self.params = params

    def one(self, key: str, parse: Callable[[str], Any], default: Any) -> Any:
        """The value of `key` parsed, or `default` where it is not set."""
        if key not in self.params:
            return default
        return self._parse(key, parse)

    def same(self, keys: tuple[str, ...], parse: Callable[[str], Any], default: Any) -> Any:
        """The value of whichever of `keys` are set; they must agree."""
        values = {k: self._parse(k, parse) for k in keys if k in self.params}
        if len(set(values.values())) > 1:
            shown = " and ".join(f"'{k}'={v!r}" for k, v in values.items())
            raise ConfigError(f"model '{self.model}': {shown} name the same setting with different values")
        return next(iter(values.values()), default)

    def _parse(self, key: str, parse: Callable[[str], Any]) -> Any:
        raw = self.params[key]
        try:
            value = parse(raw)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"model '{self.model}': parameter '{key}' has bad value {raw!r}: {e}") from e
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise ConfigError(f"model '{self.model}': parameter '{key}' must be >= 0, got {value}")
        return value


def param_value(v: Any) -> str:
    """A parameter's text from Triton's JSON (`{"string_value": ...}`) or as given."""
    return str(v.get("string_value", "")) if isinstance(v, dict) else str(v)


def boolean(raw: str) -> bool:
    """1/0, true/false, yes/no, on/off."""
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected one of 1/0/true/false/yes/no/on/off")


def auto_boolean(raw: str) -> bool | None:
    """Auto (None: the backend decides) or a boolean."""
    if raw.strip().lower() == "auto":
        return None
    try:
        return boolean(raw)
    except ValueError:
        raise ValueError("expected auto or one of 1/0/true/false/yes/no/on/off") from None


def bucket_sessions(raw: str) -> str:
    """Auto or one."""
    low = raw.strip().lower()
    if low in ("auto", "one"):
        return low
    raise ValueError("expected auto (one session per bucket on GPU) or one")


def execution_mode(raw: str) -> str:
    """ONNX Runtime's execution mode: sequential (0) or parallel (1)."""
    low = raw.strip().lower()
    if low in ("0", "sequential"):
        return "sequential"
    if low in ("1", "parallel"):
        return "parallel"
    raise ValueError("expected 0 (sequential) or 1 (parallel)")


def opt_level(raw: str) -> int:
    """ONNX Runtime's graph optimization level, by name or number."""
    low = raw.strip().lower().removeprefix("ort_").removeprefix("enable_")
    if low in _OPT_LEVELS:
        return _OPT_LEVELS[low]
    if low.lstrip("-").isdigit() and int(low) in _OPT_LEVELS.values():
        return int(low)
    raise ValueError(f"expected one of {sorted(_OPT_LEVELS)} or {sorted(_OPT_LEVELS.values())}")


def buckets(raw: str) -> tuple[int, ...]:
    """Batch sizes (`buckets.parse`)."""
    from .buckets import parse

    return parse(raw)


def int_list(raw: str) -> tuple[int, ...]:
    """Integers separated by commas or spaces, brackets allowed."""
    text = raw.strip().strip("[]")
    return tuple(int(x) for x in text.replace(" ", ",").split(",") if x.strip())
