"""The job queue: enqueue idempotent per (repo, commit), claim order, one running job per gpu, recovery."""

from __future__ import annotations

import threading

import pytest

from storage import jobs, queries
from storage.db import StorageError, open_database
from storage.ingest import ingest_result
from tests.support.factories import make_result


def test_enqueue_is_idempotent_per_repo_and_commit(db):
    a, created = jobs.enqueue(db, "repo", "c1", branch="main", trigger="push")
    assert created
    assert jobs.enqueue(db, "repo", "c1") == (a, False)
    b, created = jobs.enqueue(db, "other-repo", "c1")
    assert created and b != a
    c, created = jobs.enqueue(db, "repo", "c1", force=True)
    assert created and c not in (a, b)
    job = jobs.get_job(db, a)
    assert (job.repo, job.commit, job.branch, job.trigger, job.status, job.attempts) == (
        "repo",
        "c1",
        "main",
        "push",
        "queued",
        0,
    )


def test_done_is_not_requeued_but_failed_is(db):
    a, _ = jobs.enqueue(db, "repo", "c1")
    b, _ = jobs.enqueue(db, "repo", "c2")
    ja = jobs.claim_next(db, "w", "gpu0")
    jobs.finish(db, ja.id, status="done", outcome="passed", log="ok")
    jb = jobs.claim_next(db, "w", "gpu0")
    jobs.finish(db, jb.id, status="failed", outcome="build_failed", log="boom")
    assert jobs.enqueue(db, "repo", "c1") == (a, False)
    again, created = jobs.enqueue(db, "repo", "c2")
    assert created and again != b


def test_claim_order_and_one_running_job_per_gpu(db):
    ids = [jobs.enqueue(db, "repo", f"c{i}")[0] for i in range(3)]
    first = jobs.claim_next(db, "w1", "gpu0")
    assert first.id == ids[0] and first.status == "running" and first.worker == "w1" and first.gpu == "gpu0"
    assert first.attempts == 1 and first.started_at is not None
    assert jobs.claim_next(db, "w2", "gpu0") is None  # gpu0 is busy
    second = jobs.claim_next(db, "w2", "gpu1")
    assert second.id == ids[1]
    jobs.finish(db, first.id, status="done", outcome="passed", log="fine", run_id="run-1")
    third = jobs.claim_next(db, "w1", "gpu0")
    assert third.id == ids[2]
    assert jobs.claim_next(db, "w1", "gpu2") is None  # queue empty
    done = jobs.get_job(db, first.id)
    assert (done.status, done.outcome, done.log, done.run_id) == ("done", "passed", "fine", "run-1")
    assert done.finished_at >= done.started_at
    assert [j.id for j in jobs.list_jobs(db)] == ids[::-1]
    assert [j.id for j in jobs.list_jobs(db, status="running")] == [ids[2], ids[1]]
    assert [j.id for j in jobs.list_jobs(db, limit=1)] == [ids[2]]


def test_claim_is_atomic_across_threads(db):
    ids = {jobs.enqueue(db, "repo", f"c{i}")[0] for i in range(8)}
    got: list[int] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        n = 0
        while (job := jobs.claim_next(open_database(db.path), f"t{k}", f"t{k}-{n}")) is not None:
            n += 1
            with lock:
                got.append(job.id)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(ids)


def test_recover_stale_and_never_counted_twice(db):
    a, _ = jobs.enqueue(db, "repo", "c1")
    b, _ = jobs.enqueue(db, "repo", "c2")
    ja = jobs.claim_next(db, "dead-runner", "gpu0")
    jb = jobs.claim_next(db, "other-runner", "gpu1")
    # the dead runner had stored its run before dying
    doc = make_result(run_id="run-a", commit="c1", cases=["4,128"])
    assert ingest_result(db, doc, job_id=ja.id)
    assert jobs.get_job(db, a).run_id == "run-a"
    assert queries.run_info(db, "run-a")["job_id"] == a

    assert jobs.recover_stale(db, gpu="gpu0") == [a]
    rec = jobs.get_job(db, a)
    assert rec.status == "queued" and rec.worker is None and rec.gpu is None and "recovered" in rec.log
    assert jobs.get_job(db, b).status == "running"  # other gpu untouched

    again = jobs.claim_next(db, "new-runner", "gpu0")
    assert again.id == a and again.attempts == 2
    assert ingest_result(db, doc, job_id=again.id) is False  # same run_id: not counted twice
    jobs.finish(db, a, status="done", outcome="passed", log="ok")
    assert len(queries.runs(db)) == 1
    assert jobs.get_job(db, a).run_id == "run-a"

    assert jobs.recover_stale(db) == [jb.id]
    assert jobs.recover_stale(db) == []


