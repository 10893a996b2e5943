#!/usr/bin/env bash
# The sandbox the local executor measures a commit's kernel in: Debian's `bubblewrap` (apt), idempotent.
#   scripts/setup_sandbox.sh          install bwrap when it is missing (sudo when not root), then check that it
#                                     can create namespaces here
set -euo pipefail
if ! command -v bwrap >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_sandbox: no bwrap and no apt-get here; install bubblewrap, or measure with --trusted" >&2
    exit 1
  fi
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "setup_sandbox: needs root or sudo: apt-get install bubblewrap" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
fi
if ! bwrap --ro-bind / / --unshare-all --die-with-parent true 2>/tmp/solci-bwrap.err; then
  echo "setup_sandbox: bwrap cannot create namespaces here: $(tail -n1 /tmp/solci-bwrap.err)" >&2
  exit 1
fi
echo "setup_sandbox: $(bwrap --version) works here"
