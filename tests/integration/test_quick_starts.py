"""The quick starts' shell commands, as the README and docs/clients.md write them, from a clean clone.

The commands are read from the docs at test time, so a change of the docs changes what runs: the README's Python
quick start (its `make models`, its code saved as `quick_start.py` in the checkout's root, run with the venv's
Python, with no URL and with the URL variable set) and the shell blocks of docs/clients.md's Java and C++
quick starts, each line run by bash in the clone's root as written. Two changes only, both here: the docs' server
URL (`http://127.0.0.1:8000`) becomes the session server's HTTP URL, and the Python quick start's URL (it names
none) is the session server's gRPC URL.

The clone is `git clone` of this checkout's HEAD plus its uncommitted changes to tracked files (`git diff HEAD`),
so what runs is the working tree's docs and code, without its ignored build outputs. It gets the venv that runs
the tests as `.venv/`: a folder of symlinks to that venv's entries, with stamp files of its own named as the
Makefile names them, so `make` finds the packages installed and installs nothing (and writes nothing into the
shared venv). The commands run with a newcomer's environment: no variable of ours but the key folder
(the session server's key file is there) and no venv on `PATH`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from mslite_contract import settings
from tests.support.eventually import eventually
from tests.support.other_clients import require_jdk
from tests.support.repository import ROOT

pytestmark = pytest.mark.integration

DOC_URL = "http://127.0.0.1:8000"  # the server URL the docs' commands name
RUN_TIMEOUT_S = 600  # a build or a run on 2 busy cores, a server start included
OURS = {v.name for v in settings.VARIABLES}  # the environment variables this project reads


# -- what the docs say ---------------------------------------------------------------------------------------------


def _section(doc: str, heading: str) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    lines = (ROOT / doc).read_text().splitlines(keepends=True)
    assert f"{heading}\n" in lines, f"{doc} has no heading {heading!r}"
    level = len(heading.split(" ", 1)[0])
    body, fenced = [], False
    for line in lines[lines.index(f"{heading}\n") + 1 :]:
        fenced ^= line.startswith("```")
        if not fenced and re.match(f"#{{1,{level}}} ", line):
            break
        body.append(line)
    return "".join(body)


def shell_commands(block: str) -> list[str]:
    """The commands of a shell block: comments dropped, lines continued with a backslash joined."""
    commands, pending = [], ""
    for line in block.splitlines():
        code = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].rstrip()
        if code.endswith("\\"):
            pending += code[:-1].strip() + " "
            continue
        command = (pending + code.strip()).strip()
        pending = ""
        if command:
            commands.append(command)
    assert not pending, f"a shell block ends in a continued line: {pending!r}"
    return commands


def clients_block(heading: str) -> list[str]:
    """The commands of the one shell block under `heading` in docs/clients.md."""
    blocks = re.findall(r"```sh\n(.*?)```", _section("docs/clients.md", heading), re.S)
    assert len(blocks) == 1, f"docs/clients.md has {len(blocks)} shell blocks under {heading!r}, the test expects one"
    return shell_commands(blocks[0])


JAVA_HEADING = "### Java (`client/java/`)"
CPP_HEADING = "### C++ (`client/cpp/`)"


@dataclass(frozen=True)
class PythonQuickStart:
    """The README's Python quick start: the make command, the command that runs the saved code, the code, its output."""

    make: str
    run: str
    file_name: str
    code: str
    prints: str


def python_quick_start() -> PythonQuickStart:
    section = _section("README.md", "## Quick start (Python)")
    prose, rest = section.split("```python\n", 1)
    make = re.search(r"run `(make [^`]+)` first", prose)
    run = re.search(r"`(\.venv/bin/python (\S+))`", prose)
    assert make and run, f"the README's quick start no longer says which make and run commands:\n{prose}"
    code = rest.split("```", 1)[0]
    prints = re.search(r"It prints.*?```\n(.*?)```", rest, re.S)
    assert prints, "the README's quick start shows no output"
    return PythonQuickStart(make.group(1), run.group(1), run.group(2), code, prints.group(1).strip())


def shown_scores() -> np.ndarray:
    """The first three MobileNetV2 scores the README's quick start prints for the example input."""
    last = python_quick_start().prints.rsplit("[", 1)[1]
    return np.array([float(v) for v in last.rstrip("]").split()])


# -- the clone and how its commands run ---------------------------------------------------------------------------


def _git(*args: str, cwd: Path = ROOT, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, timeout=300)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


def _stamps() -> list[str]:
    """The stamp files the Makefile's install rule makes, one per set of extras (`.installed-server`, ...)."""
    makefile = (ROOT / "Makefile").read_text()
    extras = re.findall(r"^(?:DEMO_)?EXTRAS := (\S+)$", makefile, re.M)
    assert len(extras) == 2, "the Makefile no longer names DEMO_EXTRAS and EXTRAS"
    return [".installed-" + e.replace(",", "-") for e in extras]


