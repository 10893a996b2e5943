#!/usr/bin/env bash
# Make a Docker engine and the solci images available on this machine. Idempotent: each step is skipped
# when its result is already there. Used by CI before the Docker tests; safe to run by hand.
#
#   docker/ci_setup.sh            # apt-installs docker.io, debootstrap, docker-compose if missing, starts dockerd,
#                                 # builds solci-base:bookworm and solci-deps:latest if missing
#
# Environment: SOLCI_SKIP_IMAGES=1 only makes sure an engine answers; everything build_base_image.sh reads
# (SOLCI_BASE_IMAGE, SOLCI_DEPS_IMAGE, TORCH_SPEC, DEBIAN_MIRROR, FORCE) is passed through.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)  # v1.29: validates docker-compose.yml
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci_setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "ci_setup: starting dockerd (log: /var/log/solci-dockerd.log)"
  pidfile=/var/run/docker.pid  # left by a dockerd that died: it would refuse to start
  if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then $sudo rm -f "$pidfile"; fi
  $sudo sh -c 'setsid nohup dockerd >/var/log/solci-dockerd.log 2>&1 </dev/null &'
  for _ in $(seq 1 90); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
fi
if ! docker info >/dev/null 2>&1; then
  echo "ci_setup: the Docker engine does not answer; last lines of its log:" >&2
  tail -n 20 /var/log/solci-dockerd.log >&2 || true
  exit 1
fi
echo "ci_setup: Docker engine $(docker version --format '{{.Server.Version}}' 2>/dev/null) answers"

if [ "${SOLCI_SKIP_IMAGES:-0}" != 1 ]; then
  "$here/build_base_image.sh"
fi
