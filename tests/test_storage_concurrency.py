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

from factories import BASE_TIME, make_result

from storage import jobs, queries
from storage.db import Database
from storage.ingest import ingest_result

FEW = ["4,128", "8,256"]

READER = textwrap.dedent("""
    import json, sys, time
    from storage.db import Database
    from storage import queries
    db = Database(sys.argv[1], lock_timeout=20)
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
    db = Database(tmp_path / "h.duckdb", lock_timeout=20)
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
    from storage.db import Database
    from storage import jobs
    db = Database(sys.argv[1], lock_timeout=20)
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
    db = Database(tmp_path / "h.duckdb", lock_timeout=20)
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
