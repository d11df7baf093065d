"""What runs in the launcher process: a local Triton server (`LocalServer`), its supervisor, `mslite-triton`.

`LocalServer` is the one handle of a local server: tritonserver as a child process, on ports of this machine.
The clients start a server of their own as a child `mslite-triton serve --private` (`cli.py`), never through
it. The validating gateway, which the launcher starts in a process of its own, is the package
`mslite_gateway`; `gateway_process` is the launcher's handle of it.
"""

from mslite_contract.gateway_options import GatewayLimits

from .local_server import LOOPBACK, LocalServer, ServerConfig, ServerStartError

# GatewayLimits: the type of `ServerConfig.gateway_limits`, so a server's user needs this package only
__all__ = ["LOOPBACK", "GatewayLimits", "LocalServer", "ServerConfig", "ServerStartError"]
