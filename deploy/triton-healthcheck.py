#!/usr/bin/env python3
"""The image's healthcheck: exit 0 when the server answers ready on this container's HTTP port.

Ready: the gateway is up and tritonserver has loaded its models. Argument: that port (default 8000, as in the
image's CMD). A script, so that the healthcheck command has no argument containing spaces: podman 4.3's
Docker-compatible API splits a healthcheck's arguments on spaces (`python3 -c "import ..."` arrives as
`python3 -c import`), which Docker does not.
"""

import sys
import urllib.request

port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2):
        pass
except OSError as e:  # refused, timed out, or an HTTP error status (HTTPError is an OSError)
    sys.stderr.write(f"not ready: {e}\n")
    sys.exit(1)
