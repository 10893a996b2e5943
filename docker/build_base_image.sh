#!/usr/bin/env bash
# Build the two local images the solci Docker executor and docker-compose.yml start from:
#
#   solci-base:bookworm  Debian bookworm (minbase) with python3 (3.11), venv, pip and git, made with
#                        debootstrap and `docker import` (no container registry is needed).
#   solci-deps:latest    the base plus a venv (/opt/venv) holding every dependency of pyproject.toml.
#                        The wheels are downloaded on the host with the host's pip configuration (so the CPU
#                        torch wheel in /opt/wheels is taken), then installed with --no-index inside a
#                        container with the network off, and the container is committed.
#
# Each image is built only when missing (FORCE=1 rebuilds); solci-deps is rebuilt as well when its
# requirements (pyproject dependencies + TORCH_SPEC) change: it carries their hash as a label.
#
# Environment:
#   SOLCI_BASE_IMAGE  image to start from (default solci-base:bookworm, built here). On a GPU host the base
#                     can stay the same (PyPI's CUDA torch wheels carry their CUDA libraries; the driver comes
#                     from the NVIDIA container toolkit at run time) or be any image with python3 + venv, e.g.
#                     a CUDA runtime image: SOLCI_BASE_IMAGE=my-cuda-python:12.8 (pulled if not local).
#   SOLCI_DEPS_IMAGE  name of the deps image (default solci-deps:latest).
#   TORCH_SPEC        the torch requirement (default torch==2.13.0: here the CPU wheel from /opt/wheels;
#                     on a GPU host e.g. TORCH_SPEC=torch==2.9.1 with PIP_EXTRA_INDEX_URL for its CUDA build).
#   PYTHON            host Python whose pip downloads the wheels (default: python3 of the active venv/PATH).
#   DEBIAN_MIRROR     debootstrap mirror (default http://deb.debian.org/debian).
#   FORCE=1           rebuild both images.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=${SOLCI_BASE_IMAGE:-solci-base:bookworm}
deps=${SOLCI_DEPS_IMAGE:-solci-deps:latest}
torch_spec=${TORCH_SPEC:-torch==2.13.0}
python=${PYTHON:-python3}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
force=${FORCE:-0}
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi

have_image() { docker image inspect "$1" >/dev/null 2>&1; }
work=$(mktemp -d /tmp/solci-image-build.XXXXXX)
cleanup() { $sudo rm -rf "$work"; }
trap cleanup EXIT

# ------------------------------------------------------------------------------------------- base image
if [ "$force" = 1 ] || ! have_image "$base"; then
  if [[ "$base" == solci-base:* ]]; then
    echo "build_base_image: debootstrap bookworm -> $base (takes a minute or two)"
    $sudo debootstrap --variant=minbase \
      --include=python3,python3-venv,python3-pip,ca-certificates,git \
      bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
      || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
    $sudo rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
    $sudo tar -C "$work/rootfs" -c . | docker import \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
    $sudo rm -rf "$work/rootfs"
  else
    echo "build_base_image: pulling $base"
    docker pull "$base"
  fi
else
  echo "build_base_image: $base is there"
fi

# ------------------------------------------------------------------------------------------- deps image
mkdir -p "$work/ctx/wheels"
"$python" - "$root/pyproject.toml" "$torch_spec" >"$work/ctx/requirements.txt" <<'PY'
import re, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
torch = sys.argv[2]
out = [torch if re.match(r"torch\b(?![-_\w])", d) else d for d in deps]
print("\n".join(sorted(out)))
PY
req_hash=$(sha256sum "$work/ctx/requirements.txt" | cut -c1-16)
current=$(docker image inspect --format '{{ index .Config.Labels "solci.requirements" }}' "$deps" 2>/dev/null || true)
if [ "$force" != 1 ] && [ "$current" = "$req_hash" ]; then
  echo "build_base_image: $deps is there and up to date (requirements $req_hash)"
  exit 0
fi

pyver=$(docker run --rm --network none "$base" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
hostver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
platform_args=()
if [ "$pyver" != "$hostver" ]; then
  # Download for the image's Python, not the host's.
  platform_args=(--only-binary=:all: --python-version "$pyver" --implementation cp --platform linux_x86_64
                 --platform manylinux2014_x86_64)
  for minor in $(seq 17 39); do platform_args+=(--platform "manylinux_2_${minor}_x86_64"); done
fi
echo "build_base_image: downloading wheels for Python $pyver ($(wc -l <"$work/ctx/requirements.txt") requirements)"
"$python" -m pip download --quiet --dest "$work/ctx/wheels" "${platform_args[@]}" -r "$work/ctx/requirements.txt" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

echo "build_base_image: installing them into $deps (network off)"
name="solci-deps-build-$$"
docker rm -f "$name" >/dev/null 2>&1 || true
docker run --name "$name" --network none -v "$work/ctx:/ctx:ro" "$base" sh -ec '
  python3 -m venv /opt/venv
  /opt/venv/bin/pip install --quiet --no-index --no-cache-dir --find-links /ctx/wheels -r /ctx/requirements.txt
  git config --system --add safe.directory "*"
  printf "#!/bin/sh\nexec python -m ci.cli \"\$@\"\n" >/opt/venv/bin/solci && chmod +x /opt/venv/bin/solci
  find /opt/venv -name __pycache__ -prune -exec rm -rf {} +
'
docker commit \
  --change 'ENV VIRTUAL_ENV=/opt/venv' \
  --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1' \
  --change "LABEL solci.requirements=$req_hash" \
  --change 'CMD ["/bin/bash"]' \
  "$name" "$deps" >/dev/null
docker rm "$name" >/dev/null
echo "build_base_image: built $deps (requirements $req_hash)"
