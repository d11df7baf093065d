"""The Java runner's pending-predict bound against the session's server: refused at once, nothing sent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mslite_contract import settings
from tests.support.other_clients import javac, private_model, run_with_a_held_predict

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
    name, worker = private_model(server, tmp_path, "java_bound")  # the Java runner binds to this model
    (tmp_path / "PendingBound.java").write_text(PROGRAM)
    classes = javac(tmp_path / "classes", tmp_path / "PendingBound.java", strict=False)
    env = {k: v for k, v in os.environ.items() if k != settings.URL_ENV}
    command = ["java", "-cp", str(classes), "PendingBound", server.http_url, name]
    run = run_with_a_held_predict(command, worker, ready_s=300, env=env)  # READY: the JVM started and bound
    assert run.returncode == 0, run.stderr
    assert run.second.startswith("SECOND false predict failed! Error is kLiteServiceDeny: "), run.second
    assert "max_pending_predicts=1" in run.second
    assert "HELD_RESULT true" in run.rest and "AFTER true" in run.rest and "PLAIN true" in run.rest
