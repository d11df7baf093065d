#!/bin/sh
# The Debian packages the tests and the other-language clients need. As root with apt-get, installs the
# missing ones; otherwise prints the one apt-get line to run and fails, before anything slow starts.
missing=""
python3 -c "import venv, ensurepip" 2>/dev/null || missing="$missing python3-venv"
# tests/integration/test_deploy.py, test_scaleout.py, test_cpp.py, test_java.py
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
printf '#include <curl/curl.h>\n' | g++ -E -x c++ - >/dev/null 2>&1 || missing="$missing libcurl4-openssl-dev"
command -v javac >/dev/null 2>&1 || missing="$missing default-jdk-headless"
# tests/integration/test_perf_analyzer.py and the benchmarks: perf_analyzer links libb64
ldconfig -p 2>/dev/null | grep -q "libb64.so.0d" || missing="$missing libb64-0d"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing system packages:$missing"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  exit $?
fi
echo "missing system packages; run as root:" >&2
echo "  apt-get update && apt-get install -y --no-install-recommends$missing" >&2
exit 1
