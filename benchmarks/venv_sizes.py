"""What each extra of mslite-triton installs, in MiB, read from the installed files of a venv.

    .venv/bin/python -m benchmarks.venv_sizes        # run with the venv to measure (`make test`'s has every extra)

For each row the closure of its requirements (the distributions installed because of them, their own
requirements followed) is summed from each distribution's files as installed. `make demo`'s venv is the
`server` row plus pip; an extra's own cost is the closure of every extra less the closure of the others. The
venv as a whole is `du -sh .venv` (the interpreter's links and caches besides).
"""

from __future__ import annotations

import os
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "mslite-triton"
EXTRAS = ("server", "test", "mindir", "tune")
MIB = 1 << 20


@cache
def _size(name: str) -> int:
    """Bytes of the installed files of distribution `name`."""
    total = 0
    for f in distribution(name).files or []:
        path = f.locate()
        if os.path.isfile(path):
            total += os.path.getsize(path)
    return total


def closure(name: str, extras: tuple[str, ...] = ()) -> set[str]:
    """`name` and every installed distribution it requires with `extras`, recursively (canonical names)."""
    seen: set[tuple[str, tuple[str, ...]]] = set()  # (distribution, extras) followed already
    todo = [(name, extras)]
    while todo:
        dist_name, wanted = todo.pop()
        try:
            dist = distribution(dist_name)
        except PackageNotFoundError:
            continue  # a requirement whose marker held but that is not installed: nothing on disk
        key = (canonicalize_name(dist.metadata["Name"]), wanted)
        if key in seen:
            continue
        seen.add(key)
        envs = [{"extra": e} for e in wanted] or [{"extra": ""}]
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, tuple(sorted(req.extras))))
    return {n for n, _ in seen}


def mib(names: set[str]) -> float:
    """Installed MiB of `names` (the project itself, an editable install, left out)."""
    return sum(_size(n) for n in names if n != PROJECT) / MIB


def main() -> None:
    """Print one line per row: what it is, MiB."""
    every = closure(PROJECT, EXTRAS)
    rows = [("make demo's packages (server extra, pip)", closure(PROJECT, ("server",)) | closure("pip"))]
    rows.append(("every extra (make test's packages)", every | closure("pip")))
    for extra in EXTRAS[1:]:
        others = closure(PROJECT, tuple(e for e in EXTRAS if e != extra))
        rows.append((f"the {extra} extra alone (beyond the others)", every - others))
    rows.append(("mindspore (the distribution itself)", {"mindspore"}))
    for label, names in rows:
        print(f"{label}: {mib(names):,.0f} MiB")  # noqa: T201 (a command-line report)


if __name__ == "__main__":
    main()
