#!/usr/bin/env bash
# The browser the dashboard's browser test and benchmark drive: Debian's `chromium` (apt), used by Playwright
# through executable_path=/usr/bin/chromium (Playwright's own browser download is not needed).
#   scripts/setup_browser.sh          install chromium when it is missing (idempotent; sudo when not root)
# Prints the browser's path and version. Playwright itself comes with the dev extras (pip install -e ".[dev]").
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -euo pipefail
. "$(dirname "$0")/apt_install.sh"

find_browser() {
  for b in "${SOLCI_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    if [ -n "$b" ] && [ -x "$b" ]; then
      echo "$b"
      return 0
    fi
  done
  return 1
}

if browser=$(find_browser); then
  echo "setup_browser: $browser is installed ($("$browser" --version 2>/dev/null | head -n1 || echo '?'))"
  exit 0
fi

apt_install setup_browser chromium fonts-dejavu-core
browser=$(find_browser) || { echo "setup_browser: chromium was installed but not found on disk" >&2; exit 1; }
echo "setup_browser: $browser installed ($("$browser" --version 2>/dev/null | head -n1 || echo '?'))"
