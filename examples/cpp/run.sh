#!/bin/sh
# `make cpp-example`: runs the built sample on MobileNetV2 against MSLITE_TRITON_URL, or, without it,
# against a `mslite-triton serve` started here on free loopback ports and stopped afterwards.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/examples/cpp/build/main"
model="$root/examples/model/mobilenetv2.onnx"
if [ -n "${MSLITE_TRITON_URL:-}" ]; then
  exec "$bin" "$model" "$root/examples/model/input.bin" "$@"
fi
ports=$("$root/.venv/bin/python" -c "
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(('127.0.0.1', 0))
print(' '.join(str(s.getsockname()[1]) for s in socks))")
set -- $ports "$@"
http=$1 grpc=$2 metrics=$3
shift 3
log=$(mktemp)
"$root/.venv/bin/mslite-triton" serve --model-repository "$root/model_repository" --model mobilenetv2 \
  --http-port "$http" --grpc-port "$grpc" --metrics-port "$metrics" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
i=0
ready="import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)"
until "$root/.venv/bin/python" -c "$ready" "http://127.0.0.1:$http/v2/health/ready" >/dev/null 2>&1; do
  i=$((i + 1))
  if [ $i -gt 240 ] || ! kill -0 $server 2>/dev/null; then
    echo "mslite-triton serve did not start:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  sleep 0.5
done
MSLITE_TRITON_URL="http://127.0.0.1:$http" "$bin" "$model" "$root/examples/model/input.bin" "$@"
