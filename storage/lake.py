"""The lake backend: one history for runners on several machines, a DuckLake on PostgreSQL.

``--db`` / ``$SOLCI_DB`` = ``ducklake:postgres:<libpq connection string>`` (e.g. ``ducklake:postgres:dbname=lake
host=db.internal user=solci``; a password belongs in ``~/.pgpass`` or ``$PGPASSWORD``, never in the spec, which
is printed); ``--data-path`` / ``$SOLCI_DATA_PATH`` = the folder of the lake's Parquet files (needed to create a
lake; every machine must see it at the same path; an existing lake remembers it).

DuckLake keeps the tables as Parquet files in the data folder and their catalog (snapshots, files, inlined small
inserts) in PostgreSQL, so any number of DuckDB clients on any number of machines read and write one history.
``LakeDatabase`` implements ``storage.backend.Database`` like the file backend (``write()``, ``read()``,
``transaction()`` yielding a DuckDB connection on which the same SQL runs: the lake is attached as ``lake`` and
``USE lake`` makes unqualified table names resolve there):

- **extensions**: DuckDB cannot download extensions on these machines; the ``duckdb-extension-ducklake`` and
  ``duckdb-extension-postgres-scanner`` packages (pinned with duckdb 1.5.5) ship them and are LOADed from disk.
- **one DuckDB instance per process and mode** (read-write, read-only) with the lake attached; each call gets
  its own cursor, closed afterwards. No file lock exists, so nothing needs closing between calls.
- **write transactions are serialized fleet-wide** by a PostgreSQL advisory lock (``pg_advisory_lock``, waiting
  at most ``lock_timeout``, then ``DatabaseLockedError``). DuckLake merges concurrent *appends*, but
  judging deletes and rewrites rows of ``verdicts``, ``steps``, ``noise`` and ``records``, and DuckLake refuses
  to commit a transaction that inserts into a table another one deleted from meanwhile. A transaction takes
  0.05-0.3 s, so a fleet sustains a few transactions per second: far more than runners measuring for a minute
  each produce. Readers never wait.
- **migrations** run inside that lock, so exactly one process applies them and the others wait, then see
  the current version.
- **readers are locked down** like the file's: the lake is attached READ_ONLY, external access is off except
  the data folder (``allowed_directories``), extensions cannot be loaded, configuration is locked. The
  catalog's PostgreSQL role is what DuckLake reads the catalog with: give the dashboard and ``solci sql`` a
  role with SELECT only (README, "Several hosts").
- **an unreachable catalog** raises ``CatalogUnreachableError`` with the (password-free) spec and what to do;
  the cached instance is dropped so the next call reconnects.

The job queue of a lake lives in PostgreSQL tables next to the catalog (``storage.lake_queue.PgQueue``, the lake's
``queue``); readers see it
as the tables ``jobs`` and ``watch_state`` (temporary views over the PostgreSQL tables, attached read-only).
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb

from storage import schema
from storage.backend import (
    DATA_PATH_ENV,
    DB_ENV,
    READ_ONLY_CONFIG,
    CatalogUnreachableError,
    Database,
    DatabaseLockedError,
    DiskFullError,
    HistoryMissingError,
    StorageError,
    is_disk_full,
)
from storage.lake_queue import PgQueue

PG_PREFIX = "ducklake:postgres:"
ALIAS = "lake"
METADATA_ALIAS = f"__ducklake_metadata_{ALIAS}"
CONNECT_TIMEOUT_ENV = "SOLCI_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_S = 5
# pg_advisory_lock(namespace, key): one namespace for solci, one key per purpose
LOCK_NAMESPACE = 0x501C1
WRITE_LOCK = 1
QUEUE_DDL_LOCK = 2
EXTENSIONS = (  # (python package, extension name); postgres_scanner first: ducklake's catalog needs it
    ("duckdb_extension_postgres_scanner", "postgres_scanner", "duckdb-extension-postgres-scanner"),
    ("duckdb_extension_ducklake", "ducklake", "duckdb-extension-ducklake"),
)
_UNREACHABLE_PATTERNS = (
    "unable to connect to postgres",
    "failed to query most recent snapshot",
    "connection refused",
    "could not connect to server",
    "connection to server",
    "server closed the connection",
    "terminating connection",
    "no connection to the server",
    "connection is closed",
    "the connection is lost",
    "ssl syscall",
    "timeout expired",
    "could not translate host name",
    "could not receive data from server",
    "could not send data to server",
    "failed to attach ducklake metadata",
)
CONNECTION_LOST_STATES = ("57P01", "57P02", "57P03")  # admin_shutdown, crash_shutdown, cannot_connect_now
LOCK_WAIT_STATES = ("55P03", "57014")  # lock_not_available, query_canceled


def redact(text: str) -> str:
    """The text with libpq passwords masked."""
    text = re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", str(text), flags=re.IGNORECASE)
    return re.sub(r"(postgres(?:ql)?://[^:/@\s]+:)[^@\s]+@", r"\1***@", text)


def _psycopg_error(exc: BaseException) -> bool:
    try:
        import psycopg  # lazy: psycopg takes ~0.3 s to import; a history file never needs it
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return False
    return isinstance(exc, psycopg.Error)


def pg_connection_lost(exc: BaseException) -> bool:
    """A psycopg error that says the session to the server is gone or cannot be had: no SQLSTATE (raised by the
    client: connect failed, connection closed or broken) on an OperationalError, class 08 (connection
    exception) or 57P01-57P03 (the server shuts down or starts). Not a lock wait, a deadlock or a serialization
    failure: those are OperationalErrors of a live session too."""
    if not _psycopg_error(exc):
        return False
    import psycopg  # lazy: see _psycopg_error

    state = getattr(exc, "sqlstate", None)
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state.startswith("08") or state in CONNECTION_LOST_STATES


def is_lock_wait(exc: BaseException) -> bool:
    """A psycopg error that says a statement gave up waiting (lock_timeout 55P03, statement_timeout or a cancel
    57014): the session is fine, the catalog is busy."""
    return _psycopg_error(exc) and getattr(exc, "sqlstate", None) in LOCK_WAIT_STATES


def is_unreachable(exc: BaseException) -> bool:
    """A DuckDB or psycopg error that says the catalog's server cannot be reached (psycopg's by SQLSTATE,
    ``pg_connection_lost``; DuckDB's by message)."""
    if _psycopg_error(exc):
        return pg_connection_lost(exc)
    text = str(exc).lower()
    return any(p in text for p in _UNREACHABLE_PATTERNS)


