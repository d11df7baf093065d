"""Checks that a server neither crashed nor healed: the supervisor and client retries would hide both."""

from __future__ import annotations

from mslite_server import LocalServer
from mslite_server.workers import describe_exit, workers_of

# What the server log holds after a crash or a bug of ours: Triton's crash handler ("Signal (11) received"),
# an abort, a worker found dead, a traceback from the backend, a worker's own crash (its stacks follow).
LOG_ALARMS = (
    "Signal (",
    "terminate called",
    "is not healthy",
    "Traceback",
    "mslite: execute failed",
    "Fatal Python error",
)


def log_alarms(text: str) -> list[str]:
    """The lines of a server log that say something crashed (at most 10)."""
    return [line for line in text.splitlines() if any(alarm in line for alarm in LOG_ALARMS)][:10]


def health_marks(srv: LocalServer) -> tuple[int, tuple[str, ...]]:
    """Tritonserver restarts and the causes of the supervisor's heals so far: a change means something died."""
    supervisor = srv.supervisor
    heals = tuple(f"{h.what}: {h.cause} (healed in {h.seconds:.1f} s)" for h in supervisor.heals) if supervisor else ()
    return srv.restarts, heals


def dead_workers(srv: LocalServer) -> list[str]:
    """Workers that died and are not reaped yet (the supervisor heals them at its next polls), and how.

    A worker that ended cleanly (its model unloaded, exit code 0) is not one.
    """
    if not srv.is_running():
        return []
    return [
        f"pid {w.pid} {describe_exit(w.exit_status)}"
        for w in workers_of(srv.process.pid)
        if w.state == "Z" and w.exit_status != 0
    ]


def assert_never_healed(srv: LocalServer) -> None:
    """The server never restarted nor replaced a worker, and its log holds no crash.

    The supervisor heals crashes and the client retries meanwhile, so without this check a backend crash
    during a test would pass unseen. Tests that kill workers or servers on purpose start their own.
    """
    _, heals = health_marks(srv)
    alarms = log_alarms(srv.log_path.read_text(errors="replace"))
    running = srv.is_running()
    dead = [w.pid for w in workers_of(srv.process.pid) if w.state == "Z"] if running else []  # died too late to heal
    assert running and srv.restarts == 0 and not heals and not alarms and not dead, (
        f"the session server crashed: running {running}, {srv.restarts} restart(s), heals {list(heals)}; "
        f"dead workers {dead}; log: {alarms}"
    )
