"""Where the CI's history is, and the one place a history is opened: ``open_database(spec)``.

A spec is a path (the file backend, ``storage.file.FileDatabase``: one DuckDB file, one machine) or
``ducklake:postgres:<libpq connection string>`` (the lake backend, ``storage.lake.LakeDatabase``: a DuckLake whose
catalog is in PostgreSQL, for several machines, its data folder from ``data_path=`` or ``$SOLCI_DATA_PATH``); no
spec means ``$SOLCI_DB``, else ``./.solci/history.duckdb``. ``open_database`` parses the spec and picks the
backend; nothing else does. Both backends implement ``Database`` (``storage.backend``): their connections take
the same SQL, their ``queue`` the same calls.

This module also gives every caller the interface's names: ``Database`` (for annotations and ``isinstance``),
the errors (``StorageError`` and its kinds) and ``READ_ONLY_CONFIG``.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage.backend import (
    DATA_PATH_ENV,
    DB_ENV,
    READ_ONLY_CONFIG,
    CatalogUnreachableError,
    Database,
    DatabaseCorruptError,
    DatabaseLockedError,
    DiskFullError,
    HistoryMissingError,
    SchemaVersionError,
    StorageError,
    is_disk_full,
)
from storage.file import FileDatabase
from storage.lake import LakeDatabase

__all__ = [
    "DATA_PATH_ENV",
    "DB_ENV",
    "DEFAULT_RELATIVE_PATH",
    "LAKE_PREFIX",
    "READ_ONLY_CONFIG",
    "CatalogUnreachableError",
    "Database",
    "DatabaseCorruptError",
    "DatabaseLockedError",
    "DiskFullError",
    "FileDatabase",
    "HistoryMissingError",
    "LakeDatabase",
    "SchemaVersionError",
    "StorageError",
    "default_db_path",
    "default_db_spec",
    "is_disk_full",
    "is_lake_spec",
    "open_database",
]

LAKE_PREFIX = "ducklake:"
DEFAULT_RELATIVE_PATH = Path(".solci") / "history.duckdb"


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


def open_database(
    spec: str | Path | None = None,
    data_path: str | Path | None = None,
    *,
    lock_timeout: float = 30.0,
    create: bool = True,
) -> Database:
    """The history at ``spec``: a file path (``FileDatabase``) or ``ducklake:postgres:<libpq string>``
    (``LakeDatabase``, data folder ``data_path`` or ``$SOLCI_DATA_PATH``); None: ``$SOLCI_DB``, else the default
    file. ``create=False``: a reader, which never creates a history (``HistoryMissingError`` instead). Nothing is
    connected until the first read or write."""
    where = default_db_spec() if spec is None else spec
    if is_lake_spec(str(where)):
        data = data_path if data_path is not None else os.environ.get(DATA_PATH_ENV) or None
        return LakeDatabase(str(where), lock_timeout=lock_timeout, create=create, data_path=data)
    return FileDatabase(where, lock_timeout=lock_timeout, create=create)
