#!/bin/sh
# `make cpp-example`: runs the built sample on MobileNetV2 against MSLITE_TRITON_URL, or, without it,
# against the `mslite-triton serve` (this checkout's) that the client starts for the run and stops at exit.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
PATH="$root/.venv/bin:$PATH" exec "$root/examples/cpp/build/main" "$root/examples/model/mobilenetv2.onnx" \
  "$root/examples/model/input.bin" "$@"
