#!/usr/bin/env bash
# Build the dependency image solci measures in: one recipe, two variants (a flag picks one).
#
#   docker/build_base_image.sh --variant cpu     solci-deps:cpu   torch's CPU build (what CI builds and tests)
#   docker/build_base_image.sh --variant cuda    solci-deps:cuda  torch's CUDA build (a GPU host)
#   docker/build_base_image.sh --variant cuda --print-requirements   what would be installed; builds nothing
#   docker/build_base_image.sh --variant cuda --print-constraints    only the variant's pins (what ./dev uses)
#
# Both variants:
#   solci-base:bookworm   Debian bookworm (minbase) made with debootstrap and `docker import` (no container
#                         registry is needed): python3 (3.11) with its headers (python3-dev), venv, gcc and
#                         libc6-dev (Triton compiles its CUDA driver module with a C compiler against Python.h
#                         at first use), git, ca-certificates. Shared by the two variants.
#   solci-deps:<variant>  the base plus /opt/venv holding pyproject.toml's dependencies at the exact versions of
#                         constraints.txt (the venv of ./dev uses the same file; the CUDA variant swaps only
#                         torch's build and its CUDA wheels, see the "#cuda" lines there), the `solci` launcher
#                         (python -m ci.cli; the source comes in the images built on top) and the unprivileged
#                         user solci (uid 10001, home /home/solci). No solci source code.
#                         Also tagged solci-deps:latest (the Docker executor's default base).
# The wheels are downloaded on the host with the host's pip configuration, then installed with --no-index in
# a container with the network off, and that container is committed. Each image is built only when missing
# or when its recipe changed (labels solci.recipe / solci.requirements hold the hashes); FORCE=1 rebuilds.
#
# Environment:
#   SOLCI_VARIANT      cpu | cuda, when --variant is not given (default cpu)
#   SOLCI_BASE_IMAGE   image to start from (default solci-base:bookworm, built here); any image with python3,
#                      venv, python3-dev and gcc works (it is pulled when it is not local)
#   SOLCI_DEPS_IMAGE   name of the deps image (default solci-deps:<variant>)
#   SOLCI_CONSTRAINTS  the pins (default constraints.txt at the repository root)
#   SOLCI_NO_LATEST=1  do not move the solci-deps:latest alias
#   PYTHON             host Python whose pip downloads the wheels (default python3)
#   DEBIAN_MIRROR      debootstrap mirror (default http://deb.debian.org/debian)
#   FORCE=1            rebuild both images
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
variant=${SOLCI_VARIANT:-cpu}
print_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --variant) variant=${2:-}; shift ;;
    --variant=*) variant=${1#--variant=} ;;
    --print-requirements) print_only=1 ;;
    --print-constraints) print_only=2 ;;
    -h|--help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_base_image: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $variant in
  cpu|cuda) ;;
  *) echo "build_base_image: --variant must be cpu or cuda, got '$variant'" >&2; exit 2 ;;
esac
base=${SOLCI_BASE_IMAGE:-solci-base:bookworm}
deps=${SOLCI_DEPS_IMAGE:-solci-deps:$variant}
constraints=${SOLCI_CONSTRAINTS:-$root/constraints.txt}
python=${PYTHON:-python3}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
force=${FORCE:-0}
[ -f "$constraints" ] || { echo "build_base_image: no constraints file $constraints" >&2; exit 2; }

work=$(mktemp -d /tmp/solci-image-build.XXXXXX)
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
cleanup() { $sudo rm -rf "$work"; }
trap cleanup EXIT

# --------------------------------------------------------------------------- what the variant installs
mkdir -p "$work/ctx/wheels"
# requirements.txt: pyproject's dependencies; constraints.txt: the variant's pins (see constraints.txt's head)
"$python" - "$root/pyproject.toml" "$constraints" "$variant" "$work/ctx" <<'PY'
import re, sys, tomllib
pyproject, constraints, variant, out = sys.argv[1:]
deps = tomllib.load(open(pyproject, "rb"))["project"]["dependencies"]
pins = []
for line in open(constraints, encoding="utf-8"):
    line = line.rstrip("\n")
    if line.startswith("#cuda "):
        if variant == "cuda":
            pins.append(line[len("#cuda "):].strip())
        continue
    pin = line.split(" #", 1)[0].strip()
    if not pin or pin.startswith("#"):
        continue
    if variant == "cuda" and re.search(r"#\s*cpu\b", line):
        continue
    pins.append(pin)
open(f"{out}/requirements.txt", "w").write("\n".join(sorted(deps)) + "\n")
open(f"{out}/constraints.txt", "w").write("\n".join(pins) + "\n")
PY
pin_of() { sed -n "s/^$1==\([^ ]*\).*/\1/p" "$work/ctx/constraints.txt" | head -n 1; }
torch_pin=$(pin_of torch)
triton_pin=$(pin_of triton)
if [ "$print_only" = 2 ]; then
  cat "$work/ctx/constraints.txt"
  exit 0
