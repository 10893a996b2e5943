#!/usr/bin/env bash
# The browser the dashboard's browser test and benchmark drive: Debian's `chromium` (apt), used by Playwright
# through executable_path=/usr/bin/chromium (Playwright's own browser download is not needed).
#   scripts/setup_browser.sh          install chromium when it is missing (idempotent; sudo when not root)
# Prints the browser's path and version. Playwright itself comes with the dev extras (pip install -e ".[dev]").
set -euo pipefail

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

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_browser: no chromium and no apt-get here; install Chromium and set SOLCI_CHROMIUM=/path/to/it" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup_browser: installing chromium needs root (no sudo here): apt-get install chromium" >&2
    exit 1
  fi
  sudo="sudo"
fi
echo "setup_browser: installing Debian's chromium (apt-get)"
apt_env=(env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1)
$sudo "${apt_env[@]}" apt-get update -q >/dev/null
$sudo "${apt_env[@]}" apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null
browser=$(find_browser) || { echo "setup_browser: chromium was installed but not found on disk" >&2; exit 1; }
echo "setup_browser: $browser installed ($("$browser" --version 2>/dev/null | head -n1 || echo '?'))"
