#!/usr/bin/env bash
# Make a Docker engine and the solci images available on this machine, in one command. Idempotent: each
# step is skipped when its result is already there. Used by CI before the Docker tests; safe to run by hand.
#
#   docker/ci_setup.sh            # the variant this host needs: cuda when it has an NVIDIA GPU, else cpu
#   docker/ci_setup.sh --gpu      # solci-deps:cuda directly (one build: no CPU build first)
#   docker/ci_setup.sh --cpu      # solci-deps:cpu (what CI builds and tests)
#   docker/ci_setup.sh --engine-only   # only make sure an engine answers
#   docker/ci_setup.sh --force    # rebuild the images even when they are up to date
#
# Steps: apt-installs docker.io, debootstrap and docker-compose when missing; starts dockerd in the
# background when no engine answers (log /var/log/solci-dockerd.log; its pid goes to
# /var/run/solci-dockerd.pid so that `./dev down` can stop it again); then docker/build_base_image.sh builds
# solci-base:bookworm and the variant (solci-deps:cpu or solci-deps:cuda, tagged solci-deps:latest too).
#
# Environment: SOLCI_SKIP_IMAGES=1 is --engine-only; everything build_base_image.sh reads (SOLCI_BASE_IMAGE,
# SOLCI_DEPS_IMAGE, SOLCI_CONSTRAINTS, DEBIAN_MIRROR, FORCE, PYTHON) is passed through.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
log=/var/log/solci-dockerd.log
pidfile=${SOLCI_DOCKERD_PIDFILE:-/var/run/solci-dockerd.pid}

variant=auto
images=1
[ "${SOLCI_SKIP_IMAGES:-0}" = 1 ] && images=0
while [ $# -gt 0 ]; do
  case $1 in
    --gpu|--cuda) variant=cuda ;;
    --cpu) variant=cpu ;;
    --engine-only) images=0 ;;
    --force) export FORCE=1 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ci_setup: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$variant" = auto ]; then
  if [ -e /dev/nvidia0 ] || command -v nvidia-smi >/dev/null 2>&1; then variant=cuda; else variant=cpu; fi
fi

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)  # v1.29 (Debian has no compose v2)
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci_setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "ci_setup: starting dockerd (log: $log; stop it with ./dev down)"
  stale=/var/run/docker.pid  # left by a dockerd that died: it would refuse to start
  if [ -f "$stale" ] && ! kill -0 "$(cat "$stale" 2>/dev/null)" 2>/dev/null; then $sudo rm -f "$stale"; fi
  $sudo sh -c "setsid nohup dockerd >'$log' 2>&1 </dev/null & echo \$! >'$pidfile'"
  for _ in $(seq 1 90); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  # dockerd writes its own pid file once it runs: the authoritative pid of the engine started here
  if [ -f "$stale" ]; then $sudo sh -c "cat '$stale' >'$pidfile'"; fi
fi
if ! docker info >/dev/null 2>&1; then
  echo "ci_setup: the Docker engine does not answer; last lines of its log:" >&2
  tail -n 20 "$log" >&2 || true
  exit 1
fi
echo "ci_setup: Docker engine $(docker version --format '{{.Server.Version}}' 2>/dev/null) answers"

if [ "$variant" = cuda ] && ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia \
   && ! command -v nvidia-container-runtime-hook >/dev/null 2>&1 && ! command -v nvidia-ctk >/dev/null 2>&1; then
  echo "ci_setup: warning: no NVIDIA container toolkit found: containers will not see the GPU (install it and" \
       "restart the engine, see docker/README.md; solci doctor checks it)" >&2
fi
if [ "$images" = 1 ]; then
  "$here/build_base_image.sh" --variant "$variant"
fi
