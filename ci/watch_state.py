"""The last commit ``solci watch`` saw per (repository, branch), kept in the history database.

Table ``watch_state`` (created on first use, outside the storage migrations: only the watcher reads it)::

    repo VARCHAR, branch VARCHAR, last_commit VARCHAR, updated_at TIMESTAMP, PRIMARY KEY (repo, branch)
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import duckdb

_DDL = """CREATE TABLE IF NOT EXISTS watch_state (
    repo VARCHAR NOT NULL, branch VARCHAR NOT NULL, last_commit VARCHAR NOT NULL,
    updated_at TIMESTAMP NOT NULL, PRIMARY KEY (repo, branch))"""


def last_seen(db: Any, repo: str, branch: str) -> str | None:
    """The last commit recorded for (repo, branch); None before the first watch."""
    try:
        with db.read() as conn:
            row = conn.execute(
                "SELECT last_commit FROM watch_state WHERE repo = ? AND branch = ?", [repo, branch]
            ).fetchone()
    except duckdb.CatalogException:  # the table does not exist yet
        return None
    return row[0] if row else None


def set_last_seen(db: Any, repo: str, branch: str, commit: str) -> None:
    now = datetime.now(UTC).replace(tzinfo=None)
    with db.write() as conn:
        conn.execute(_DDL)
        conn.execute("INSERT OR REPLACE INTO watch_state VALUES (?, ?, ?, ?)", [repo, branch, commit, now])


def all_seen(db: Any) -> list[tuple[str, str, str, datetime]]:
    try:
        with db.read() as conn:
            return conn.execute(
                "SELECT repo, branch, last_commit, updated_at FROM watch_state ORDER BY repo, branch"
            ).fetchall()
    except duckdb.CatalogException:
        return []
