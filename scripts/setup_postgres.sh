#!/usr/bin/env bash
# PostgreSQL for the lake backend's tests (and a local lake): Debian's postgresql package, idempotent.
# The test suite starts its own throw-away cluster with this installation's initdb/pg_ctl (tests/support/postgres.py);
# nothing is started here, and the package's default cluster is left alone.
#   scripts/setup_postgres.sh          # apt-get install postgresql when initdb is missing (sudo when not root)
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then  # the header above, and nothing run
  sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
set -euo pipefail
. "$(dirname "$0")/apt_install.sh"

have_pg() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; }

if have_pg && id postgres >/dev/null 2>&1; then
    echo "setup_postgres: PostgreSQL is installed ($(ls -d /usr/lib/postgresql/*/bin | tail -1))"
    exit 0
fi
apt_install setup_postgres postgresql
have_pg || { echo "setup_postgres: postgresql installed but initdb/pg_ctl not found" >&2; exit 1; }
echo "setup_postgres: installed $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
