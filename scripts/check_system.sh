#!/bin/sh
# Fails with the exact apt line when a system package the tests need is missing.
missing=""
command -v bash >/dev/null 2>&1 || missing="$missing bash"
python3 -c "import venv, ensurepip" 2>/dev/null || missing="$missing python3-venv"
# tests/integration/test_deploy.py, test_scaleout.py, test_cpp.py, test_java.py
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
printf '#include <curl/curl.h>\n' | g++ -E -x c++ - >/dev/null 2>&1 || missing="$missing libcurl4-openssl-dev"
command -v javac >/dev/null 2>&1 || missing="$missing default-jdk-headless"
# tests/integration/test_perf_analyzer.py: perf_analyzer links libb64
ldconfig -p 2>/dev/null | grep -q "libb64.so.0d" || missing="$missing libb64-0d"
if [ -n "$missing" ]; then
  echo "missing system packages; run as root:" >&2
  echo "  apt-get update && apt-get install -y --no-install-recommends$missing" >&2
  exit 1
fi
