"""Test set-up and the fixtures shared by several test modules.

Without a GPU, Triton runs under its interpreter (set before triton is imported), and the tests marked gpu skip.
``db``: a fresh history file per test; ``pg``: the session's PostgreSQL cluster (tests/support/postgres.py);
``lake``: a new lake database in it per test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Project imports after TRITON_INTERPRET is set: a module that imports triton reads it then.
from storage.db import Database, open_database  # noqa: E402
from tests.support.postgres import Lake, PgCluster, cluster, new_lake  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run on a GPU host (see README, GPU tests)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def db(tmp_path: Path) -> Database:
    """A fresh history file (a module whose tests need other settings defines its own ``db``)."""
    return open_database(tmp_path / "history.duckdb", lock_timeout=20)


@pytest.fixture(scope="session")
def pg() -> PgCluster:
    return cluster()


@pytest.fixture
def lake(pg: PgCluster, tmp_path: Path) -> Lake:
    return new_lake(pg, tmp_path)