elif [ "$print_only" = 1 ]; then
  echo "# $deps (variant $variant, base $base): requirements"
  cat "$work/ctx/requirements.txt"
  echo "# constraints"
  cat "$work/ctx/constraints.txt"
  exit 0
fi

have_image() { docker image inspect "$1" >/dev/null 2>&1; }
label_of() { docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }

# ------------------------------------------------------------------------------------------- base image
packages=python3,python3-venv,python3-dev,gcc,libc6-dev,git,ca-certificates
base_recipe=$(printf 'bookworm minbase %s' "$packages" | sha256sum | cut -c1-16)
if [[ "$base" == solci-base:* ]]; then
  if [ "$force" = 1 ] || ! have_image "$base" || [ "$(label_of "$base" solci.recipe)" != "$base_recipe" ]; then
    echo "build_base_image: debootstrap bookworm -> $base (a minute or two)"
    $sudo debootstrap --variant=minbase --include="$packages" \
      bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
      || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
    $sudo rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
    $sudo tar -C "$work/rootfs" -c . | docker import \
      --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' \
      --change "LABEL solci.recipe=$base_recipe" - "$base" >/dev/null
    $sudo rm -rf "$work/rootfs"
  else
    echo "build_base_image: $base is there (recipe $base_recipe)"
  fi
elif ! have_image "$base"; then
  echo "build_base_image: pulling $base"
  docker pull "$base"
fi

# ------------------------------------------------------------------------------------------- deps image
# Everything that decides the content: the base, the requirements and pins, this script's install step.
req_hash=$( { docker image inspect --format '{{.Id}}' "$base"; echo "$variant";
              cat "$work/ctx/requirements.txt" "$work/ctx/constraints.txt";
              sed -n '/^# ---- install/,$p' "$0"; } | sha256sum | cut -c1-16)
tag_latest() {
  if [ "${SOLCI_NO_LATEST:-0}" != 1 ] && [ "$deps" != solci-deps:latest ]; then
    docker tag "$deps" solci-deps:latest
    echo "build_base_image: solci-deps:latest is now $deps"
  fi
}
if [ "$force" != 1 ] && [ "$(label_of "$deps" solci.requirements)" = "$req_hash" ]; then
  echo "build_base_image: $deps is there and up to date (torch $torch_pin, triton $triton_pin; $req_hash)"
  tag_latest
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
size="a few hundred MB"
[ "$variant" = cuda ] && size="several GB: torch's CUDA build and its CUDA libraries"
echo "build_base_image: downloading wheels for Python $pyver, variant $variant (torch $torch_pin, triton $triton_pin; $size)"
"$python" -m pip download --quiet --prefer-binary --dest "$work/ctx/wheels" "${platform_args[@]}" \
  -r "$work/ctx/requirements.txt" -c "$work/ctx/constraints.txt" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# ---- install (network off) ------------------------------------------------------------------------
echo "build_base_image: installing them into $deps (network off)"
name="solci-deps-build-$$"
docker rm -f "$name" >/dev/null 2>&1 || true
docker run --name "$name" --network none -v "$work/ctx:/ctx:ro" "$base" sh -ec '
  python3 -m venv /opt/venv
  /opt/venv/bin/pip install --quiet --no-index --no-cache-dir --disable-pip-version-check \
    --find-links /ctx/wheels -r /ctx/requirements.txt -c /ctx/constraints.txt
  cp /ctx/constraints.txt /opt/venv/solci-constraints.txt  # the pins, for the images built on top (Dockerfile)
  git config --system --add safe.directory "*"
  printf "#!/bin/sh\nexec python -m ci.cli \"\$@\"\n" >/opt/venv/bin/solci && chmod +x /opt/venv/bin/solci
  getent passwd solci >/dev/null || useradd --uid 10001 --user-group --create-home --home-dir /home/solci \
    --shell /bin/bash solci
  mkdir -p /data /out && chown solci:solci /data /out
  find /opt/venv -name __pycache__ -prune -exec rm -rf {} +
  # what Triton needs at run time, checked here so that a broken recipe never becomes an image
  command -v gcc >/dev/null
  test -f "$(/opt/venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()[\"include\"])")/Python.h"
  /opt/venv/bin/python -c "import torch, triton, duckdb; print(\"torch\", torch.__version__, \"triton\", triton.__version__)"
'
previous=$(docker image inspect --format '{{.Id}}' "$deps" 2>/dev/null || true)
docker commit \
  --change 'ENV VIRTUAL_ENV=/opt/venv' \
  --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 NVIDIA_DRIVER_CAPABILITIES=compute,utility' \
  --change "LABEL solci.requirements=$req_hash solci.variant=$variant solci.torch=$torch_pin solci.triton=$triton_pin" \
  --change 'CMD ["/bin/bash"]' \
  "$name" "$deps" >/dev/null
docker rm "$name" >/dev/null
echo "build_base_image: built $deps (variant $variant, torch $torch_pin, triton $triton_pin; $req_hash)"
tag_latest
# the image this one replaces, unless something still uses it (another tag, a container, an image on top)
if [ -n "$previous" ]; then docker image rm "$previous" >/dev/null 2>&1 || true; fi
