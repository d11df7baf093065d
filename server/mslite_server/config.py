"""How to start one local server (`ServerConfig`), and one model's row of its repository index."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mslite_contract.gateway_options import GatewayLimits
from mslite_server.ports import LOOPBACK

# Long enough for a reload's new instances to load before the old ones they replace, still serving, are
# taken for orphans (see `FaultDetector`); short enough that an unloaded model's busy worker is gone in 30 s.
ORPHAN_GRACE_S = 15.0


@dataclass(frozen=True)
class ServerConfig:
    """How to start one local server (`LocalServer`). Ports of 0 mean "pick a free one"."""

    model_repository: Path
    host: str = LOOPBACK
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    load_models: tuple[str, ...] = ("*",)
    startup_timeout_s: float = 180.0
    exit_timeout_s: int = 30
    log_verbose: int = 0
    shm_default_byte_size: int = 4 * 1024 * 1024
    shm_growth_byte_size: int = 4 * 1024 * 1024
    restrict_admin: bool = True  # model control, shm, logging, trace need the admin key (both protocols)
    supervise: bool = True  # restart the server and reload its models when a worker process dies
    # A gateway or worker process stopped (state T) or failing its liveness probe this long is killed and
    # replaced: a stopped worker let run again can crash tritonserver, and a hung gateway serves nothing.
    hang_s: float = 10.0
    # A worker still running this long after its model was unloaded or loaded again (its instance replaced)
    # is killed: Triton ends it only once its `execute` returns, which one request can put off for good.
    orphan_grace_s: float = ORPHAN_GRACE_S
    # A validating front on the public ports (Triton on private Unix sockets): malformed requests get a 4xx
    # naming the problem, requests over the size cap are refused before they reach Triton (`mslite_gateway`).
    gateway: bool = False
    # The gateway's size caps, admission control and timeouts (each field says what it bounds).
    gateway_limits: GatewayLimits = GatewayLimits()
    extra_args: tuple[str, ...] = field(default=())
    # The tritonserver binary; None: the nvidia-pytriton wheel's. Another installation (the Triton image's
    # /opt/tritonserver) brings its own python backend and stub, which the workspace is composed from.
    tritonserver: Path | None = None
    # The admin key; None: a new one at each start (`restrict_admin` off: none)
    admin_key: str | None = None
    # A client's own server (`mslite_contract.own_server`): the gateway answers only requests with the key, which
    # no key file and no tritonserver flag holds (its sockets' folder is this user's alone); no metrics port.
    private: bool = False


@dataclass(frozen=True)
class ModelState:
    """One row of the repository index."""

    name: str
    version: str
    state: str
    reason: str

    @property
    def ready(self) -> bool:
        """True when Triton reports the model READY."""
        return self.state == "READY"