def extension_files() -> list[Path]:
    """The DuckLake and postgres extension files of the installed packages, for this DuckDB version."""
    out = []
    for module, name, dist in EXTENSIONS:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            raise StorageError(
                f"the lake backend needs the Python package {dist}=={duckdb.__version__} (pip install -e . installs "
                "it; DuckDB cannot download extensions here)"
            ) from None
        path = Path(mod.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
        if not path.exists():
            raise StorageError(
                f"{path}: missing; {dist} must match duckdb {duckdb.__version__} "
                f"(pip install {dist}=={duckdb.__version__})"
            )
        out.append(path)
    return out


def _literal(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _with_timeout(conninfo: str) -> str:
    if re.search(r"\bconnect_timeout\s*=", conninfo) or "://" in conninfo:
        return conninfo
    try:
        seconds = int(float(os.environ.get(CONNECT_TIMEOUT_ENV) or DEFAULT_CONNECT_TIMEOUT_S))
    except ValueError:
        seconds = DEFAULT_CONNECT_TIMEOUT_S
    return f"{conninfo} connect_timeout={max(1, seconds)}"


# One lock per lake for this process: its writes go one at a time (the fleet-wide lock is per session).
_PROCESS_LOCKS: dict[str, threading.RLock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_lock(key: str) -> threading.RLock:
    with _PROCESS_LOCKS_GUARD:
        lock = _PROCESS_LOCKS.get(key)
        if lock is None:
            lock = _PROCESS_LOCKS[key] = threading.RLock()
        return lock


class LakeLocation(str):
    """``db.path`` of a lake: the spec itself (so ``open_database(db.path)`` opens it again), with the few Path
    methods callers use on a history location."""

    def resolve(self) -> LakeLocation:
        return self

    def expanduser(self) -> LakeLocation:
        return self

    def exists(self) -> bool:
        return True

    def is_dir(self) -> bool:
        return False

    def __fspath__(self) -> str:  # printing, subprocess arguments
        return str.__str__(self)


QUEUE_ALIAS = "solci_queue"
# A reader's `jobs` and `watch_state` are the live queue in PostgreSQL (storage.lake_queue), with the columns and
# types of the file's tables, so the same SQL (solci sql, the dashboard's job list) reads them on both backends.
# Temporary views: they shadow the lake's own (empty) tables of those names for that connection only.
QUEUE_VIEWS = (
    f"""CREATE OR REPLACE TEMP VIEW jobs AS SELECT CAST(id AS BIGINT) AS id, repo, "commit", branch, "trigger",
        status, CAST(attempts AS INTEGER) AS attempts, enqueued_at, started_at, finished_at, outcome, run_id, worker,
        gpu, log, lease_owner, heartbeat_at, gpu_model, base FROM {QUEUE_ALIAS}.solci.jobs""",
    f"""CREATE OR REPLACE TEMP VIEW watch_state AS SELECT repo, branch, last_commit, updated_at
        FROM {QUEUE_ALIAS}.solci.watch_state""",
)


class _Instance:
    """A DuckDB instance with the lake attached, and whether the queue is attached to it too (readers)."""

    __slots__ = ("checked_at", "conn", "queue")

    def __init__(self, conn: duckdb.DuckDBPyConnection, queue: bool) -> None:
        self.conn = conn
        self.queue = queue  # readers: the queue's tables are attached (a cursor makes QUEUE_VIEWS)
        self.checked_at = time.monotonic()  # when PostgreSQL was last asked whether a queue exists


# One DuckDB instance per (spec, data path, mode) for this process; one psycopg session per thread and spec.
_INSTANCES: dict[tuple, _Instance] = {}
_INSTANCES_GUARD = threading.Lock()
_THREAD = threading.local()
_QUEUE_READY: set[str] = set()  # specs whose queue DDL this process applied
_QUEUE_SEEN: set[str] = set()  # specs whose queue tables are known to exist (they are never dropped)
_CATALOG_SEEN: set[str] = set()  # specs whose DuckLake catalog tables are known to exist
_QUEUE_RECHECK_S = 5.0  # a reader's instance without a queue asks PostgreSQL again at most this often
_PING_AFTER_S = 1.0  # a PostgreSQL session idle longer than this is checked before use
_SCHEMA_READY: set[str] = set()
# The dashboard's cache key once the catalog's and the queue's tables exist: one statement (change_token)
_TOKEN_SQL = """SELECT (SELECT max(snapshot_id) FROM ducklake_snapshot), count(*), max(id), sum(attempts),
    count(*) FILTER (WHERE status = 'running'), count(run_id), max(started_at), max(finished_at) FROM solci.jobs"""


class LakeDatabase(Database):
    """A DuckLake on PostgreSQL (see the module's docstring): ``spec`` is ``ducklake:postgres:<libpq string>``,
    ``data_path`` the folder of its Parquet files (needed to create it; an existing lake remembers it)."""

    backend = "lake"

    def __init__(
        self,
        spec: str,
        *,
        lock_timeout: float = 30.0,
        create: bool = True,
        data_path: str | Path | None = None,
    ) -> None:
        super().__init__(lock_timeout=lock_timeout, create=create)
        spec = str(spec)
        if not spec.startswith(PG_PREFIX):
            raise StorageError(
                f"{redact(spec)}: a lake spec is ducklake:postgres:<libpq connection string>, e.g. "
                "ducklake:postgres:dbname=lake host=127.0.0.1 user=solci (only a PostgreSQL catalog is supported)"
            )
        self.path = LakeLocation(spec)
        self.conninfo = _with_timeout(spec[len(PG_PREFIX) :].strip())
        self.data_path = _normalise_data_path(data_path) if data_path else None

    def __repr__(self) -> str:
        return f"LakeDatabase({self.describe()!r})"

    @property
    def _key(self) -> str:
        return str.__str__(self.path)

    @property
    def url(self) -> str:
        return str.__str__(self.path)

    def describe(self) -> str:
        where = f" (data {self.data_path})" if self.data_path else ""
        return redact(str.__str__(self.path)) + where

    @cached_property
    def queue(self) -> PgQueue:
        """The lake's queue in PostgreSQL (``storage.lake_queue``)."""
        return PgQueue(self)

    # ------------------------------------------------------------------------------------------ errors
    def unreachable(self, exc: BaseException) -> CatalogUnreachableError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        return CatalogUnreachableError(
            f"{redact(str.__str__(self.path))}: the lake's catalog (PostgreSQL) is unreachable: {redact(first)[:300]}. "
            "Nothing was read or written. Check that the server runs and this machine can reach it; a runner "
            "keeps its finished results in its spool and uploads them when the catalog is back."
        )

    def locked(self, exc: BaseException) -> DatabaseLockedError:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        return DatabaseLockedError(
            f"{self.describe()}: a statement on the lake's catalog (PostgreSQL) gave up waiting: "
            f"{redact(first)[:300]}. Nothing of it was stored. Another session held what it needed (look for a "
            "stuck process in pg_locks / pg_stat_activity, or a lock_timeout / statement_timeout set on the role "
            "or database); try again."
        )

    def _pg_error(self, exc: BaseException) -> BaseException:
        """A psycopg error as solci reports it: a lost session is CatalogUnreachableError (the cached instances
        are dropped, so the next call reconnects), a lock wait DatabaseLockedError, anything else itself."""
        if pg_connection_lost(exc):
            self._drop_instances()
            return self.unreachable(exc)
        if is_lock_wait(exc):
            return self.locked(exc)
        return exc

    @contextmanager
    def _pg_errors(self) -> Iterator[None]:
        import psycopg  # lazy: psycopg takes ~0.3 s to import; only a lake's processes need it

        try:
            yield
        except psycopg.Error as exc:
            translated = self._pg_error(exc)
            if translated is exc:
                raise
            raise translated from exc

    def _translate(self, exc: BaseException, read_only: bool | None = None) -> BaseException:
        if isinstance(exc, StorageError):
            return exc
        if is_unreachable(exc):
            self._drop_instances()
            return self.unreachable(exc)
        if is_lock_wait(exc):
            return self.locked(exc)
        if is_disk_full(exc):
            return DiskFullError(errno.ENOSPC, f"{self.describe()}: the disk is full ({exc}); nothing was stored")
        return exc

    def _drop_instances(self) -> None:
        with _INSTANCES_GUARD:
            for key in [k for k in _INSTANCES if k[0] == self._key]:
                _INSTANCES.pop(key, None)
        _SCHEMA_READY.discard(self._key)
        pgs = getattr(_THREAD, "pg", {})
        conn = pgs.pop(self._key, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    # ------------------------------------------------------------------------------------------ postgres
    def _pg_session(self) -> Any:
        """This thread's psycopg session to the catalog's database (autocommit), opened when needed."""
        import psycopg  # lazy: psycopg takes ~0.3 s to import; only a lake's processes need it

        pgs = getattr(_THREAD, "pg", None)
        if pgs is None:
            pgs = _THREAD.pg = {}
        conn = pgs.get(self._key)
        if conn is not None and not conn.closed and not conn.broken:
            if time.monotonic() - getattr(conn, "_solci_used", 0.0) < _PING_AFTER_S:
                conn._solci_used = time.monotonic()
                return conn
            try:  # idle for a while: the server may have restarted since (then reconnect once)
                conn.execute("SELECT 1")
                conn._solci_used = time.monotonic()
                return conn
            except psycopg.Error:
                try:
                    conn.close()
                except psycopg.Error:
                    pass
        try:
            conn = psycopg.connect(self.conninfo, autocommit=True, application_name="solci")
        except psycopg.Error as exc:
            raise self.unreachable(exc) from exc
        conn._solci_used = time.monotonic()
        pgs[self._key] = conn
        return conn

    @contextmanager
    def pg(self) -> Iterator[Any]:
        """A psycopg connection inside a PostgreSQL transaction (the queue's tables exist); commits on exit. A lost
        session raises CatalogUnreachableError, a lock wait DatabaseLockedError (rolled back either way)."""
        conn = self._pg_session()
        with self._pg_errors():
            if self._key not in _QUEUE_READY:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_NAMESPACE, QUEUE_DDL_LOCK))
                    conn.execute(schema.QUEUE_DDL)
                _QUEUE_READY.add(self._key)
                _QUEUE_SEEN.add(self._key)
            with conn.transaction():
                yield conn

    def catalog_exists(self) -> bool:
        """Whether the PostgreSQL database holds a DuckLake catalog yet."""
        with self._pg_errors():
            row = self._pg_session().execute("SELECT to_regclass('ducklake_metadata') IS NOT NULL").fetchone()
        return bool(row and row[0])

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        """The fleet-wide write lock (a PostgreSQL advisory lock of this thread's session); reentrant."""
        import psycopg  # lazy: psycopg takes ~0.3 s to import; only a lake's processes need it

        depth = getattr(_THREAD, "lock_depth", None)
        if depth is None:
            depth = _THREAD.lock_depth = {}
        if depth.get(self._key):
            depth[self._key] += 1
            try:
                yield
            finally:
                depth[self._key] -= 1
            return
        conn = self._pg_session()
        timeout_ms = str(max(1, int(self.lock_timeout * 1000)))
        try:  # PostgreSQL queues the waiters and wakes the next one the moment the lock is free
            # One statement: set_config(..., is_local => true) holds for its implicit transaction only, so the
            # wait is bounded and the session's later statements (the queue's) never inherit the timeout.
            conn.execute(
                "SELECT set_config('lock_timeout', %s, true), pg_advisory_lock(%s, %s)",
                (timeout_ms, LOCK_NAMESPACE, WRITE_LOCK),
            )
        except psycopg.Error as exc:
            if is_lock_wait(exc):
                raise DatabaseLockedError(
                    f"{self.describe()}: another writer held the lake's write lock for {self.lock_timeout:.1f} s "
                    "(a runner's transaction takes well under a second: look for a stuck process in pg_locks / "
                    "pg_stat_activity), or raise $SOLCI_LOCK_TIMEOUT."
                ) from None
            translated = self._pg_error(exc)
            if translated is exc:
                raise
            raise translated from exc
        depth[self._key] = 1
        try:
            yield
        finally:
            depth[self._key] = 0
            try:
                conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_NAMESPACE, WRITE_LOCK))
            except psycopg.Error:  # the session is gone: so is its lock
                self._drop_instances()

    # ------------------------------------------------------------------------------------------ duckdb
    def _instance(self, *, read_only: bool) -> _Instance:
        key = (self._key, self.data_path, read_only)
        with _INSTANCES_GUARD:
            inst = _INSTANCES.get(key)
        if inst is not None and read_only and not inst.queue and self._queue_appeared(inst):
            inst = None  # made before the queue existed: attach again, with it
        if inst is not None:
            return inst
        try:
            inst = self._attach(read_only=read_only)
        except duckdb.Error as exc:
            raise self._translate(exc) from exc
        with _INSTANCES_GUARD:
            _INSTANCES[key] = inst
            return inst

    def _queue_appeared(self, inst: _Instance) -> bool:
        """Whether a queue exists now for a reader's instance made without one: known in this process (made,
        used, or seen by change_token) at once, else PostgreSQL is asked at most every _QUEUE_RECHECK_S."""
        if self._key in _QUEUE_SEEN:
            return True
        now = time.monotonic()
        if now - inst.checked_at < _QUEUE_RECHECK_S:
            return False
        inst.checked_at = now
        return self._queue_exists()

    def _attach(self, *, read_only: bool) -> _Instance:
        config = {
            "allow_unsigned_extensions": "true",  # the packaged extension files are not signed for LOAD by path
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
            "allow_community_extensions": "false",
        }
        conn = duckdb.connect(":memory:", config=config)
        for path in extension_files():
            conn.execute(f"LOAD {_literal(str(path))}")
        options = []
        if self.data_path:
            options.append(f"DATA_PATH {_literal(self.data_path)}")
        if read_only:
            options.append("READ_ONLY")
        spec = "ducklake:postgres:" + self.conninfo
        conn.execute(f"ATTACH {_literal(spec)} AS {ALIAS}" + (f" ({', '.join(options)})" if options else ""))
        conn.execute(f"USE {ALIAS}")
        queue = False
        if read_only:
            queue = self._key in _QUEUE_SEEN or self._queue_exists()
            if queue:  # readers see the live queue as `jobs` / `watch_state` (QUEUE_VIEWS)
                conn.execute(f"ATTACH {_literal(self.conninfo)} AS {QUEUE_ALIAS} (TYPE postgres, READ_ONLY)")
            data = self.data_path or self._stored_data_path(conn)
            if data:
                conn.execute(f"SET allowed_directories = [{_literal(data)}]")
            for name, value in READ_ONLY_CONFIG.items():
                conn.execute(f"SET {name} = {value}")
        return _Instance(conn, queue)

    def _queue_exists(self) -> bool:
        with self._pg_errors():
            row = self._pg_session().execute("SELECT to_regclass('solci.jobs') IS NOT NULL").fetchone()
        if row and row[0]:
            _QUEUE_SEEN.add(self._key)
            return True
        return False

    @staticmethod
    def _stored_data_path(conn: duckdb.DuckDBPyConnection) -> str | None:
        try:
            row = conn.execute(
                f"SELECT value FROM {METADATA_ALIAS}.ducklake_metadata WHERE key = 'data_path'"
            ).fetchone()
        except duckdb.Error:
            return None
        return _normalise_data_path(row[0]) if row and row[0] else None

    def _cursor(self, *, read_only: bool) -> duckdb.DuckDBPyConnection:
        try:
            inst = self._instance(read_only=read_only)
            cur = inst.conn.cursor()
            cur.execute(f"USE {ALIAS}")
            if inst.queue:
                for view in QUEUE_VIEWS:
                    cur.execute(view)
        except duckdb.Error as exc:
            raise self._translate(exc) from exc
        return cur

    def _ensure_schema(self, cur: duckdb.DuckDBPyConnection) -> None:
        if self._key in _SCHEMA_READY:
            return
        schema.migrate(cur, self.describe(), backend="lake")
        _SCHEMA_READY.add(self._key)

    # ------------------------------------------------------------------------------------------ interface
    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection (autocommit) under the fleet's write lock; migrates the lake first."""
        existing = self._open_writer()
        if existing is not None:
            yield existing
            return
        if self._key not in _SCHEMA_READY and not self.data_path and not self.catalog_exists():
            raise StorageError(
                f"{self.describe()}: no lake there yet, and creating one needs its data folder: pass --data-path DIR "
                f"or set ${DATA_PATH_ENV} (a folder every machine sees at the same path)."
            )
        with _process_lock(self._key), self._write_lock():
            cur = self._cursor(read_only=False)
            try:
                with self._writer_open(cur):
                    self._ensure_schema(cur)
                    self._checked = True
                    yield cur
            except (duckdb.Error, OSError) as exc:
                translated = self._translate(exc)
                if translated is exc:
                    raise
                raise translated from exc
            finally:
                cur.close()

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only cursor on the lake (the queue seen as ``jobs`` / ``watch_state``); closed on exit."""
        existing = self._open_writer()
        if existing is not None:
            yield existing
            return
        if not self._checked:
            self._ensure_current()
        cur = self._cursor(read_only=True)
        try:
            yield cur
        except duckdb.Error as exc:
            translated = self._translate(exc)
            if translated is exc:
                raise
            raise translated from exc
        finally:
            cur.close()

    def _ensure_current(self) -> None:
        if not self.catalog_exists():
            if not self.create:
                raise HistoryMissingError(
                    f"{self.describe()}: no lake there yet. Nothing was created: measure a commit into it first "
                    f"(`solci run --db ... --data-path DIR`), move a history file there (`solci migrate --to ...`), "
                    f"or point --db / ${DB_ENV} at an existing history."
                )
            with self.write():
                return
        cur = self._cursor(read_only=True)
        try:
            version = schema.check_version(cur, self.describe())
        except duckdb.Error as exc:
            raise self._translate(exc) from exc
        finally:
            cur.close()
        if version == schema.CURRENT_VERSION:
            self._checked = True
            return
        if version == 0 and not self.create:
            raise HistoryMissingError(f"{self.describe()}: the lake holds no solci history yet (nothing was created)")
        with self.write():  # creates or migrates, under the write lock
            pass

    def schema_version(self) -> int:
        """The schema version the lake holds (0 when there is no catalog or no schema yet)."""
        if not self.catalog_exists():
            return 0
        cur = self._cursor(read_only=True)
        try:
            return schema.stored_version(cur)
        except duckdb.Error as exc:
            raise self._translate(exc) from exc
        finally:
            cur.close()

    def change_token(self) -> tuple:
        """Changes whenever the history changes (the dashboard's cache key): the lake's newest snapshot id (every
        commit of any writer makes one) and the queue's state in PostgreSQL (jobs queued, claimed, finished or
        requeued; heartbeats left out). Nothing through DuckDB; one statement to the catalog once both its and
        the queue's tables are known to exist (until then, a look for them first)."""
        import psycopg  # lazy: psycopg takes ~0.3 s to import; only a lake's processes need it

        key = self._key
        with self._pg_errors():
            pg = self._pg_session()
            if key in _CATALOG_SEEN and key in _QUEUE_SEEN:
                try:
                    row = pg.execute(_TOKEN_SQL).fetchone()
                    return (row[0], tuple(row[1:]))
                except psycopg.errors.UndefinedTable:  # the database was made again meanwhile: look again
                    _CATALOG_SEEN.discard(key)
                    _QUEUE_SEEN.discard(key)
            has_lake, has_queue = pg.execute(
                "SELECT to_regclass('ducklake_snapshot') IS NOT NULL, to_regclass('solci.jobs') IS NOT NULL"
            ).fetchone()
            if has_lake and has_queue:
                _CATALOG_SEEN.add(key)
                _QUEUE_SEEN.add(key)
                row = pg.execute(_TOKEN_SQL).fetchone()
                return (row[0], tuple(row[1:]))
            snapshot = pg.execute("SELECT max(snapshot_id) FROM ducklake_snapshot").fetchone()[0] if has_lake else None
            queue = (
                pg.execute(
                    """SELECT count(*), max(id), sum(attempts), count(*) FILTER (WHERE status = 'running'),
                    count(run_id), max(started_at), max(finished_at) FROM solci.jobs"""
                ).fetchone()
                if has_queue
                else None
            )
        return (snapshot, queue)


