"""Argument checks that raise MindSpore Lite's exact exception types and messages.

Users port code (and tests) written against ``mindspore_lite``; those tests assert on
``TypeError`` vs ``ValueError`` and on message text, so every wording here follows
``mindspore_lite/_checkparam.py`` character for character. ``Checked`` makes a property of a ``Check``, so each
checked setting of ``Context`` and ``Tensor`` is one declaration.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


def check_isinstance(arg_name: str, arg_value: Any, classes: type, enable_none: bool = False) -> Any:
    """Check that ``arg_value`` is an instance of ``classes``.

    Args:
        arg_name: Name used in the message.
        arg_value: Value to check.
        classes: Expected class.
        enable_none: Accept ``None`` as well.

    Returns:
        ``arg_value`` unchanged.

    Raises:
        TypeError: ``arg_value`` is not an instance of ``classes`` (and not an allowed ``None``).
    """
    if enable_none and arg_value is None:
        return arg_value
    if not isinstance(arg_value, classes):
        raise TypeError(f"{arg_name} must be {classes.__name__}, but got {type(arg_value)}.")
    return arg_value


def check_list_of_element(arg_name: str, arg_value: Any, ele_classes: type, enable_none: bool = False) -> Any:
    """Check that ``arg_value`` is a list whose elements are all instances of ``ele_classes``.

    Args:
        arg_name: Name used in the message.
        arg_value: Value to check.
        ele_classes: Expected class of every element.
        enable_none: Accept ``None`` as well.

    Returns:
        ``arg_value`` unchanged.

    Raises:
        TypeError: ``arg_value`` is not a list, or one of its elements has the wrong type.
    """
    if enable_none and arg_value is None:
        return arg_value
    if not isinstance(arg_value, list):
        raise TypeError(f"{arg_name} must be list, but got {type(arg_value)}.")
    for i, element in enumerate(arg_value):
        if not isinstance(element, ele_classes):
            raise TypeError(f"{arg_name} element must be {ele_classes.__name__}, but got {type(element)} at index {i}.")
    return arg_value


def check_non_negative_int(arg_name: str, arg_value: Any, message: str | None = None) -> int:
    """Check that ``arg_value`` is an ``int`` >= 0.

    Args:
        arg_name: Name used in the ``TypeError`` message.
        arg_value: Value to check.
        message: ``ValueError`` text; defaults to ``"{arg_name} must be a non-negative int."``.

    Returns:
        ``arg_value`` unchanged.

    Raises:
        TypeError: ``arg_value`` is not an int.
        ValueError: ``arg_value`` is negative.
    """
    check_isinstance(arg_name, arg_value, int)
    if arg_value < 0:
        raise ValueError(message if message is not None else f"{arg_name} must be a non-negative int.")
    return int(arg_value)


def check_shape(shape: Any, enable_none: bool = True) -> Any:
    """Check a tensor shape: a list or tuple of ``int``.

    Args:
        shape: Value to check.
        enable_none: Accept ``None`` as well.

    Returns:
        ``shape`` unchanged.

    Raises:
        TypeError: ``shape`` is not a list/tuple, or an element is not an int.
    """
    if enable_none and shape is None:
        return shape
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"shape must be list or tuple, but got {type(shape)}.")
    for i, element in enumerate(shape):
        if not isinstance(element, int):
            raise TypeError(f"shape element must be int, but got {type(element)} at index {i}.")
    return shape


def check_device(device: Any) -> tuple[str, int]:
    """Check a tensor ``device`` argument and split it.

    Args:
        device: ``None``, ``"ascend"`` or ``"ascend:N"``.

    Returns:
        ``(device_type, device_id)``: ``("", -1)`` for ``None``, ``("ascend", -1)`` for ``"ascend"``.

    Raises:
        TypeError: ``device`` is not a str, has more than one ``:``, is not an ascend device,
            or its id is not a non-negative integer.
    """
    if device is None:
        return "", -1
    if not isinstance(device, str):
        raise TypeError(f"device must be str, but got {type(device)}.")
    parts = device.split(":")
    if len(parts) > 2:
        raise TypeError("device must be 'ascend:index', eg: 'ascend:0'")
    if parts[0] != "ascend":
        raise TypeError("now only support ascend device.")
    if len(parts) == 2:
        # str.isdigit also accepts e.g. superscript digits that int() rejects.
        if not (parts[1].isascii() and parts[1].isdigit()):
            raise TypeError("device id should >= 0.")
        return parts[0], int(parts[1])
    return parts[0], -1


def missing_file(who: str, arg_name: str, path: str) -> str:
    """The message for a file argument that names no file: MindSpore Lite's words, then the path.

    MindSpore Lite stops at ``"<who>, <arg_name> does not exist!"``; tests ported from it match that prefix, and
    the path after it (in the words of its ``str()``, ``"model_path: <path>"``) says which file was looked for.
    """
    return f"{who}, {arg_name} does not exist! {arg_name}: {path}"


def model_file_problem(who: str, path: str) -> str | None:
    """What is wrong with `model_path` before anything is read (`missing_file`'s words, or a folder), else None.

    MindSpore Lite reads a folder given as a model and fails with a status; here it is said first, naming the path.
    """
    if path.startswith("triton://"):
        return None
    if not os.path.exists(path):
        return missing_file(who, "model_path", path)
    if os.path.isdir(path):
        return f"{who}! Error is kLiteInputParamInvalid: model_path is a directory, not a model file: {path}"
    return None


@dataclass(frozen=True)
class Check(Generic[T]):
    """How one setting is checked.

    Attributes:
        run: ``run(arg_name, value)`` raises MindSpore Lite's exception for a bad value, naming it ``arg_name``,
            and returns the value to store.
        raises: The lines of the ``Raises:`` section of the property's docstring.
    """

    run: Callable[[str, Any], T]
    raises: tuple[str, ...]


class Checked(Generic[T]):
    """A property whose setter runs a ``Check`` and stores what it returns in ``_<attribute name>``.

    The owner's ``__init__`` sets that attribute to the default, as it would for a hand-written property.
    A list is copied on the way out: editing the list read must not change the setting behind the check.

    Args:
        arg_name: The name MindSpore Lite's messages give the value (e.g. ``cpu_thread_num``).
        check: The check; its ``raises`` lines end the docstring.
        doc: The property's docstring, without its ``Raises:`` section.
    """

    def __init__(self, arg_name: str, check: Check[T], doc: str) -> None:
        self._arg_name = arg_name
        self._check = check.run
        self._slot = ""
        self.__doc__ = doc + "\n\nRaises:\n" + "".join(f"    {line}\n" for line in check.raises)

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Checked[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = getattr(obj, self._slot)
        return list(value) if isinstance(value, list) else value

    def __set__(self, obj: object, value: T) -> None:
        setattr(obj, self._slot, self._check(self._arg_name, value))


def instance_of(classes: type[T]) -> Check[T]:
    """Accept an instance of ``classes`` (``check_isinstance``)."""
    return Check(
        lambda arg_name, value: check_isinstance(arg_name, value, classes), (f"TypeError: not a {classes.__name__}.",)
    )


def non_negative_int(message: str | None = None) -> Check[int]:
    """Accept an ``int`` >= 0 (``check_non_negative_int``); ``message`` replaces the ValueError's text."""
    return Check(
        lambda arg_name, value: check_non_negative_int(arg_name, value, message),
        ("TypeError: not an int.", "ValueError: negative."),
    )


def list_of(element: type[T]) -> Check[list[T]]:
    """Accept a list of ``element`` instances (``check_list_of_element``); a copy is stored."""
    return Check(
        lambda arg_name, value: list(check_list_of_element(arg_name, value, element)),
        (f"TypeError: not a list of {element.__name__}.",),
    )


def one_of(choices: Sequence[str]) -> Check[str]:
    """Accept a str among ``choices``; the ValueError's message lists them."""

    def run(arg_name: str, value: Any) -> str:
        check_isinstance(arg_name, value, str)
        if value not in choices:
            raise ValueError(f"{arg_name} must be in [{', '.join(choices)}], but got {value}.")
        return value

    return Check(run, ("TypeError: not a str.", f"ValueError: not one of {', '.join(choices)}."))
