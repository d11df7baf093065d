"""Workers busy for good inside `execute`: how long each outlives its model, and a deadline's answer.

`python -m benchmarks.chaos busy [--rounds 1]`

A server with the gateway and the supervisor's shipped settings (`orphan_grace_s` 15 s) serves the test
zoo's `spin` model (one worker; a request for 2**40 loop iterations never ends) and a copy of it with
`execute_deadline_s` 5. Each round, one row per case:

- unload: a request keeps the worker busy, the model is unloaded (with the admin key); seconds from the
  unload's answer until the worker is gone, and what the client got;
- reload: the same, the model loaded again with a changed config; seconds until the old worker is gone;
- deadline: a never-ending request to the copy; seconds until its client got an answer, the answer, and
  seconds until the model served a short request again.

Bar: a worker busy in `execute` is gone within 30 s of its model's unload.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from mslite_server import LocalServer, ServerConfig
from mslite_server.workers import workers_of
from tests.support import model_zoo
from tests.support.repository import MINIMAL, add_model

FOREVER = 2**40
ONE_WORKER = MINIMAL + "instance_group [ { kind: KIND_CPU, count: 1 } ]\n"
DEADLINE_S = 5
LIMIT_S = 90  # per case: a case that takes longer is reported as failing the bar, not waited for
BAR_S = 30.0


def _call(srv: LocalServer, model: str, n: int, out: dict[str, object]) -> None:
    client = httpclient.InferenceServerClient(srv.http_url.split("://", 1)[1], network_timeout=600)
    data = httpclient.InferInput("n", [1], "INT64")
    data.set_data_from_numpy(np.array([n], np.int64))
    try:
        out["answer"] = f"ok {float(client.infer(model, [data]).as_numpy('count')[0]):g}"
    except Exception as e:  # noqa: BLE001 - the answer is the figure
        out["answer"] = " ".join(str(e).split())[:220]
    out["at"] = time.monotonic()
    client.close()


def _busy(srv: LocalServer, model: str) -> tuple[threading.Thread, dict[str, object], int]:
    [pid] = [w.pid for w in workers_of(srv.process.pid) if w.instance == f"{model}_0_0" and w.state != "Z"]
    out: dict[str, object] = {}
    thread = threading.Thread(target=_call, args=(srv, model, FOREVER, out), daemon=True)
    thread.start()
    time.sleep(1.0)  # inside the loop by now
    return thread, out, pid


def _gone_after(pid: int, since: float) -> float | None:
    deadline = since + LIMIT_S
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            state = ""
        if state in ("", "Z"):
            return time.monotonic() - since
        time.sleep(0.05)
    return None


def _serves(srv: LocalServer, model: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        out: dict[str, object] = {}
        _call(srv, model, 3, out)
        if str(out["answer"]).startswith("ok"):
            return
        time.sleep(0.2)


def _orphan_case(srv: LocalServer, how: str) -> tuple[float | None, str]:
    thread, out, pid = _busy(srv, "spin")
    if how == "unload":
        srv.http_json("POST", "/v2/repository/models/spin/unload", {}, timeout_s=LIMIT_S)
    else:
        config = srv.http_json("GET", "/v2/models/spin/config", None)
        config.setdefault("parameters", {})["bench.reload"] = {"string_value": str(time.monotonic())}
        body = {"parameters": {"config": json.dumps(config)}}
        srv.http_json("POST", "/v2/repository/models/spin/load", body, timeout_s=LIMIT_S)
    seconds = _gone_after(pid, time.monotonic())
    thread.join(LIMIT_S)
    if how == "unload":
        srv.http_json("POST", "/v2/repository/models/spin/load", {}, timeout_s=LIMIT_S)
    _serves(srv, "spin")
    return seconds, str(out.get("answer", "no answer"))


def _deadline_case(srv: LocalServer) -> tuple[float | None, str, float | None]:
    started = time.monotonic()
    thread, out, _ = _busy(srv, "spin_deadline")
    thread.join(LIMIT_S)
    answered = float(out["at"]) - started if "at" in out else None  # type: ignore[arg-type]
    _serves(srv, "spin_deadline")
    return answered, str(out.get("answer", "no answer")), time.monotonic() - started


def busy_campaign(rounds: int) -> int:
    """Run every case `rounds` times; print one row each. Exit status 1 when an orphan outlived the bar."""
    with tempfile.TemporaryDirectory(prefix="chaos-busy-") as tmp:
        repo = Path(tmp)
        add_model(repo, "spin", model_zoo.spin(), ONE_WORKER)
        deadline = f'parameters {{ key: "execute_deadline_s" value {{ string_value: "{DEADLINE_S}" }} }}\n'
        add_model(repo, "spin_deadline", model_zoo.spin(), ONE_WORKER + deadline)
        worst = 0.0
        with LocalServer(ServerConfig(model_repository=repo, gateway=True, startup_timeout_s=240)) as srv:
            for r in range(rounds):
                for how in ("unload", "reload"):
                    seconds, answer = _orphan_case(srv, how)
                    worst = max(worst, seconds if seconds is not None else float("inf"))
                    shown = f"{seconds:.1f} s" if seconds is not None else f"not within {LIMIT_S} s"
                    print(
                        f"round {r + 1} {how}: busy worker gone {shown} after it; the client got: {answer}", flush=True
                    )
                answered, answer, back = _deadline_case(srv)
                shown = f"{answered:.1f} s" if answered is not None else f"none within {LIMIT_S} s"
                print(
                    f"round {r + 1} deadline ({DEADLINE_S} s): answer after {shown}: {answer}; the model served "
                    f"again {back:.1f} s after the request",
                    flush=True,
                )
    print(f"worst: a busy worker outlived its model by {worst:.1f} s (bar: {BAR_S:.0f} s)")
    return 0 if worst <= BAR_S else 1
