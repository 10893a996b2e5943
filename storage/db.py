"""The one DuckDB file that holds the CI's history, and how to open it safely.

DuckDB locks the whole file: while one process holds a connection, no other process can open it, not even
read-only (``Could not set lock on file ... Conflicting lock is held``). So:

- a writer connects only while writing (``Database.write()`` / ``Database.transaction()``) and closes at once;
- a reader opens ``read_only=True`` (``Database.read()``) and retries with backoff while someone else holds
  the file, up to ``lock_timeout`` seconds, then raises ``DatabaseLockedError``;
- an existing file is never overwritten or deleted: a file that is not a DuckDB database raises
  ``DatabaseCorruptError`` and is left byte-identical.

The schema is created and migrated in code (``storage.schema``) the first time a writer opens the file.

Two backends behind this one interface: ``Database(spec)`` is the file backend for a path, and the lake backend
(``storage.lake.LakeDatabase``: a DuckLake whose catalog is in PostgreSQL, for several machines) for a spec
``ducklake:postgres:<libpq connection string>`` with its data folder from ``data_path=`` or
``$SOLCI_DATA_PATH``. Both yield DuckDB connections on which the same SQL runs.
"""

from __future__ import annotations

import errno
import os
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

DB_ENV = "SOLCI_DB"
DATA_PATH_ENV = "SOLCI_DATA_PATH"
LAKE_PREFIX = "ducklake:"
DEFAULT_RELATIVE_PATH = Path(".solci") / "history.duckdb"

# Messages DuckDB gives when another holder keeps us out (another process, or this process with another
# configuration: read-only vs read-write connections to one file cannot coexist in one process).
_LOCK_PATTERNS = (
    "could not set lock on file",
    "conflicting lock is held",
    "different configuration than existing connections",
    "resource temporarily unavailable",
)
_CORRUPT_PATTERNS = (
    "not a valid duckdb database file",
    "corrupt",
    "checksum",
    "invalid metadata",
    "serialization error",
)

_BACKOFF_START_S = 0.005
_BACKOFF_MAX_S = 0.2


def default_db_path() -> Path:
    """``$SOLCI_DB`` when set, else ``./.solci/history.duckdb`` (relative to the working directory)."""
    env = os.environ.get(DB_ENV)
    if env:
        return Path(env).expanduser()
    return DEFAULT_RELATIVE_PATH


def is_lake_spec(spec: object) -> bool:
    """A ``ducklake:...`` spec (the lake backend) rather than a file path."""
    return isinstance(spec, str) and spec.startswith(LAKE_PREFIX)


def default_db_spec() -> str | Path:
    """``$SOLCI_DB`` (a path or a ``ducklake:`` spec), else ``./.solci/history.duckdb``."""
    env = os.environ.get(DB_ENV)
    if env and is_lake_spec(env):
        return env
    return default_db_path()


class StorageError(Exception):
    """Base of storage errors; the message names the file and says what to do."""


class DatabaseLockedError(StorageError):
    """Another process (or another connection of this one) holds the database file."""


class DatabaseCorruptError(StorageError):
    """The file exists but is not a readable DuckDB database; it was left untouched."""


class SchemaVersionError(StorageError):
    """The file's schema is newer than this code knows, or the file is not a solci database."""


class HistoryMissingError(StorageError):
    """A reader was pointed at a history file that does not exist (readers never create one)."""


class CatalogUnreachableError(StorageError):
    """The lake's catalog (PostgreSQL) cannot be reached: nothing was read or written."""


class DiskFullError(StorageError, OSError):
    """A write failed for lack of space (ENOSPC / EDQUOT); the transaction was rolled back."""


_DISK_FULL_PATTERNS = ("no space left on device", "disk quota exceeded", "not enough space")


