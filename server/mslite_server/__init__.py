"""What runs in the launcher process: the tritonserver child process, its supervisor, `mslite-triton` (serve, tune).

The validating gateway, which the launcher starts in a process of its own, is the package `mslite_gateway`;
`gateway_process` is the launcher's handle of it.
"""

from mslite_contract.gateway_options import GatewayLimits

from .launcher import LOOPBACK, EmbeddedServer, ServerConfig, ServerStartError

# GatewayLimits: the type of `ServerConfig.gateway_limits`, so a server's user needs this package only
__all__ = ["LOOPBACK", "EmbeddedServer", "GatewayLimits", "ServerConfig", "ServerStartError"]
