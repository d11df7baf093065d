#!/bin/sh
# The set-up of `make test-deploy` (the container tests, tests/containers), as root on Debian 12: podman and its
# tools from Debian, podman's configuration for this kind of host, and the images. What exists is reused: the
# Debian base, the tritonserver base, nginx and Prometheus are built once; the server's image is rebuilt every
# time (podman's layer cache makes that quick when the project is unchanged); after changing a file of
# deploy/local/, remove its image (`podman rmi localhost/mslite-triton-base:2.51`, ...) to have it rebuilt.
# Argument: the project venv's python (for `pip download` of the nvidia-pytriton wheel, from pip's cache when
# it has it). MSLITE_DEBIAN_MIRROR: the Debian mirror for debootstrap (default deb.debian.org).
#
# Images (docs/deployment.md, "Containers, run here"):
#   localhost/mslite-debian:bookworm      debootstrap --variant=minbase, python3 + python3-venv + ca-certificates
#   localhost/mslite-triton-base:2.51     deploy/local/base.Containerfile: the wheel's tritonserver as NGC lays it out
#   localhost/mslite-triton:local         deploy/Dockerfile, unchanged, with TRITON_IMAGE=the base above
#   localhost/mslite-nginx:debian         deploy/local/nginx.Containerfile (test only)
#   localhost/mslite-prometheus:debian    deploy/local/prometheus.Containerfile (test only)
set -eu
PY=${1:-.venv/bin/python}
MIRROR=${MSLITE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CA=/etc/ssl/certs/ca-certificates.crt
WORK=${MSLITE_DEPLOY_WORK:-/var/tmp/mslite-deploy}

# podman with runc (crun fails on hybrid cgroups), netavark + aardvark-dns (bridge networks, names of replicas),
# iptables (netavark's), catatonit (the pause image of `podman kube play`), debootstrap, docker-compose
missing=""
for pkg in podman runc netavark aardvark-dns iptables catatonit debootstrap docker-compose; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing Debian packages; run as root: apt-get install -y --no-install-recommends$missing" >&2
    exit 1
  fi
  echo "installing:$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# runc as the runtime; no default ulimits (this host refuses setting RLIMIT_NPROC)
CONF=/etc/containers/containers.conf
if ! grep -qs '^default_ulimits = \[\]' "$CONF" || ! grep -qs '^runtime = "runc"' "$CONF"; then
  if [ -s "$CONF" ]; then
    echo "$CONF exists without default_ulimits = [] under [containers] and runtime = \"runc\" under [engine]:" \
      "add them (see docs/deployment.md)" >&2
    exit 1
  fi
  mkdir -p /etc/containers
  printf '%s\n' '# mslite-triton (scripts/deploy_setup.sh): runc, no default ulimits' '[containers]' \
    'default_ulimits = []' '' '[engine]' 'runtime = "runc"' > "$CONF"
  echo "wrote $CONF"
fi

mkdir -p "$WORK"
if ! podman image exists localhost/mslite-debian:bookworm; then
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$WORK/rootfs" "$MIRROR" \
    > "$WORK/debootstrap.log" 2>&1 || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
  tar -C "$WORK/rootfs" -c . | podman import - localhost/mslite-debian:bookworm
  rm -rf "$WORK/rootfs"
fi
if ! podman image exists localhost/mslite-triton-base:2.51; then
  mkdir -p "$WORK/wheels"
  "$PY" -m pip download -q --no-deps -d "$WORK/wheels" nvidia-pytriton==0.7.0
  podman build --network host -f deploy/local/base.Containerfile --volume "$WORK/wheels:/wheels:ro" \
    -t localhost/mslite-triton-base:2.51 deploy/local
fi
for name in nginx prometheus; do
  podman image exists "localhost/mslite-$name:debian" ||
    podman build --network host -f "deploy/local/$name.Containerfile" -t "localhost/mslite-$name:debian" deploy/local
done
# the image users build, on the local base; --format docker keeps its HEALTHCHECK; the CA bundle for pip
podman build --format docker --network host --volume "$CA:$CA:ro" \
  --build-arg TRITON_IMAGE=localhost/mslite-triton-base:2.51 -f deploy/Dockerfile -t localhost/mslite-triton:local .

# kubernetes-validate (Kubernetes' JSON schemas, shipped in the package) for the manifests
if [ ! -x .deploy-venv/bin/kubernetes-validate ]; then
  python3 -m venv .deploy-venv
  .deploy-venv/bin/pip install -q kubernetes-validate==1.37.0
fi
