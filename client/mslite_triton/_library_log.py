"""Where the library's log records go when the application has set up no logging of its own."""

from __future__ import annotations

import logging

from mslite_contract import settings


class _Prefixed(logging.StreamHandler):  # type: ignore[type-arg]
    """Python's last-resort output (stderr, WARNING and up) with the library's name in front of each message.

    Only while the application has configured no logging of its own; then its handlers show the records.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers or self.level < logging.WARNING:
            super().emit(record)


def install() -> None:
    """Give the library's logger its handler, at the level of `settings.LOG_ENV`.

    A level there (info) shows what the library does for you: the local server it starts, the models it
    loads; without one, its warnings still reach stderr with the library's name.
    """
    level = settings.log_level()
    handler = _Prefixed()
    handler.setFormatter(logging.Formatter("mslite_triton: %(message)s"))
    handler.setLevel(level or "WARNING")
    logger = logging.getLogger(__package__)
    logger.addHandler(handler)
    if level:
        logger.setLevel(level)
