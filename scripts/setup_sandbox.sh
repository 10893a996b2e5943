#!/usr/bin/env bash
# The sandbox the local executor measures a commit's kernel in: Debian's `bubblewrap` (apt), idempotent.
#   scripts/setup_sandbox.sh          install bwrap when it is missing (sudo when not root), then check that it
#                                     can create namespaces here
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -euo pipefail
. "$(dirname "$0")/apt_install.sh"
if ! command -v bwrap >/dev/null 2>&1; then
  apt_install setup_sandbox bubblewrap
fi
if ! bwrap --ro-bind / / --unshare-all --die-with-parent true 2>/tmp/solci-bwrap.err; then
  echo "setup_sandbox: bwrap cannot create namespaces here: $(tail -n1 /tmp/solci-bwrap.err)" >&2
  exit 1
fi
echo "setup_sandbox: $(bwrap --version) works here"
