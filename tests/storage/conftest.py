"""Fixtures of the storage tests: their ``db`` waits 5 s for a lock (not the suite's 20 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.db import Database, open_database


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return open_database(tmp_path / "h.duckdb", lock_timeout=5)