def _normalise_data_path(path: str | Path) -> str:
    text = str(path)
    if "://" in text:  # an object store URL: as given
        return text if text.endswith("/") else text + "/"
    full = str(Path(text).expanduser().resolve())
    return full if full.endswith("/") else full + "/"


def compact(db: Any, *, keep_days: float = 7.0, grace_hours: float = 1.0) -> dict:
    """DuckLake's housekeeping, in order: inlined rows to Parquet (``ducklake_flush_inlined_data``), adjacent
    small files merged (``ducklake_merge_adjacent_files``), snapshots older than ``keep_days`` expired (time
    travel before that is given up), files no snapshot needs for ``grace_hours`` deleted (a reader still on
    an older snapshot keeps its files meanwhile). Returns counts. On a history file: a CHECKPOINT."""
    if not isinstance(db, LakeDatabase):
        with db.write() as conn:
            conn.execute("CHECKPOINT")
        return {"checkpoint": 1}

    # Each maintenance function runs as one autocommit statement, which commits only once its result has been
    # read to the end: fetchall(), never fetchone() (that left every step uncommitted while reporting its counts).
    def counted(conn: duckdb.DuckDBPyConnection, function: str, columns: str = "count(*)") -> tuple:
        return conn.execute(f"SELECT {columns} FROM {function}").fetchall()[0]

    out: dict[str, int] = {}
    keep = f"now() - INTERVAL '{float(keep_days) * 86400:.0f} seconds'"
    grace = f"now() - INTERVAL '{float(grace_hours) * 3600:.0f} seconds'"
    with db.write() as conn:
        out["inlined_tables_flushed"] = int(counted(conn, f"ducklake_flush_inlined_data('{ALIAS}')")[0])
        merged = counted(
            conn,
            f"ducklake_merge_adjacent_files('{ALIAS}')",
            "coalesce(sum(files_processed), 0), coalesce(sum(files_created), 0)",
        )
        out["files_merged"], out["files_written"] = int(merged[0]), int(merged[1])
        expired = counted(conn, f"ducklake_expire_snapshots('{ALIAS}', older_than => {keep})")
        out["snapshots_expired"] = int(expired[0])
        deleted = counted(conn, f"ducklake_cleanup_old_files('{ALIAS}', older_than => {grace})")
        out["files_deleted"] = int(deleted[0])
    return out
