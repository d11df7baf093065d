#!/bin/sh
# Fails with the exact apt line when a system package the tests need is missing.
missing=""
command -v bash >/dev/null 2>&1 || missing="$missing bash"
python3 -c "import venv, ensurepip" 2>/dev/null || missing="$missing python3-venv"
if [ -n "$missing" ]; then
  echo "missing system packages; run as root:" >&2
  echo "  apt-get update && apt-get install -y --no-install-recommends$missing" >&2
  exit 1
fi
