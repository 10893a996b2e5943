#!/usr/bin/env bash
# PostgreSQL for the lake backend's tests (and a local lake): Debian's postgresql package, idempotent.
# The test suite starts its own throw-away cluster with this installation's initdb/pg_ctl (tests/test_lake_pg.py);
# nothing is started here, and the package's default cluster is left alone.
#   scripts/setup_postgres.sh          # apt-get install postgresql when initdb is missing (sudo when not root)
set -euo pipefail

have_pg() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null; }

if have_pg && id postgres >/dev/null 2>&1; then
    echo "setup_postgres: PostgreSQL is installed ($(ls -d /usr/lib/postgresql/*/bin | tail -1))"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_postgres: no apt-get here; install PostgreSQL (initdb, pg_ctl) another way" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "setup_postgres: needs root or sudo to apt-get install" >&2; exit 1; }
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
have_pg || { echo "setup_postgres: postgresql installed but initdb/pg_ctl not found" >&2; exit 1; }
echo "setup_postgres: installed $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
