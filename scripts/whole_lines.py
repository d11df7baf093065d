"""Run a Python script so that what its threads print reaches stdout a whole line at a time.

`make demo` runs MindSpore Lite's parallel sample through this, unedited: its 5 threads each print a result
in pieces (`print(x, end=" ")` per value), which on a busy machine interleave mid-line. Here every thread's
text waits in that thread's own buffer until it ends a line, and whole lines are written under one lock.

    python scripts/whole_lines.py SCRIPT [ARG ...]
"""

from __future__ import annotations

import io
import runpy
import sys
import threading
from typing import TextIO


class WholeLines(io.TextIOBase):
    """A text stream that writes to `out` only whole lines, each thread's own."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._partial: dict[int, str] = {}  # thread ident -> its text since its last newline

    def write(self, text: str) -> int:
        """Keep `text` in this thread's buffer; write the lines it completes."""
        me = threading.get_ident()
        with self._lock:
            done, newline, rest = (self._partial.pop(me, "") + text).rpartition("\n")
            if rest:
                self._partial[me] = rest
            if newline:
                self._out.write(done + newline)
                self._out.flush()
        return len(text)

    def flush(self) -> None:
        """Flush `out` (a line still open stays buffered: it is written once whole, or by `close`)."""
        with self._lock:
            self._out.flush()

    def close(self) -> None:
        """Write what no newline ended, thread by thread, then flush (safe to call twice)."""
        with self._lock:
            for rest in self._partial.values():
                self._out.write(rest + "\n")
            self._partial.clear()
            self._out.flush()
        super().close()

    def writable(self) -> bool:
        """Yes: it is a stream to write to."""
        return True


def main(argv: list[str]) -> None:
    """Run the script `argv[0]` as `__main__`, with `argv` as its `sys.argv` and its stdout a `WholeLines`."""
    if not argv:
        raise SystemExit("usage: whole_lines.py SCRIPT [ARG ...]")
    stdout = sys.stdout
    lines = WholeLines(stdout)
    sys.stdout, sys.argv = lines, argv
    try:
        runpy.run_path(argv[0], run_name="__main__")
    finally:
        lines.close()
        sys.stdout = stdout


if __name__ == "__main__":
    main(sys.argv[1:])
