"""What runs in the launcher process: the embedded tritonserver, its supervisor, `mslite-triton` (serve, tune).

The validating gateway, which the launcher starts in a process of its own, lives in `server/gateway/`.
"""

from .launcher import LOOPBACK, EmbeddedServer, ServerConfig, ServerStartError

__all__ = ["LOOPBACK", "EmbeddedServer", "ServerConfig", "ServerStartError"]
