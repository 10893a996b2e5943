"""The file backend: the whole history in one DuckDB file on this machine, and how to open it safely.

DuckDB locks the whole file: while one process holds a connection, no other process can open it, not even
read-only (``Could not set lock on file ... Conflicting lock is held``). So:

- a writer connects only while writing (``write()`` / ``transaction()``) and closes at once;
- a reader opens ``read_only=True`` (``read()``) and retries with backoff while someone else holds the file, up
  to ``lock_timeout`` seconds, then raises ``DatabaseLockedError``;
- an existing file is never overwritten or deleted: a file that is not a DuckDB database raises
  ``DatabaseCorruptError`` and is left byte-identical.

The schema is created and migrated in code (``storage.schema``) the first time a writer opens the file. The job
queue is the file's ``jobs`` table (``storage.file_queue``).
"""

from __future__ import annotations

import errno
import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

import duckdb

from storage import schema
from storage.backend import (
    DB_ENV,
    READ_ONLY_CONFIG,
    Database,
    DatabaseCorruptError,
    DatabaseLockedError,
    DiskFullError,
    HistoryMissingError,
    StorageError,
    is_disk_full,
)
from storage.file_queue import FileQueue

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


# A database file has a _FileGate per process: writes of several threads (or several FileDatabase objects on the
# same file) go one at a time, so claim_next and ingest stay atomic inside a process too, and no read overlaps a
# write.
_GATES_GUARD = threading.Lock()


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
    with _GATES_GUARD:
        gate = _FILE_GATES.get(key)
        if gate is None:
            gate = _FILE_GATES[key] = _FileGate()
        return gate


class FileDatabase(Database):
    """A history file (see the module's docstring); it holds no connection between calls."""

    backend = "file"

    def __init__(self, path: str | Path, *, lock_timeout: float = 30.0, create: bool = True) -> None:
        super().__init__(lock_timeout=lock_timeout, create=create)
        self.path = Path(path).expanduser()

    def __repr__(self) -> str:
        return f"FileDatabase({str(self.path)!r})"

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

    @cached_property
    def queue(self) -> FileQueue:
        """The file's ``jobs`` table as the job queue."""
        return FileQueue(self)

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
        existing = self._open_writer()
        if existing is not None:  # nested write in the same thread: reuse the open connection
            yield existing
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connection(read_only=False) as conn, self._writer_open(conn):
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

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection (retrying while another process holds the file); closed on exit.

        A missing file is created (with the current schema) first, so a fresh checkout reads an empty history.
        """
        existing = self._open_writer()
        if existing is not None:  # this thread is inside write(): read through that connection
            yield existing
            return
        if not self._checked:
            self._ensure_current()
        with self._connection(read_only=True) as conn:
            yield conn

    def _ensure_current(self) -> None:
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
        if not self.path.exists():
            return 0
        with self._connection(read_only=True) as conn:
            return schema.stored_version(conn)
