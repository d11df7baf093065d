"""The Java client sizes a runner from a tuned config.ini as the Python client does (no server needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.other_clients import javac

pytestmark = pytest.mark.integration

# In the client's package, to reach ModelConfigs.build (package-private): one line per case, the config's
# worker count and thread_num, or the error.
PROGRAM = """
package mslite.triton;

import java.util.*;

public class TunedConfigCheck {
    static String plan(String configPath, int codeThreads, int codeWorkers, String extraKey) {
        MSContext ctx = new MSContext();
        ctx.init();
        if (codeThreads > 0) ctx.setThreadNum(codeThreads);
        RunnerConfig cfg = new RunnerConfig();
        cfg.init(ctx);
        cfg.setConfigPath(configPath);
        if (codeWorkers > 0) cfg.setWorkersNum(codeWorkers);
        if (extraKey != null) {
            HashMap<String, String> runner = new HashMap<>();
            runner.put(extraKey, "1");
            cfg.setConfigInfo("runner", runner);
        }
        try {
            Map<String, Object> config = ModelConfigs.build(cfg, 2);
            Map<?, ?> params = (Map<?, ?>) config.get("parameters");
            Object threads = ((Map<?, ?>) params.get("thread_num")).get("string_value");
            return ((List<?>) config.get("instance_group")).size() + " workers x " + threads + " threads";
        } catch (Exception e) {
            return "error " + e;
        }
    }

    public static void main(String[] args) {
        System.out.println(plan(args[0], 0, 0, null));
        System.out.println(plan(args[0], 1, 2, null));
        System.out.println(plan(args[0], 0, 0, "bogus"));
        System.out.println(plan(args[1], 0, 0, null));
    }
}
"""


def test_java_runner_applies_a_tuned_config_ini(tmp_path: Path) -> None:
    tuned = tmp_path / "config.ini"
    tuned.write_text("[runner]\nworkers_num=3\nthread_num=2\n")  # as `mslite-triton tune` writes it
    bad = tmp_path / "bad.ini"
    bad.write_text("[runner]\nworkers_num=many\n")
    source = tmp_path / "mslite" / "triton" / "TunedConfigCheck.java"
    source.parent.mkdir(parents=True)
    source.write_text(PROGRAM)
    classes = javac(tmp_path / "classes", source, strict=False)
    run = subprocess.run(
        ["java", "-cp", str(classes), "mslite.triton.TunedConfigCheck", str(tuned), str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "3 workers x 2 threads",  # the tuned values, where the code sets none
        "2 workers x 1 threads",  # values set in code win
        "error kLiteParamInvalid: [runner] has unknown keys [bogus]; known: [max_pending_predicts, workers_num, "
        "thread_num]",
        "error kLiteParamInvalid: [runner] workers_num must be a non-negative int, got 'many'",
    ]
