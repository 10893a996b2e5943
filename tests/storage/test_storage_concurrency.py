"""Several processes on one DuckDB file: a reader querying while a writer writes, runners racing for jobs.

Claimers stay alive until every one is done: a claimed job whose owner process is gone is recovered by the
next claim (its lease), which is what a dead runner's job should get, not what this race is about."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

from storage import jobs, queries
from storage.db import DatabaseLockedError, StorageError, open_database
from storage.ingest import ingest_result
from tests.support.factories import BASE_TIME, make_result

FEW = ["4,128", "8,256"]

READER = textwrap.dedent("""
    import json, sys, time
    from storage.db import open_database
    from storage import queries
    db = open_database(sys.argv[1], lock_timeout=20)
    target, seen, queries_ok = int(sys.argv[2]), [], 0
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        n = len(queries.runs(db))
        queries_ok += 1
        if not seen or seen[-1] != n:
            seen.append(n)
        if queries_ok == 1:
            print("ready", flush=True)
        if n >= target:
            break
        time.sleep(0.005)
    print(json.dumps({"seen": seen, "queries": queries_ok}))
""")


def test_reader_in_another_process_while_writing(tmp_path: Path):
    db = open_database(tmp_path / "h.duckdb", lock_timeout=20)
    docs = [
        make_result(run_id=f"r{i}", commit=f"c{i}", cases=FEW, n_samples=10, started_at=BASE_TIME + timedelta(hours=i))
        for i in range(12)
    ]
    ingest_result(db, docs[0])
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(db.path), str(len(docs))], stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout.readline().strip() == "ready"  # the reader is querying now
        for doc in docs[1:]:
            assert ingest_result(db, doc) is True  # retries while the reader holds the file
    finally:
        out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0
    result = json.loads(out.strip().splitlines()[-1])
    assert result["seen"][-1] == len(docs)
    assert result["seen"] == sorted(result["seen"])  # never a partial or vanished run
    assert result["queries"] >= 2, result
    assert len(queries.runs(db)) == len(docs)


CLAIMER = textwrap.dedent("""
    import json, sys
    from storage.db import open_database
    from storage import jobs
    db = open_database(sys.argv[1], lock_timeout=20)
    worker, got = sys.argv[2], []
    while True:
        job = jobs.claim_next(db, worker, gpu=f"{worker}-gpu{len(got)}")
        if job is None:
            break
        got.append(job.id)
    print(json.dumps(got), flush=True)
    sys.stdin.readline()  # hold the leases until the test has counted
""")


def test_runners_racing_for_jobs_never_share_one(tmp_path: Path):
    db = open_database(tmp_path / "h.duckdb", lock_timeout=20)
    ids = [jobs.enqueue(db, "repo", f"commit{i}")[0] for i in range(10)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIMER, str(db.path), f"w{k}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(3)
    ]
    claimed = []
    try:
        for p in procs:
            claimed += json.loads(p.stdout.readline())
        assert sorted(claimed) == sorted(ids)  # every job once, none twice
        running = jobs.list_jobs(db, status="running")
        assert len(running) == 10 and all(j.attempts == 1 for j in running)
        assert {j.lease_owner.split(":")[1] for j in running} <= {str(p.pid) for p in procs}  # leased to claimers
    finally:
        for p in procs:
            p.communicate("\n", timeout=60)
    assert all(p.returncode == 0 for p in procs)


def test_threads_of_one_process_read_while_another_writes(tmp_path: Path):
    """Seen in CI (stop 15): a runner's heartbeat thread wrote while its main thread read; DuckDB, which keeps one
    instance per file and process, refused the read ("... is already attached by database ...") and a good job
    was recorded as infra_error. Reads and writes of threads of one process now take turns; reads share."""
    import threading

    db = open_database(tmp_path / "h.duckdb", lock_timeout=20)
    ingest_result(db, make_result(run_id="r0", commit="c0", cases=FEW, n_samples=10))
    (job_id, _) = jobs.enqueue(db, "repo", "c" * 40)
    claimed = jobs.claim_next(db, "w", gpu="g")
    assert claimed is not None and claimed.id == job_id
    errors: list[str] = []
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            try:
                assert jobs.heartbeat(db, job_id, claimed.lease_owner)
            except Exception as exc:  # every failure is the finding
                errors.append(f"write: {exc.__class__.__name__}: {exc}")

    def read(n: int) -> None:
        for _ in range(n):
            try:
                assert len(queries.runs(db)) == 1
            except Exception as exc:  # every failure is the finding
                errors.append(f"read: {exc.__class__.__name__}: {exc}")

    writer = threading.Thread(target=beat)
    readers = [threading.Thread(target=read, args=(60,)) for _ in range(2)]
    writer.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    writer.join()
    assert not errors, errors[:3]


def test_a_write_inside_a_read_of_one_thread_is_refused_at_once(tmp_path: Path):
    """DuckDB cannot hold one file read-only and read-write in one process: say so instead of waiting out the
    lock timeout for a lock this very thread holds (that would end in a DatabaseLockedError)."""
    db = open_database(tmp_path / "h.duckdb", lock_timeout=20)
    ingest_result(db, make_result(run_id="r0", commit="c0", cases=FEW, n_samples=10))
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
        try:
            with db.write():
                pass
        except StorageError as exc:
            assert "inside a read" in str(exc)
            assert not isinstance(exc, DatabaseLockedError), exc  # refused, not a lock waited out
        else:
            raise AssertionError("a write inside a read was allowed")
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1  # the read goes on
    with db.write() as conn:  # the gate is free again
        conn.execute("SELECT 1")


def test_a_write_waiting_on_another_process_does_not_hold_up_this_process_reads(tmp_path: Path):
    """Another process reads the file (a dashboard, `solci sql`) for a long while: the runner's heartbeat cannot
    write and retries, but the runner's own reads share that process's lock and must go on meanwhile; a write
    must not keep this process's gate shut while it waits out the other process's lock."""
    import threading
    import time

    db = open_database(tmp_path / "h.duckdb", lock_timeout=2)
    (job_id, _) = jobs.enqueue(db, "repo", "c" * 40)
    claimed = jobs.claim_next(db, "w", gpu="g")
    assert claimed is not None
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(db.path)!r}, read_only=True); print('held', flush=True); "
            "time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    stop = threading.Event()
    beat_failures: list[str] = []

    def beat() -> None:
        while not stop.wait(0.2):
            try:
                jobs.heartbeat(db, job_id, claimed.lease_owner)
            except Exception as exc:  # expected while the other process holds the file
                beat_failures.append(exc.__class__.__name__)

    try:
        assert holder.stdout.readline().strip() == "held"
        writer = threading.Thread(target=beat)
        writer.start()
        failed: list[str] = []
        reads, end = 0, time.monotonic() + 5
        while time.monotonic() < end:
            try:
                assert jobs.get_job(db, job_id).status == "running"
                reads += 1
            except Exception as exc:  # every failure is the finding
                failed.append(f"{exc.__class__.__name__}: {exc}")
        stop.set()
        writer.join()
    finally:
        holder.kill()
        holder.wait()
    assert beat_failures, "the heartbeat should have found the file held by the other process"
    assert not failed, failed[:2]
    assert reads > 10