def _venv_view(clone: Path) -> None:
    """`.venv/` in the clone: links to the venv running the tests, and stamps of its own (the packages are there)."""
    venv = Path(sys.prefix)
    if not (venv / "pyvenv.cfg").exists():
        pytest.fail(f"the tests run from a virtualenv (make test's .venv/); {sys.executable} is in none")
    view = clone / ".venv"
    view.mkdir()
    for entry in venv.iterdir():
        if not entry.name.startswith(".installed-"):
            (view / entry.name).symlink_to(entry)
    for stamp in _stamps():
        (view / stamp).touch()  # after the checkout: newer than pyproject.toml, so make installs nothing


def newcomer_env(home: Path, *, own_server: bool, **extra: str) -> dict[str, str]:
    """A newcomer's environment: no server URL, key or serve command set, no venv on PATH.

    `own_server`: the program starts its own server; its temporary files and key folder go under `home`. Without,
    the key folder stays the session's, where the session server's key file is.
    """
    venv_bins = {Path(sys.prefix, "bin").resolve(), Path(sys.executable).parent.resolve()}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() not in venv_bins]
    env = {k: v for k, v in os.environ.items() if not (k in OURS and k != settings.KEY_DIR_ENV) and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(path)
    if own_server:
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        env.update({"TMPDIR": str(home / "tmp"), settings.KEY_DIR_ENV: str(home / "keys")})
    return {**env, **extra}


def run(command: str, clone: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`command` as a shell line in the clone's root."""
    return subprocess.run(
        ["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )


def ran(proc: subprocess.CompletedProcess[str]) -> str:
    """The command's stdout, once it has exited 0 (else the failure shows both outputs' ends)."""
    assert proc.returncode == 0, f"rc {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc.stdout


def processes_in(folder: Path) -> list[int]:
    """Live processes (not zombies) whose working folder is `folder` or under it: what a run left behind."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(proc / "cwd"))
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == folder or folder in cwd.parents):
            found.append(int(proc.name))
    return found


def assert_nothing_left(clone: Path) -> None:
    """A program that started its own server is gone with it: no process runs in the clone any more."""
    eventually(lambda: not processes_in(clone), "the program's own server to stop with it", timeout_s=120)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A clean clone of this checkout with its uncommitted changes, the test venv as `.venv/`, and `make models` run.

    `make models` is the README's command (read from it); it must install nothing.
    """
    base = tmp_path_factory.mktemp("quick_starts")
    checkout = base / "mslite-triton"
    head = _git("rev-parse", "HEAD").decode().strip()
    _git("clone", "-q", "--no-checkout", str(ROOT), str(checkout))
    _git("checkout", "-q", "--detach", head, cwd=checkout)
    changes = _git("diff", "HEAD", "--binary")
    if changes:
        _git("apply", "--whitespace=nowarn", "-", cwd=checkout, stdin=changes)
    _venv_view(checkout)
    try:
        made = ran(run(python_quick_start().make, checkout, newcomer_env(base, own_server=False)))
        assert "pip install" not in made, made  # the venv's stamps stand: make installed nothing
        assert (checkout / "examples" / "model" / "mobilenetv2.onnx").is_file(), made
        assert (checkout / "examples" / "model" / "input.bin").is_file(), made
        yield checkout
    finally:
        for pid in processes_in(checkout):  # a failed test's leftovers; a passing test left none
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


# -- the output the docs promise ------------------------------------------------------------------------------------


def assert_sample_outputs(stdout: str, *, predicts: int, scores: np.ndarray | None) -> None:
    """The Java and C++ samples' output lines: one per predict, each its output's first scores.

    `scores`: what the README's Python quick start prints for the same model and input (the same server, so the
    same numbers); None for random input.
    """
    lines = re.findall(r"^output data is:(.*)$", stdout, re.M)
    assert len(lines) == predicts, stdout[-3000:]
    for line in lines:
        values = np.array([float(v) for v in line.split()])
        assert values.size == 5 and np.isfinite(values).all(), line
        if scores is not None:
            np.testing.assert_allclose(values[:3], scores, rtol=1e-5, atol=1e-8, err_msg=line)


# 5 threads x 2 predicts: what both clients' blocks say their sample does
SAMPLE_PREDICTS = 10


# -- Python ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def python_file(clone: Path) -> Path:
    """The README's quick start code saved in the clone's root under the name its run command gives."""
    quick = python_quick_start()
    path = clone / quick.file_name
    path.write_text(quick.code)
    return path


def test_python_quick_start_starts_its_own_server(clone: Path, python_file: Path, tmp_path: Path):
    quick = python_quick_start()
    stdout = ran(run(quick.run, clone, newcomer_env(tmp_path, own_server=True)))
    assert stdout.strip() == quick.prints
    assert_nothing_left(clone)


def test_python_quick_start_with_a_url(server, clone: Path, python_file: Path, tmp_path: Path):
    quick = python_quick_start()
    env = newcomer_env(tmp_path, own_server=False, **{settings.URL_ENV: server.grpc_url})
    stdout = ran(run(quick.run, clone, env))
    assert stdout.strip() == quick.prints


def test_a_quick_start_saved_in_the_checkout_is_not_linted(clone: Path, python_file: Path, tmp_path: Path):
    """`make lint` with the quick start in the root: its ruff lines pass, though ruff refuses the file itself.

    Only the ruff lines run (`make -n lint` names them): mypy names packages, never the checkout's root.
    """
    env = newcomer_env(tmp_path, own_server=False)
    commands = ran(run("make -n lint", clone, env)).splitlines()
    ruff = [c for c in commands if " -m ruff " in c]
    assert len(ruff) == 2, commands
    for command in ruff:
        ran(run(command, clone, env))
    # the quick start prints, which the project's rules refuse (T201): a lint that covered it would fail
    alone = run(f".venv/bin/python -m ruff check {python_file.name}", clone, env)
    assert alone.returncode != 0 and "T201" in alone.stdout, alone.stdout[-2000:]


# -- Java -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roles:
    """Which command of a block does what: the builds, the run against a URL, the run that starts its own server."""

    builds: list[str]
    with_url: str
    own_server: str


def java_roles() -> Roles:
    commands = clients_block(JAVA_HEADING)
    return Roles(
        builds=[c for c in commands if c.startswith("make ")],
        with_url=_one(commands, f"{settings.URL_ENV}={DOC_URL} java "),
        own_server=_one(commands, "java "),
    )


def cpp_roles() -> Roles:
    commands = clients_block(CPP_HEADING)
    return Roles(
        builds=[c for c in commands if c.startswith(("make cpp-client", "g++ "))],
        with_url=_one(commands, f"{settings.URL_ENV}={DOC_URL} ./"),
        own_server=_one(commands, "make cpp-example"),
    )


def _one(commands: list[str], prefix: str) -> str:
    found = [c for c in commands if c.startswith(prefix)]
    assert len(found) == 1, f"the block has {len(found)} commands starting {prefix!r}: {commands}"
    return found[0]


def test_every_quick_start_command_is_run():
    """Each command of the two blocks has one role here: a line the docs add fails this test until it runs too."""
    for heading, roles in ((JAVA_HEADING, java_roles()), (CPP_HEADING, cpp_roles())):
        assert sorted([*roles.builds, roles.with_url, roles.own_server]) == sorted(clients_block(heading)), heading
    assert [c.split()[0] for c in cpp_roles().builds] == ["make", "g++"]
    assert java_roles().builds == ["make java-client"]


@pytest.fixture(scope="module")
def java_built(clone: Path) -> Path:
    require_jdk()
    for command in java_roles().builds:
        ran(run(command, clone, newcomer_env(clone.parent, own_server=False)))
    return clone


@pytest.fixture(scope="module")
def cpp_built(clone: Path) -> Path:
    for command in cpp_roles().builds:
        ran(run(command, clone, newcomer_env(clone.parent, own_server=False)))
    return clone


def _with_url(command: str, server) -> str:
    assert DOC_URL in command, command
    return command.replace(DOC_URL, server.http_url)  # the session server in place of the docs' URL


def test_java_quick_start_with_a_url(server, java_built: Path, tmp_path: Path):
    command = _with_url(java_roles().with_url, server)
    stdout = ran(run(command, java_built, newcomer_env(tmp_path, own_server=False)))
    assert "failed: 0" in stdout, stdout[-3000:]
    assert_sample_outputs(stdout, predicts=SAMPLE_PREDICTS, scores=shown_scores())


def test_java_quick_start_starts_its_own_server(java_built: Path, tmp_path: Path):
    stdout = ran(run(java_roles().own_server, java_built, newcomer_env(tmp_path, own_server=True)))
    assert "failed: 0" in stdout, stdout[-3000:]
    assert_sample_outputs(stdout, predicts=SAMPLE_PREDICTS, scores=None)  # no input file: random input
    assert_nothing_left(java_built)


# -- C++ ------------------------------------------------------------------------------------------------------------


def test_cpp_quick_start_with_a_url(server, cpp_built: Path, tmp_path: Path):
    command = _with_url(cpp_roles().with_url, server)
    stdout = ran(run(command, cpp_built, newcomer_env(tmp_path, own_server=False)))
    assert_sample_outputs(stdout, predicts=SAMPLE_PREDICTS, scores=shown_scores())


def test_cpp_example_starts_its_own_server(cpp_built: Path, tmp_path: Path):
    stdout = ran(run(cpp_roles().own_server, cpp_built, newcomer_env(tmp_path, own_server=True)))
    assert_sample_outputs(stdout, predicts=SAMPLE_PREDICTS, scores=shown_scores())
    assert_nothing_left(cpp_built)