def is_disk_full(exc: BaseException) -> bool:
    """An OSError with ENOSPC/EDQUOT, or a DuckDB error that says so."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc).lower()
    return any(p in text for p in _DISK_FULL_PATTERNS)


# Read-only connections are locked down: the SQL users send through `solci sql` or the dashboard reads the
# history and nothing else (no file outside it, no network, no extension installed or loaded, no setting
# changed back). DuckDB refuses the rest with a PermissionException.
READ_ONLY_CONFIG = {
    "enable_external_access": "false",
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "allow_community_extensions": "false",
    "lock_configuration": "true",
}


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(p in text for p in _LOCK_PATTERNS)


def _is_corrupt_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(p in text for p in _CORRUPT_PATTERNS)


def _holder(exc: BaseException) -> str:
    """The holder DuckDB names in a lock error ('... held in /usr/bin/python3 (PID 123)'), if any."""
    m = re.search(r"held in (.+?\(PID \d+\))", str(exc))
    return f" ({m.group(1)})" if m else ""


# One lock per lake for this process (storage.lake): its writes go one at a time. A database file has a
# _FileGate instead: writes of several threads (or several Database objects on the same file) go one at a
# time, so claim_next and ingest stay atomic inside a process too, and no read overlaps a write.
_PROCESS_LOCKS: dict[str, threading.RLock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()
_THREAD_STATE = threading.local()


def _process_lock(key: str) -> threading.RLock:
    with _PROCESS_LOCKS_GUARD:
        lock = _PROCESS_LOCKS.get(key)
        if lock is None:
            lock = _PROCESS_LOCKS[key] = threading.RLock()
        return lock


class _FileGate:
    """Readers and writers of one database file inside this process: any number of reading threads, or one
    writing thread (which may nest). DuckDB keeps one instance per file and process; a thread opening the file
    read-only while another holds it read-write, or opening it while another closes it, fails ("different
    configuration", "already attached"). Seen as a heartbeat landing during the runner's reads: a good job
    recorded as infra_error. A waiting writer goes first, so a stream of readers cannot starve it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers: dict[int, int] = {}  # thread id -> depth
        self._writer: int | None = None
        self._writer_depth = 0
        self._writers_waiting = 0

    @contextmanager
    def reading(self, timeout: float, what: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer != me and me not in self._readers:
                ok = self._cond.wait_for(lambda: self._writer is None and not self._writers_waiting, timeout)
                if not ok:
                    raise DatabaseLockedError(_in_process_busy(what, timeout))
            self._readers[me] = self._readers.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._readers[me] -= 1
                if not self._readers[me]:
                    del self._readers[me]
                self._cond.notify_all()

    @contextmanager
    def writing(self, timeout: float, what: str) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer != me:
                if me in self._readers:
                    raise StorageError(
                        f"{what}: a write was opened inside a read of the same file in one thread; DuckDB cannot "
                        "hold both. Close the read first."
                    )
                self._writers_waiting += 1
                try:
                    ok = self._cond.wait_for(lambda: self._writer is None and not self._readers, timeout)
                finally:
                    self._writers_waiting -= 1
                if not ok:
                    self._cond.notify_all()
                    raise DatabaseLockedError(_in_process_busy(what, timeout))
                self._writer = me
            self._writer_depth += 1
        try:
            yield
        finally:
            with self._cond:
                self._writer_depth -= 1
                if not self._writer_depth:
                    self._writer = None
                self._cond.notify_all()


def _in_process_busy(what: str, timeout: float) -> str:
    return (
        f"{what}: another thread of this process held this database file for {timeout:.1f} s; nothing was "
        "stored or read. Retry; a thread should only hold the file for a moment."
    )


_FILE_GATES: dict[str, _FileGate] = {}


def _file_gate(key: str) -> _FileGate:
    with _PROCESS_LOCKS_GUARD:
        gate = _FILE_GATES.get(key)
        if gate is None:
            gate = _FILE_GATES[key] = _FileGate()
        return gate


def _open_writers() -> dict[str, duckdb.DuckDBPyConnection]:
    writers = getattr(_THREAD_STATE, "writers", None)
    if writers is None:
        writers = _THREAD_STATE.writers = {}
    return writers


def _transaction_depth() -> dict[str, int]:
    depth = getattr(_THREAD_STATE, "transactions", None)
    if depth is None:
        depth = _THREAD_STATE.transactions = {}
    return depth


class Database:
    """A handle on the history file; it holds no connection between calls.

    ``Database(spec)`` with a ``ducklake:`` spec (or ``$SOLCI_DB`` holding one) makes a
    ``storage.lake.LakeDatabase`` instead: same methods, several machines.
    """

    backend = "file"

    def __new__(cls, path: str | Path | None = None, *args: object, **kwargs: object) -> Database:
        if cls is Database and is_lake_spec(str(path) if path is not None else default_db_spec()):
            from storage.lake import LakeDatabase

            return super().__new__(LakeDatabase)
        return super().__new__(cls)

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        lock_timeout: float = 30.0,
        create: bool = True,
        data_path: str | Path | None = None,
    ) -> None:
        del data_path  # the file backend keeps everything in its one file
        self.path = Path(path).expanduser() if path is not None else default_db_path()
        self.lock_timeout = float(lock_timeout)
        self.create = create  # False: a reader; a missing file is an error (HistoryMissingError), never made
        self._checked = False  # schema known to be current (checked once per object)

    def __repr__(self) -> str:
        return f"Database({str(self.path)!r})"

    @property
    def _key(self) -> str:
        return str(self.path.resolve())

    @property
    def url(self) -> str:
        """What --db / $SOLCI_DB would say to open this history again."""
        return str(self.path)

    def describe(self) -> str:
        """A printable name (no password)."""
        return str(self.path)

    def change_token(self) -> tuple:
        """Changes whenever the history changes (the dashboard's cache key): the file's and its WAL's stat."""
        out: list = []
        for p in (self.path, Path(f"{self.path}.wal")):
            try:
                st = p.stat()
                out += [st.st_mtime_ns, st.st_size]
            except OSError:
                out += [None, None]
        return tuple(out)

    # ----------------------------------------------------------------------------------------- connecting
    def _connect_once(self, *, read_only: bool) -> duckdb.DuckDBPyConnection:
        """One attempt at a connection; a held lock raises duckdb's error (``_is_lock_error``)."""
        try:
            if read_only:
                return duckdb.connect(str(self.path), read_only=True, config=READ_ONLY_CONFIG)
            return duckdb.connect(str(self.path), read_only=False)
        except duckdb.Error as exc:
            if _is_lock_error(exc):
                raise
            if _is_corrupt_error(exc):
                raise DatabaseCorruptError(
                    f"{self.path}: not a readable DuckDB database ({exc}). The file was left untouched. "
                    "Move it aside (e.g. rename it to history.duckdb.bad) to start a new history, "
                    f"or point --db / ${DB_ENV} at another file."
                ) from exc
            raise StorageError(f"{self.path}: cannot open the database: {exc}") from exc

    @contextmanager
    def _connection(self, *, read_only: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection held while no other thread of this process holds a conflicting one (``_FileGate``),
        retried with jittered backoff while another process holds the file. The gate is held only for one
        attempt at a time, never across the wait: a thread waiting out another process's lock does not hold
        up this process's other threads."""
        if self.path.exists() and self.path.is_dir():
            raise StorageError(f"{self.path}: is a directory, not a database file; pass a file path (--db).")
        gate = _file_gate(self._key)
        deadline = time.monotonic() + self.lock_timeout
        delay = _BACKOFF_START_S
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            with (gate.reading if read_only else gate.writing)(remaining, str(self.path)):
                try:
                    conn = self._connect_once(read_only=read_only)
                except duckdb.Error as exc:
                    locked = exc
                else:
                    try:
                        yield conn
                    finally:
                        conn.close()
                    return
            now = time.monotonic()
            if now >= deadline:
                raise DatabaseLockedError(
                    f"{self.path}: another process holds this database file{_holder(locked)}; waited "
                    f"{self.lock_timeout:.1f} s for it. Wait for that process to finish or stop it "
                    "(a runner or dashboard should only hold the file for a moment), or point "
                    f"--db / ${DB_ENV} at another file."
                ) from locked
            time.sleep(min(delay * (0.5 + random.random()), max(0.0, deadline - now)))
            delay = min(delay * 2, _BACKOFF_MAX_S)

    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection (autocommit), created and migrated if needed; closed on exit.

        Use ``transaction()`` for statements that must be stored together.
        """
        from storage import schema

        writers = _open_writers()
        existing = writers.get(self._key)
        if existing is not None:  # nested write in the same thread: reuse the open connection
            yield existing
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connection(read_only=False) as conn:
            writers[self._key] = conn
            try:
                schema.migrate(conn, self.path)
                self._checked = True
                yield conn
            except (duckdb.Error, OSError) as exc:
                if is_disk_full(exc) and not isinstance(exc, DiskFullError):
                    raise DiskFullError(
                        errno.ENOSPC,
                        f"{self.path}: the disk is full ({exc}); nothing of this write was stored. Free space "
                        "and retry (a runner keeps the measured result in its spool).",
                    ) from exc
                raise
            finally:
                writers.pop(self._key, None)

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection inside BEGIN ... COMMIT; any exception rolls everything back.

        Nested in another ``transaction()`` of the same thread and file, it joins the outer transaction.
        """
        depth = _transaction_depth()
        with self.write() as conn:
            if depth.get(self._key):  # nested: part of the enclosing transaction, which commits
                yield conn
                return
            conn.begin()
            depth[self._key] = 1
            try:
                yield conn
            except BaseException:
                try:
                    conn.rollback()
                except duckdb.Error:  # the connection itself is gone (a lost catalog): the first error is the one
                    pass
                raise
            else:
                conn.commit()
            finally:
                depth.pop(self._key, None)

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection (retrying while another process holds the file); closed on exit.

        A missing file is created (with the current schema) first, so a fresh checkout reads an empty history.
        """
        existing = _open_writers().get(self._key)
        if existing is not None:  # this thread is inside write(): read through that connection
            yield existing
            return
        if not self._checked:
            self._ensure_current()
        with self._connection(read_only=True) as conn:
            yield conn

    def _ensure_current(self) -> None:
        from storage import schema

        if not self.create and not self.path.exists():
            raise HistoryMissingError(
                f"{self.path}: no such history file. Nothing was created: measure a commit first (`solci up`, "
                f"`solci run`), or point --db / ${DB_ENV} at an existing history."
            )
        if self.path.exists():
            with self._connection(read_only=True) as conn:
                version = schema.check_version(conn, self.path)
            if version == schema.CURRENT_VERSION:
                self._checked = True
                return
        with self.write():  # creates or migrates
            pass

    def schema_version(self) -> int:
        """The schema version stored in the file (0 when the file does not exist or holds no schema)."""
        from storage import schema

        if not self.path.exists():
            return 0
        with self._connection(read_only=True) as conn:
            return schema.stored_version(conn)


def open_database(
    spec: str | Path | None = None,
    data_path: str | Path | None = None,
    *,
    lock_timeout: float = 30.0,
    create: bool = True,
) -> Database:
    """The history at ``spec``: a file path (file backend) or ``ducklake:postgres:<libpq string>`` (lake
    backend, data folder ``data_path`` or ``$SOLCI_DATA_PATH``); None: ``$SOLCI_DB``, else the default file."""
    return Database(spec, lock_timeout=lock_timeout, create=create, data_path=data_path)
