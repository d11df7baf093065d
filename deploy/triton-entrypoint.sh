#!/bin/sh
# The image's entrypoint: tritonserver with the admin APIs (model control, shared memory, logging, trace)
# restricted, on both protocols, to clients sending the `mslite-key: $MSLITE_TRITON_KEY` header, as
# `mslite-triton serve` does. Inference, health and metadata stay open. Arguments are tritonserver's.
set -eu
restricted="model-repository,shared-memory,logging,trace"
if [ -n "${MSLITE_TRITON_KEY:-}" ]; then
  set -- "--http-restricted-api=${restricted}:mslite-key=${MSLITE_TRITON_KEY}" \
         "--grpc-restricted-protocol=${restricted}:mslite-key=${MSLITE_TRITON_KEY}" "$@"
else
  echo "mslite-triton: MSLITE_TRITON_KEY is not set: anyone who reaches the server can load models" >&2
fi
exec tritonserver "$@"
