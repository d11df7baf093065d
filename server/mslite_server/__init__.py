"""What runs in the launcher process: the tritonserver child process, its supervisor, `mslite-triton` (serve, tune).

The validating gateway, which the launcher starts in a process of its own, is the package `mslite_gateway`;
`gateway_process` is the launcher's handle of it.
"""

from .launcher import LOOPBACK, EmbeddedServer, ServerConfig, ServerStartError

__all__ = ["LOOPBACK", "EmbeddedServer", "ServerConfig", "ServerStartError"]
