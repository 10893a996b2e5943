# Sourced by the scripts/setup_*.sh: apt_install WHO PACKAGE... installs Debian packages, with sudo when not
# root; a clear line and exit 1 when there is no apt-get or no way to become root.
if [ "${BASH_SOURCE[0]}" = "$0" ] && { [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; }; then  # run, not sourced
  sed -n '1,2p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
apt_install() {
  local who=$1
  shift
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: no apt-get here; install $* another way" >&2
    exit 1
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "$who: needs root or sudo to apt-get install $*" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "$who: installing $* (apt-get)"
  local apt_env=(env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1)
  $sudo "${apt_env[@]}" apt-get update -qq >/dev/null
  $sudo "${apt_env[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
