"""The Java runner's pending-predict bound against the session's server: refused at once, nothing sent."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from pathlib import Path

import pytest

import mslite_triton as mslite
from mslite_contract import settings
from tests.integration.test_java import JAVA, require_jdk
from tests.support.processes import worker_pids
from tests.support.repository import private_tiny

pytestmark = pytest.mark.integration

# Holds one predict (the test stops the worker between READY and go), then predicts again:
# with [runner] max_pending_predicts=1 the second call must fail at once with kLiteServiceDeny.
PROGRAM = """
import mslite.triton.*;
import java.util.*;

public class PendingBound {
    public static void main(String[] args) throws Exception {
        MSContext ctx = new MSContext();
        ctx.init();
        ctx.setServerUrl(args[0]);
        RunnerConfig cfg = new RunnerConfig();
        cfg.init(ctx);
        HashMap<String, String> runnerSection = new HashMap<>();
        runnerSection.put("max_pending_predicts", "1");
        cfg.setConfigInfo("runner", runnerSection);
        ModelParallelRunner runner = new ModelParallelRunner();
        if (!runner.init("triton://" + args[1], cfg)) throw new AssertionError(runner.getLastError());
        List<MSTensor> in = List.of(MSTensor.createTensor("x", new int[] {1, 4}, new float[] {1, 1, 1, 1}));
        System.out.println("READY");  // the test stops the worker, then says go
        System.out.flush();
        new java.io.BufferedReader(new java.io.InputStreamReader(System.in)).readLine();
        Thread held = new Thread(() -> System.out.println("HELD_RESULT " + runner.predict(in, new ArrayList<>())));
        held.start();
        while (runner.getPendingPredicts() < 1) Thread.sleep(10);
        System.out.println("HELD");
        System.out.flush();
        boolean second = runner.predict(in, new ArrayList<>());
        System.out.println("SECOND " + second + " " + runner.getLastError());
        System.out.flush();
        held.join();
        System.out.println("AFTER " + runner.predict(in, new ArrayList<>()));

        ModelParallelRunner plain = new ModelParallelRunner();  // no [runner] section: MindSpore Lite's 1000
        RunnerConfig plainCfg = new RunnerConfig();
        plainCfg.init(ctx);
        if (!plain.init("triton://" + args[1], plainCfg)) throw new AssertionError(plain.getLastError());
        System.out.println("PLAIN " + plain.predict(in, new ArrayList<>()));
    }
}
"""


def test_java_runner_refuses_predicts_beyond_its_bound(server, tmp_path: Path) -> None:
    require_jdk()
    ctx = mslite.Context()
    ctx.server_url = server.grpc_url
    ctx.cpu.thread_num = 1
    ctx.parallel.workers_num = 1
    loaded = mslite.ModelParallelRunner()
    loaded.build_from_file(str(private_tiny(tmp_path, "java_bound")), ctx)  # the Java runner binds to this model
    name = loaded._remote.info.name
    (worker,) = worker_pids(server, name)

    classes = tmp_path / "classes"
    (tmp_path / "PendingBound.java").write_text(PROGRAM)
    sources = [str(p) for p in (JAVA / "src").rglob("*.java")] + [str(tmp_path / "PendingBound.java")]
    build = subprocess.run(["javac", "--release", "17", "-d", str(classes), *sources], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr

    proc = subprocess.Popen(
        ["java", "-cp", str(classes), "PendingBound", server.http_url, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != settings.URL_ENV},
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    ready = lines.get(timeout=300)  # the JVM started and bound to the model
    assert ready == "READY\n", ready + proc.stderr.read()
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
    reader.join(timeout=30)
    rest = "".join(lines.get() for _ in range(lines.qsize()))
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    assert second.startswith("SECOND false predict failed! Error is kLiteServiceDeny: "), second
    assert "max_pending_predicts=1" in second
    assert "HELD_RESULT true" in rest and "AFTER true" in rest and "PLAIN true" in rest