def test_finish_checks_its_arguments(db):
    a, _ = jobs.enqueue(db, "repo", "c1")
    with pytest.raises(ValueError, match="status"):
        jobs.finish(db, a, status="queued", outcome="passed", log="")
    with pytest.raises(ValueError, match="outcome"):
        jobs.finish(db, a, status="done", outcome="great", log="")
    with pytest.raises(StorageError, match="no job"):
        jobs.finish(db, 999, status="done", outcome="passed", log="")
    with pytest.raises(ValueError):
        jobs.list_jobs(db, status="bogus")
    assert jobs.JOB_STATUSES == ("queued", "running", "done", "failed")


# ------------------------------------------------------------------------------------------------ leases
def test_owner_is_host_pid_and_start_time(monkeypatch):
    import os

    monkeypatch.setenv(jobs.HOSTNAME_ENV, "gpu-box-1")
    owner = jobs.owner_id()
    host, pid, start = jobs.parse_owner(owner)
    assert (host, pid) == ("gpu-box-1", os.getpid()) and start == jobs.process_start(os.getpid()) and start.isdigit()
    assert jobs.parse_owner("garbage") is None and jobs.parse_owner(None) is None


def _claim_as(db, owner: str, gpu: str = "gpu0"):
    return jobs.claim_next(db, "w", gpu, owner=owner)


def test_only_jobs_whose_owner_is_gone_are_recovered(db, monkeypatch):
    import subprocess
    import sys
    from datetime import timedelta

    monkeypatch.setenv(jobs.HOSTNAME_ENV, "here")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        ids = [jobs.enqueue(db, "repo", f"c{i}")[0] for i in range(5)]
        for k in range(5):
            _claim_as(db, "elsewhere:1:1", f"gpu{k}")
        owners = [
            jobs.owner_id(alive.pid),  # a live runner of this host
            f"here:{dead.pid}:12345",  # its process is gone
            f"here:{alive.pid}:999999999",  # the pid was reused by another process
            "elsewhere:1:1",  # another host, heartbeating
            "gone-host:1:1",  # another host, silent for longer than the lease
        ]
        with db.transaction() as conn:
            for job_id, owner in zip(ids, owners, strict=True):
                conn.execute("UPDATE jobs SET lease_owner = ? WHERE id = ?", [owner, job_id])
            conn.execute("UPDATE jobs SET heartbeat_at = heartbeat_at - INTERVAL 10 MINUTE WHERE id = ?", [ids[4]])
        assert jobs.recover_stale(db) == [ids[1], ids[2], ids[4]]
        assert [jobs.get_job(db, i).status for i in ids] == ["running", "queued", "queued", "running", "queued"]
        # a live owner whose heartbeat stopped (lease expired) is gone too, on any host
        with db.transaction() as conn:
            conn.execute(
                "UPDATE jobs SET heartbeat_at = heartbeat_at - ? WHERE id IN (?, ?)",
                [timedelta(seconds=jobs.lease_timeout_s() + 5), ids[0], ids[3]],
            )
        assert jobs.recover_stale(db) == [ids[0], ids[3]]
    finally:
        alive.kill()
        alive.wait()


def test_a_busy_slot_waits_for_its_live_owner_and_claims_recover_the_dead(db, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv(jobs.HOSTNAME_ENV, "here")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        a, _ = jobs.enqueue(db, "repo", "c1")
        b, _ = jobs.enqueue(db, "repo", "c2")
        _claim_as(db, jobs.owner_id(alive.pid))
        assert jobs.slot_owner(db, "gpu0").id == a
        assert jobs.claim_next(db, "w2", "gpu0") is None  # busy: a live runner measures there
        assert jobs.recover_stale(db, gpu="gpu0") == []
    finally:
        alive.kill()
        alive.wait()
    job = jobs.claim_next(db, "w2", "gpu0")  # its owner died: the claim recovers its job and takes the oldest
    assert job.id == a and job.attempts == 2
    assert jobs.get_job(db, b).status == "queued"


def test_hold_renews_the_heartbeat_and_notices_a_lost_lease(db, monkeypatch):
    import time

    monkeypatch.setenv(jobs.HEARTBEAT_ENV, "0.2")
    jobs.enqueue(db, "repo", "c1")
    job = jobs.claim_next(db, "w", "gpu0")
    with jobs.hold(db, job) as lease:
        assert jobs.recover_stale(db) == []  # held by this process: not recoverable
        first = jobs.get_job(db, job.id).heartbeat_at
        time.sleep(0.7)
        assert jobs.get_job(db, job.id).heartbeat_at > first
        with db.transaction() as conn:  # another runner took it over
            conn.execute("UPDATE jobs SET lease_owner = 'other:1:1' WHERE id = ?", [job.id])
        time.sleep(0.6)
        assert lease.lost.is_set()
    assert jobs.recover_stale(db) == []  # its owner is another (live, heartbeating) host now
