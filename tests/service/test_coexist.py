"""Runners that coexist on one machine (issue 9), on a history file: each hole reproduced, then closed.

- two runners on one GPU slot (a `solci worker` measuring while a `solci run` starts on the same slot, as the
  workflow does without --gpu): the second neither requeues the first's job nor cleans up after it; it waits,
  and both finish;
- a database lock held across ingest: the finished result waits in the spool (outcome infra_error, exit 4), and
  the next look at the queue stores it and judges it: nothing measured is lost, nothing measured twice;
- a full disk at the storage boundary (ENOSPC) is infrastructure (exit 4), never a broken commit (exit 1).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import storage.ingest as ingest_mod
from ci.cli.common import wait_for_jobs
from ci.service.runner import EXIT_BROKEN, EXIT_INFRA, JobRunner, JobRunnerConfig, exit_code_for
from storage import jobs, spool
from storage.db import Database, open_database
from tests.support import PROJECT
from tests.support.fakes import FakeExecutor
from tests.support.postgres import wait_for
from tests.support.repo_factory import small_repo

WORKER = textwrap.dedent("""
    import json, os, sys, time
    from ci.service.executors.base import Execution
    from ci.service.runner import JobRunner, JobRunnerConfig
    from tests.support.factories import make_result
    from storage.db import open_database

    class Slow:
        name = "fake"
        cleaned = 0
        def execute(self, source, commit, *, branch, repo, options):
            open(os.environ["STARTED"], "w").write(commit)
            time.sleep(float(os.environ["FAKE_SLEEP"]))
            return Execution("ok", make_result(commit=commit, cases=["4,128"], n_samples=8, repo=repo), "ok", 0.1)
        def cleanup_stale(self):
            return []

    db = open_database(sys.argv[1], lock_timeout=30)
    reports = JobRunner(db, JobRunnerConfig(worker="worker", gpu="gpu0", confirm=False), executor=Slow()).run(once=True)
    print(json.dumps([[r.job_id, r.outcome] for r in reports]))
""")


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Database:
    monkeypatch.setenv("SOLCI_SPOOL", str(tmp_path / "spool"))
    return open_database(tmp_path / "history.duckdb", lock_timeout=20)


@pytest.mark.timeout(120)
def test_two_runners_on_one_slot_both_finish(db: Database, tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=2)
    first, second = repo.head(), repo.commit_file("x.txt", "x", "x")
    busy_id, _ = jobs.enqueue(db, str(repo.path), first, branch="main")
    started = tmp_path / "started"
    env = dict(os.environ, PYTHONPATH=str(PROJECT), STARTED=str(started), FAKE_SLEEP="4")
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(db.path)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        wait_for(started.exists, 60, what="the worker's measurement")
        # `solci run` on the same slot: the worker's job is alive, not a dead runner's
        fake = FakeExecutor({second: "pass"})
        run = JobRunner(db, JobRunnerConfig(worker="run", gpu="gpu0", confirm=False), executor=fake)
        assert run.start() == []
        assert fake.cleaned == 0  # the worker's files were left alone
        job = jobs.get_job(db, busy_id)
        assert (job.status, job.attempts, job.worker) == ("running", 1, "worker")
        mine, _ = jobs.enqueue(db, str(repo.path), second, branch="main", force=True)
        done = wait_for_jobs(db, [mine], run, stop=threading.Event())  # waits for the slot, then runs
        out, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0
    by_worker = [job_id for job_id, outcome in json.loads(out) if outcome == "passed"]
    assert busy_id in by_worker  # the worker's job was not taken from it
    assert done[mine].status == "done" and done[mine].outcome == "passed"
    assert sorted(by_worker + ([mine] if fake.calls else [])) == sorted([busy_id, mine])  # each job run once
    busy = jobs.get_job(db, busy_id)
    assert (busy.status, busy.outcome, busy.attempts) == ("done", "passed", 1)  # measured once, not killed
    assert jobs.get_job(db, mine).attempts == 1
    assert busy.finished_at <= jobs.get_job(db, mine).started_at  # the slot ran one job at a time


HOLDER = textwrap.dedent("""
    import sys, time, duckdb
    conn = duckdb.connect(sys.argv[1])  # holds the file's lock
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.close()
""")


class LockingExecutor(FakeExecutor):
    """Measures, and as the measurement ends another process takes the history file's lock for a while."""

    def __init__(self, plan: dict[str, str], path: Path, hold_s: float) -> None:
        super().__init__(plan)
        self.path, self.hold_s, self.holder = path, hold_s, None

    def execute(self, source, commit, *, branch, repo, options):
        result = super().execute(source, commit, branch=branch, repo=repo, options=options)
        if self.holder is None:
            self.holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, str(self.path), str(self.hold_s)], stdout=subprocess.PIPE, text=True
            )
            assert self.holder.stdout.readline().strip() == "holding"
        return result


@pytest.mark.timeout(180)
def test_a_lock_held_across_ingest_loses_nothing(db: Database, tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    job_id, _ = jobs.enqueue(db, str(repo.path), sha, branch="main")
    short = open_database(db.path, lock_timeout=1.0)  # gives up on the lock long before the holder lets go
    fake = LockingExecutor({sha: "pass"}, db.path, hold_s=4.0)
    runner = JobRunner(short, JobRunnerConfig(worker="w", confirm=False), executor=fake)
    first = runner.run_next()
    assert first is not None and first.outcome == "infra_error"
    assert exit_code_for([first.outcome]) == EXIT_INFRA  # exit 4: not the commit's fault
    fake.holder.wait(timeout=30)
    pending = spool.pending(db)
    assert [p.run_id for p in pending] and pending[0].job_id == job_id  # the result was kept
    assert jobs.get_job(db, job_id).status in ("failed", "running")
    again = JobRunner(db, JobRunnerConfig(worker="w2", confirm=False), executor=fake)  # the next runner
    reports = again.run(once=True)
    assert [(r.job_id, r.outcome) for r in reports] == [(job_id, "passed")]
    assert fake.calls == [sha]  # measured once: the spooled result was stored and judged, not re-measured
    assert spool.pending(db) == []
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    job = jobs.get_job(db, job_id)
    assert (job.status, job.outcome, job.run_id) == ("done", "passed", pending[0].run_id)


def _run_with_a_full_disk(db: Database, tmp_path: Path, monkeypatch, where: object, name: str):
    """One queued commit measured while ``where.name`` fails with ENOSPC (the disk is full): the job's report."""
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    jobs.enqueue(db, str(repo.path), sha, branch="main")

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(where, name, full)
    return JobRunner(db, JobRunnerConfig(worker="w", confirm=False), executor=FakeExecutor({sha: "pass"})).run_next()


@pytest.mark.timeout(120)
def test_a_full_disk_is_infrastructure_not_a_broken_commit(db: Database, tmp_path: Path, monkeypatch) -> None:
    # the write fails inside ingest's transaction
    report = _run_with_a_full_disk(db, tmp_path, monkeypatch, ingest_mod, "_insert_samples")
    assert report.outcome == "infra_error" and "disk is full" in report.log
    assert exit_code_for([report.outcome]) == EXIT_INFRA != EXIT_BROKEN
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0  # rolled back whole


@pytest.mark.timeout(120)
def test_a_full_spool_disk_is_infrastructure_too(db: Database, tmp_path: Path, monkeypatch) -> None:
    report = _run_with_a_full_disk(db, tmp_path, monkeypatch, spool.os, "fsync")
    assert exit_code_for([report.outcome]) == EXIT_INFRA
    assert not list((tmp_path / "spool").glob("*"))  # no half-written file left behind
