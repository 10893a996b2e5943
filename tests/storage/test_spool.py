"""The spool: results on local disk before ingest, written atomically, ingested once, kept while the history
cannot be written, and their jobs queued again to be judged (not measured again)."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.service.runner import JobRunner, JobRunnerConfig
from storage import jobs, spool
from storage.db import Database, open_database
from tests.support.factories import make_result
from tests.support.fakes import FakeExecutor
from tests.support.repo_factory import small_repo

FEW = ["4,128"]


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Database:
    monkeypatch.setenv("SOLCI_SPOOL", str(tmp_path / "spool"))
    return open_database(tmp_path / "history.duckdb", lock_timeout=2)


def test_spool_folder_per_database(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SOLCI_SPOOL", raising=False)
    a, b = open_database(tmp_path / "a.duckdb"), open_database(tmp_path / "b.duckdb")
    assert spool.spool_dir(a) != spool.spool_dir(b)
    assert spool.spool_dir(a).parent == Path("~/.cache/solci/spool").expanduser()
    monkeypatch.setenv("SOLCI_SPOOL", str(tmp_path / "s"))
    assert spool.spool_dir(a) == tmp_path / "s"


def test_save_is_atomic_and_complete(db: Database, tmp_path: Path, monkeypatch) -> None:
    doc = make_result(run_id="r1", cases=FEW, n_samples=5)
    path = spool.save(db, doc, job_id=7, purpose="measure", parent="p" * 40)
    rec = json.loads(path.read_text())
    assert rec["doc"] == json.loads(json.dumps(doc, default=str)) and rec["job_id"] == 7 and rec["parent"] == "p" * 40
    assert [p.run_id for p in spool.pending(db)] == ["r1"]

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool.os, "fsync", full)
    with pytest.raises(OSError):
        spool.save(db, make_result(run_id="r2", cases=FEW, n_samples=5))
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "spool").iterdir()) == [path.name]  # no partial file, no temp left


def test_flush_stores_each_result_once(db: Database) -> None:
    docs = [make_result(run_id=f"r{i}", commit=f"c{i}", cases=FEW, n_samples=5) for i in range(3)]
    for doc in docs:
        spool.save(db, doc)
    spool.save(db, docs[0])  # the same result twice (a retry after a crash)
    report = spool.flush(db)
    assert sorted(report.ingested) == ["r0", "r1", "r2"] and report.already == ["r0"] and report.left == 0
    assert spool.pending(db) == []
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 3


HOLDER = textwrap.dedent("""
    import sys, time, duckdb
    conn = duckdb.connect(sys.argv[1])
    print("holding", flush=True)
    sys.stdin.readline()
    conn.close()
""")


def test_flush_keeps_everything_while_the_history_is_locked(db: Database) -> None:
    with db.write():
        pass
    for i in range(2):
        spool.save(db, make_result(run_id=f"r{i}", commit=f"c{i}", cases=FEW, n_samples=5))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        report = spool.flush(db)
        assert (report.left == 2 and "locked" in report.error.lower()) or "lock" in report.error.lower()
        assert len(spool.pending(db)) == 2
    finally:
        holder.communicate("\n", timeout=30)
    assert spool.flush(db).ingested == ["r0", "r1"] and spool.pending(db) == []


def test_flushed_measurement_is_judged_not_measured_again(db: Database, tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    job_id, _ = jobs.enqueue(db, str(repo.path), sha, branch="main")
    job = jobs.claim_next(db, "w", "gpu0")
    jobs.finish(db, job_id, status="failed", outcome="infra_error", log="the history was locked")
    doc = make_result(commit=sha, cases=FEW, n_samples=5, repo=str(repo.path))
    spool.save(db, doc, job_id=job.id, purpose="measure")
    report = spool.flush(db)
    assert report.ingested == [doc["run_id"]] and report.requeued == [job_id]
    queued = jobs.get_job(db, job_id)
    assert (queued.status, queued.run_id) == ("queued", doc["run_id"])
    fake = FakeExecutor({})
    reports = JobRunner(db, JobRunnerConfig(worker="w2", confirm=False), executor=fake).run(once=True)
    assert fake.calls == [] and [(r.job_id, r.outcome) for r in reports] == [(job_id, "passed")]
    assert jobs.get_job(db, job_id).status == "done"


def test_a_document_that_can_never_be_stored_is_set_aside(db: Database, tmp_path: Path) -> None:
    bad = make_result(run_id="r-bad", cases=FEW, n_samples=5)
    bad["run_id"] = "not a valid run id!"
    spool.save(db, bad)
    report = spool.flush(db)
    assert report.rejected and spool.pending(db) == []
    assert len(list((tmp_path / "spool" / "rejected").glob("*.json"))) == 1
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM rejected_runs").fetchone()[0] == 1
