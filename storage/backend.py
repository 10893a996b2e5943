"""What every backend of the history implements: the abstract ``Database``, its errors, and what both share.

A ``Database`` is a handle on one history; it holds no connection between calls. ``write()``, ``read()`` and
``transaction()`` yield a DuckDB connection on which the same SQL runs whatever the backend; ``queue`` is the
history's job queue (``storage.queue.Queue``). Two implementations: ``storage.file.FileDatabase`` (one DuckDB
file) and ``storage.lake.LakeDatabase`` (a DuckLake on PostgreSQL); ``storage.db.open_database`` parses a spec and
picks one. Callers annotate with and test for ``Database`` (importable from ``storage.db``).
"""

from __future__ import annotations

import errno
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

if TYPE_CHECKING:
    from storage.queue import Queue

DB_ENV = "SOLCI_DB"
DATA_PATH_ENV = "SOLCI_DATA_PATH"


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

# Per thread: the write connection open on each history (by its key), and how deep its transaction() nests.
_THREAD_STATE = threading.local()


def _thread_dict(name: str) -> dict:
    value = getattr(_THREAD_STATE, name, None)
    if value is None:
        value = {}
        setattr(_THREAD_STATE, name, value)
    return value


class Database(ABC):
    """A handle on one history (see the module's docstring); open one with ``storage.db.open_database``."""

    backend: str = ""  # "file" | "lake"
    path: Path | str  # where the history is: the file's path, or a lake's spec (``storage.lake.LakeLocation``)
    lock_timeout: float
    create: bool  # False: a reader; a missing history is an error (HistoryMissingError), never made

    def __init__(self, *, lock_timeout: float = 30.0, create: bool = True) -> None:
        self.lock_timeout = float(lock_timeout)
        self.create = create
        self._checked = False  # schema known to be current (checked once per object)

    # ------------------------------------------------------------------------------------------ naming
    @property
    @abstractmethod
    def _key(self) -> str:
        """What identifies this history within the process (its locks, its open writer)."""

    @property
    @abstractmethod
    def url(self) -> str:
        """What --db / $SOLCI_DB would say to open this history again."""

    @abstractmethod
    def describe(self) -> str:
        """A printable name (no password)."""

    @abstractmethod
    def change_token(self) -> tuple:
        """Changes whenever the history changes (the dashboard's cache key)."""

    # ------------------------------------------------------------------------------------------ connections
    @abstractmethod
    def write(self) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
        """A read-write connection (autocommit), the schema created and migrated if needed; closed on exit.

        Use ``transaction()`` for statements that must be stored together."""

    @abstractmethod
    def read(self) -> AbstractContextManager[duckdb.DuckDBPyConnection]:
        """A read-only, locked-down connection (``READ_ONLY_CONFIG``); closed on exit. Inside ``write()`` of the
        same thread, that connection."""

    @abstractmethod
    def schema_version(self) -> int:
        """The schema version the history holds (0 when it does not exist or holds no schema)."""

    @property
    @abstractmethod
    def queue(self) -> Queue:
        """The history's job queue (``storage.queue.Queue``), made once per object."""

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection inside BEGIN ... COMMIT; any exception rolls everything back.

        Nested in another ``transaction()`` of the same thread and history, it joins the outer transaction.
        """
        depth = _thread_dict("transactions")
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

    # ------------------------------------------------------------------------------------------ for backends
    def _open_writer(self) -> duckdb.DuckDBPyConnection | None:
        """The connection of the ``write()`` this thread holds open on this history, if any."""
        return _thread_dict("writers").get(self._key)

    @contextmanager
    def _writer_open(self, conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """While the body runs, ``conn`` is this thread's open writer on this history (reads and nested writes
        of the thread go through it)."""
        writers = _thread_dict("writers")
        writers[self._key] = conn
        try:
            yield
        finally:
            writers.pop(self._key, None)
