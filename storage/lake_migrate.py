"""Moving up: copy a history file into a new lake, then prove the copy (``solci migrate --to ducklake:...``).

``migrate(source, target)``:

1. the file is brought to the current schema (as any writer would) and the lake is created at it;
2. in one lake transaction, every table of the file replaces the lake's (the lake's seeded rows, such as the
   published leaderboard records and its ``solci_schema`` rows, make way for the file's), the file attached
   read-only inside the lake's DuckDB instance, so the rows go straight from one engine to the other;
3. the file's job queue and watch state go into the lake's PostgreSQL queue (ids kept; the id sequence moved
   past them), so ``solci jobs`` and ``solci watch`` carry on (a lake's readers see them as ``jobs`` and
   ``watch_state``);
4. ``verify``: per table, the row count and an order-independent checksum (the sum of DuckDB's ``hash`` of each
   whole row) on both sides; any difference is reported by table.

The lake must hold no history yet (a copy never merges into an existing one). Stop the runners that write the
file first; the file is only read (its schema upgraded if it was older).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from storage.backend import Database, StorageError
from storage.file import FileDatabase
from storage.jobs import Job, list_jobs
from storage.lake import LakeDatabase

SRC_ALIAS = "solci_migration_source"
QUEUE_TABLES = ("jobs", "watch_state")


@dataclass
class TableCheck:
    table: str
    source_rows: int
    target_rows: int
    source_sum: int | None
    target_sum: int | None

    @property
    def ok(self) -> bool:
        return self.source_rows == self.target_rows and self.source_sum == self.target_sum


@dataclass
class MigrationReport:
    tables: list[TableCheck] = field(default_factory=list)
    jobs_queued: int = 0

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tables)

    def differences(self) -> list[str]:
        return [
            f"{t.table}: {t.source_rows} rows in the file, {t.target_rows} in the lake"
            + ("" if t.source_rows != t.target_rows or t.source_sum == t.target_sum else " (same count, other rows)")
            for t in self.tables
            if not t.ok
        ]


def _tables(conn: duckdb.DuckDBPyConnection, database: str | None = None) -> list[str]:
    where = "database_name = current_database()" if database is None else f"database_name = '{database}'"
    rows = conn.execute(f"SELECT table_name FROM duckdb_tables() WHERE {where} AND schema_name = 'main'").fetchall()
    return sorted(r[0] for r in rows)


def _columns(conn: duckdb.DuckDBPyConnection, database: str, table: str) -> list[str]:
    rows = conn.execute(
        """SELECT column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main'
           AND table_name = ? ORDER BY column_index""",
        [database, table],
    ).fetchall()
    return [r[0] for r in rows]


def checksum(conn: duckdb.DuckDBPyConnection, table: str, prefix: str = "") -> tuple[int, int | None]:
    """(rows, sum of the hash of each whole row) of ``table``: equal for equal multisets of rows."""
    row = conn.execute(f'SELECT count(*), sum(hash(t)::HUGEINT) FROM {prefix}"{table}" t').fetchone()
    return int(row[0]), (None if row[1] is None else int(row[1]))


def verify(source: Database, target: Database) -> MigrationReport:
    """Row counts and checksums of every table of the file against the lake's."""
    report = MigrationReport()
    with source.read() as conn:
        src = {t: checksum(conn, t) for t in _tables(conn)}
    with target.read() as conn:
        have = set(_tables(conn))
        dst = {t: checksum(conn, t) if t in have else (0, None) for t in src}
    for t in sorted(src):
        report.tables.append(TableCheck(t, src[t][0], dst[t][0], src[t][1], dst[t][1]))
    return report


def migrate(source: Database, target: Database) -> MigrationReport:
    """Copy the history file ``source`` into the empty lake ``target``; the verification's report."""
    if not isinstance(source, FileDatabase) or not isinstance(target, LakeDatabase):
        raise StorageError("migrate copies a history file (--db FILE) into a lake (--to ducklake:...)")
    source.schema_version()  # HistoryMissingError etc. before anything is made
    with source.write():  # brings the file to the current schema
        pass
    if target.catalog_exists():
        with target.read() as conn:
            if conn.execute("SELECT count(*) FROM runs").fetchone()[0]:
                raise StorageError(
                    f"{target.describe()}: the lake holds a history already; migrate only copies into a new lake "
                    "(drop its PostgreSQL database and data folder to start over)"
                )
    if target.queue.list_jobs(status=None, limit=1):
        raise StorageError(f"{target.describe()}: the lake's queue holds jobs already; migrate into a new lake")
    path = str(source.path.resolve()).replace("'", "''")
    with target.write() as conn:
        conn.execute(f"ATTACH '{path}' AS {SRC_ALIAS} (READ_ONLY)")
        try:
            conn.begin()
            try:
                lake_tables = set(_tables(conn))
                for table in _tables(conn, SRC_ALIAS):
                    if table in QUEUE_TABLES:  # a lake's queue is in PostgreSQL: copied below
                        continue
                    if table not in lake_tables:
                        raise StorageError(f"{source.path}: table {table} has no counterpart in the lake's schema")
                    cols = ", ".join(f'"{c}"' for c in _columns(conn, SRC_ALIAS, table))
                    conn.execute(f'DELETE FROM "{table}"')
                    conn.execute(f'INSERT INTO "{table}" ({cols}) SELECT {cols} FROM {SRC_ALIAS}.main."{table}"')
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
        finally:
            conn.execute("USE lake")
            conn.execute(f"DETACH DATABASE IF EXISTS {SRC_ALIAS}")
    jobs: list[Job] = sorted(list_jobs(source, limit=10**9), key=lambda j: j.id)
    queued = target.queue.import_jobs(jobs)
    with source.read() as conn:
        watch = conn.execute("SELECT repo, branch, last_commit, updated_at FROM watch_state").fetchall()
    target.queue.import_watch_state(watch)
    report = verify(source, target)
    report.jobs_queued = queued
    return report
