"""What the C++ and Java client tests share: the sample's files, the JDK, the server's models, held predicts.

Both clients are driven as programs (a compiled sample or a small program of the test's own) against the session
server or against a server the program starts; the helpers here are the parts that do not depend on the language.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import mslite_triton as mslite
from mslite_contract import settings
from tests.support.model_zoo import fixed_classifier, run_reference
from tests.support.processes import worker_pids
from tests.support.repository import GEN, ROOT, private_tiny

JAVA = ROOT / "client" / "java"
JDK_APT_LINE = "apt-get update && apt-get install -y --no-install-recommends default-jdk-headless"


# -- the sample's input and model, and what the Python client answers -------------------------------------------


def write_sample_files(folder: Path) -> Path:
    """MindSpore Lite's sample input (`input.bin`) and the MobileNetV2 it feeds (`mobilenetv2.onnx`)."""
    (folder / "input.bin").write_bytes(GEN.make_input_bin().astype("<f4").tobytes())
    (folder / "mobilenetv2.onnx").write_bytes(GEN.build_mobilenetv2().SerializeToString())
    return folder


def python_client_answer(url: str, files: Path) -> np.ndarray:
    """What the Python client returns for the sample input, from the served repository's mobilenetv2."""
    ctx = mslite.Context()
    ctx.server_url = url
    runner = mslite.ModelParallelRunner()
    runner.build_from_file("triton://mobilenetv2", ctx)
    inputs = runner.get_inputs()
    inputs[0].set_data_from_numpy(np.fromfile(files / "input.bin", dtype="<f4").reshape(1, 3, 224, 224))
    (out,) = runner.predict(inputs)
    return out.get_data_to_numpy()


@dataclass(frozen=True)
class FixedCase:
    """A model with every dim fixed (`model_zoo.fixed_classifier`), two samples, ONNX Runtime's answer at batch 2."""

    model: Path
    input: Path  # the two samples, float32 little-endian, [2, 224, 224, 3]
    expected: np.ndarray  # [2, 10]


def write_fixed_case(folder: Path) -> FixedCase:
    """The fixed-dim resize flow's files: every client resizes `model` to batch 2 and must answer `expected`."""
    x = np.random.default_rng(2).random((2, 224, 224, 3), dtype=np.float32)
    (folder / "fixed_classifier.onnx").write_bytes(fixed_classifier().SerializeToString())
    (folder / "fixed_input.bin").write_bytes(x.astype("<f4").tobytes())
    (expected,) = run_reference(fixed_classifier(free_batch=True), {"input": x})
    return FixedCase(folder / "fixed_classifier.onnx", folder / "fixed_input.bin", expected)


def assert_fixed_answer(path: Path, case: FixedCase) -> None:
    """Another thread layout than in-process ONNX Runtime's: equal to float precision."""
    got = np.fromfile(path, dtype="<f4")
    assert got.size == case.expected.size, (path.name, got.size)
    np.testing.assert_allclose(got.reshape(case.expected.shape), case.expected, rtol=1e-5, atol=1e-6, err_msg=path.name)


# -- Java --------------------------------------------------------------------------------------------------------


def require_jdk() -> None:
    """Fail (never skip) without javac and java: `make test` promises every client, as for C++ and nginx."""
    missing = [tool for tool in ("javac", "java") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"no JDK ({' and '.join(missing)} not on PATH; scripts/check_system.sh says so too): {JDK_APT_LINE}"
        )


def javac(classes: Path, *programs: Path, strict: bool = True) -> Path:
    """The Java client's sources and `programs` compiled into `classes` (`strict`: every lint warning an error)."""
    require_jdk()
    sources = sorted(str(p) for p in (JAVA / "src").rglob("*.java")) + [str(p) for p in programs]
    lint = ["-Xlint:all", "-Werror"] if strict else []
    build = subprocess.run(
        ["javac", *lint, "--release", "17", "-d", str(classes), *sources], capture_output=True, text=True, timeout=300
    )
    assert build.returncode == 0, build.stderr
    return classes


def run_main(classes: Path, url: str, *args: str, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    """The Java sample's Main (compiled into `classes`) against the server at `url`."""
    env = {**os.environ, settings.URL_ENV: url}
    return subprocess.run(
        ["java", "-cp", str(classes), "Main", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


# -- the server's models ----------------------------------------------------------------------------------------


def private_model(server, folder: Path, tag: str) -> tuple[str, int]:
    """A tiny model only this test uses, loaded with one worker: its served name and its worker's pid."""
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = 1
    runner = mslite.ModelParallelRunner()
    runner.build_from_file(str(private_tiny(folder, tag)), ctx)
    (worker,) = worker_pids(server, runner.served_name)
    return runner.served_name, worker


# -- a predict held in a stopped worker ----------------------------------------------------------------------


@dataclass(frozen=True)
class HeldRun:
    """What a program said around a predict held in the worker: the second predict's line, the rest, its exit."""

    second: str
    rest: str
    returncode: int
    stderr: str


def run_with_a_held_predict(
    command: list[str], worker: int, *, ready_s: float = 120, env: dict | None = None
) -> HeldRun:
    """Run a program that prints READY, reads `go`, predicts once (printing HELD) and again at once (SECOND ...).

    The worker is stopped between READY and the answer to the second predict, so the first predict is held
    in it while the second is made; it goes on (SIGCONT) before the program is waited for.
    """
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        ready = lines.get(timeout=ready_s)
        assert ready == "READY\n", ready
        os.kill(worker, signal.SIGSTOP)  # the first predict waits in the worker until SIGCONT
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            held = lines.get(timeout=120)
            assert held == "HELD\n", held
            second = lines.get(timeout=60)  # answered while the first predict is still held
        finally:
            os.kill(worker, signal.SIGCONT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=30)
    rest = "".join(lines.get() for _ in range(lines.qsize()))
    return HeldRun(second, rest, proc.returncode, proc.stderr.read()[-3000:])


# -- programs that start a server of their own -------------------------------------------------------------------


def own_server_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No server URL or key: the program starts `mslite-triton serve` (this venv's); its files stay in tmp_path."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (settings.URL_ENV, settings.ADMIN_KEY_ENV, settings.SERVE_CMD_ENV)
    }
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "TMPDIR": str(tmp_path / "tmp"),
            "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={tmp_path}",
            settings.KEY_DIR_ENV: str(tmp_path / "keys"),
            **extra,
        }
    )
    return env


def processes_mentioning(text: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(proc.name))
        except OSError:
            continue
    return found


def folders_left(tmp: Path) -> list[str]:
    """Folders of ours left in `tmp` by a program and its own server, but the per-user build cache, which stays by
    design (`settings.shared_cache_root`: the server's compiled shared-memory guard is kept there)."""
    cache = Path(settings.shared_cache_root({})).name
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("mslite") and p.name != cache)
