"""A real PostgreSQL for the lake tests, started by the test suite itself (no mock); the fixtures that hand it
out (``pg``, ``lake``) are in tests/conftest.py.

``cluster()`` (one a session): Debian's ``initdb`` / ``pg_ctl`` (``scripts/setup_postgres.sh`` installs them) make a
cluster in a fresh temporary folder owned by the ``postgres`` user (the tests run as root in CI, and PostgreSQL
refuses to run as root), serving on a free loopback port with trust authentication; it is stopped and removed at
the end of the session. Without PostgreSQL the lake tests are skipped, except under CI=true, where they fail.

``new_lake(pg, tmp_path)``: a new database in that cluster and a data folder: a ``LakeDatabase`` spec of its own.
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage.db import open_database
from tests.support import PROJECT

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"


def find_pg_bin() -> Path | None:
    for d in sorted(glob.glob(PG_BIN_GLOB), reverse=True):
        if Path(d, "initdb").exists() and Path(d, "pg_ctl").exists():
            return Path(d)
    for name in ("initdb", "pg_ctl"):
        if shutil.which(name) is None:
            return None
    return Path(shutil.which("initdb")).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    """One PostgreSQL cluster in a temporary folder, run as the postgres user when we are root."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="solci-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.user = None
        if os.geteuid() == 0:
            try:
                self.user = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root without a postgres user (scripts/setup_postgres.sh)") from None
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        os.chmod(self.root, 0o755)
        self._names = itertools.count()
        self._run([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8"])

    def _demote(self) -> None:
        if self.user is not None:
            os.setgid(self.user.pw_gid)
            os.setuid(self.user.pw_uid)

    def _run(self, cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        res = subprocess.run(
            cmd, preexec_fn=self._demote, capture_output=True, text=True, timeout=timeout, cwd=self.root
        )
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stdout[-2000:]} {res.stderr[-2000:]}")
        return res

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=300"
        )
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "start"])

    def stop(self) -> None:
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def conninfo(self, dbname: str) -> str:
        return f"dbname={dbname} host=127.0.0.1 port={self.port} user=postgres"

    def create_database(self, prefix: str = "lake") -> str:
        # lazy: psycopg may be missing; cluster() then skips the lake tests instead of failing the whole suite
        import psycopg

        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def destroy(self) -> None:
        try:
            if self.running():
                self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


_CLUSTER: PgCluster | None = None


def cluster() -> PgCluster:
    """The session's cluster (started on first use, stopped at exit); skips (fails under CI=true) without
    PostgreSQL or the lake's Python packages."""
    global _CLUSTER
    if _CLUSTER is not None:
        if not _CLUSTER.running():
            _CLUSTER.start()
        return _CLUSTER
    problem = None
    bin_dir = find_pg_bin()
    if bin_dir is None:
        problem = "PostgreSQL is not installed (scripts/setup_postgres.sh installs it)"
    for mod in ("psycopg", "duckdb_extension_ducklake", "duckdb_extension_postgres_scanner"):
        try:
            __import__(mod)
        except ImportError:
            problem = f"the Python package {mod} is missing (pip install -e .)"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"lake tests need PostgreSQL under CI=true: {problem}")
        pytest.skip(problem)
    c = PgCluster(bin_dir)
    c.start()
    _CLUSTER = c
    atexit.register(c.destroy)
    return c


@dataclass
class Lake:
    spec: str
    data_path: Path
    dbname: str

    def db(self, **kwargs):
        return open_database(self.spec, data_path=self.data_path, **kwargs)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(SOLCI_DB=self.spec, SOLCI_DATA_PATH=str(self.data_path))
        env["PYTHONPATH"] = str(PROJECT)
        env.update(extra)
        return env


def new_lake(pg: PgCluster, tmp_path: Path, prefix: str = "lake") -> Lake:
    name = pg.create_database(prefix)
    data = tmp_path / f"{name}-data"
    return Lake(f"ducklake:postgres:{pg.conninfo(name)}", data, name)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
