"""`python -m mslite_gateway`: the gateway's process (see `process`)."""

import os
import sys

from mslite_gateway.process import main

if __name__ == "__main__":
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    sys.exit(main())
