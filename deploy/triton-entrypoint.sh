#!/bin/sh
# The image's entrypoint: `mslite-triton serve` in front of the image's own tritonserver
# (MSLITE_TRITON_SERVER_BIN, set by the Dockerfile). Clients reach only the gateway, on the public ports, with
# its request checks, admission control and shared-memory rules; tritonserver listens on Unix sockets in a
# folder of mode 0700 inside the container; the supervisor restarts what dies. Metrics stay public for
# Prometheus. Arguments are `mslite-triton serve`'s (the Dockerfile's CMD: the model repository, every
# interface, the ports).
#
# Model control, shared memory, logging, trace and weights updates need the `mslite-key` header carrying
# MSLITE_TRITON_KEY (docker-compose.yml and the KServe runtime take it from the deployment); without it, a new
# key is made at start and printed in the log.
set -eu
if [ -z "${MSLITE_TRITON_KEY:-}" ]; then
  echo "mslite-triton: MSLITE_TRITON_KEY is not set: a new admin key is made at start (printed below)" >&2
fi
exec mslite-triton serve "$@"
