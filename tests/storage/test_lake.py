"""The lake backend against a real PostgreSQL (tests/support/postgres.py starts one): one interface, two backends.

Dispatch on the spec; migrations once with concurrent first writers; the same SQL and answers as a file; locked
down readers; a clear error when the catalog is unreachable; the dashboard's reads while writers append;
``solci migrate`` (same answers, verified, a tampered copy caught); compaction; the per-model queue.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

import storage.lake as backend
from ci.service.runner import JobRunner, JobRunnerConfig
from dashboard import data
from storage import jobs, lake_queue, queries, schema
from storage.db import (
    CatalogUnreachableError,
    Database,
    DatabaseLockedError,
    HistoryMissingError,
    StorageError,
    open_database,
)
from storage.ingest import ingest_result
from storage.lake import (
    LOCK_NAMESPACE,
    WRITE_LOCK,
    LakeDatabase,
    compact,
    is_lock_wait,
    is_unreachable,
    pg_connection_lost,
    redact,
)
from tests.support import PROJECT
from tests.support.factories import BASE_TIME, make_result
from tests.support.fakes import FakeExecutor
from tests.support.postgres import Lake
from tests.support.repo_factory import small_repo

FEW = ["4,128", "8,256"]


def same_rows(a: pd.DataFrame, b: pd.DataFrame, name: str = "", *, ordered: bool = False) -> None:
    """Equal frames; unless ``ordered``, as multisets of rows (a query may order ties either way)."""
    if not ordered:
        key = lambda df: pd.Series(["|".join(map(str, row)) for row in df.itertuples(index=False)])
        a = a.iloc[key(a).argsort(kind="stable")].reset_index(drop=True)
        b = b.iloc[key(b).argsort(kind="stable")].reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=name)


def docs(n: int, *, prefix: str = "r", gpu_model: str = "H200", label: str = "NVIDIA H200") -> list[dict]:
    return [
        make_result(
            run_id=f"{prefix}{i}",
            commit=f"{prefix}c{i}",
            cases=FEW,
            n_samples=10,
            gpu_model=gpu_model,
            hardware_label=label,
            started_at=BASE_TIME + timedelta(hours=i),
            medians=100.0 - i,
        )
        for i in range(n)
    ]


def run_cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ci.cli", *args], env=env, cwd=PROJECT, capture_output=True, text=True, timeout=timeout
    )


# ------------------------------------------------------------------------------------------------ interface
def test_spec_dispatches_to_the_lake_and_prints_without_password(lake: Lake, monkeypatch) -> None:
    db = lake.db()
    assert isinstance(db, LakeDatabase) and db.backend == "lake"
    assert str(db.path) == lake.spec and db.url == lake.spec
    again = open_database(db.path, data_path=lake.data_path)  # what the dashboard's server does with db.path
    assert isinstance(again, LakeDatabase) and again.url == lake.spec
    monkeypatch.setenv("SOLCI_DB", lake.spec)
    assert isinstance(open_database(), LakeDatabase)
    secret = LakeDatabase("ducklake:postgres:dbname=x host=h user=u password=hunter2")
    assert "hunter2" not in secret.describe() and "hunter2" not in redact(secret.url)
    with pytest.raises(StorageError, match="ducklake:postgres:"):
        LakeDatabase("ducklake:sqlite:x.db")


def test_first_writers_race_and_migrations_run_once(lake: Lake) -> None:
    """Four processes open a new lake and ingest at the same moment: one migrates, the others wait for it."""
    script = textwrap.dedent("""
        import json, sys
        from tests.support.factories import make_result
        from storage.db import open_database
        from storage.ingest import ingest_result
        db = open_database(sys.argv[1], data_path=sys.argv[2])
        k = int(sys.argv[3])
        for i in range(3):
            doc = make_result(run_id=f"p{k}-{i}", commit=f"c{k}-{i}", cases=["4,128"], n_samples=5)
            assert ingest_result(db, doc)
        print(json.dumps(db.schema_version()))
    """)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, lake.spec, str(lake.data_path), str(k)],
            env=lake.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert {json.loads(o[0]) for o in outs} == {schema.CURRENT_VERSION}
    db = lake.db()
    with db.read() as conn:
        versions = conn.execute("SELECT version FROM solci_schema ORDER BY version").fetchall()
        n_runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        n_published = conn.execute("SELECT count(*) FROM records WHERE kind = 'published'").fetchone()[0]
    assert [v[0] for v in versions] == [m.version for m in schema.MIGRATIONS]  # each applied exactly once
    assert n_runs == 12
    assert n_published == len(__import__("problem.workload", fromlist=["B200_RECORDS"]).B200_RECORDS)


def test_same_sql_same_answers_as_a_file(lake: Lake, tmp_path: Path) -> None:
    file_db = open_database(tmp_path / "h.duckdb")
    db = lake.db()
    for doc in docs(5) + docs(2, prefix="b", gpu_model="B200", label="NVIDIA B200"):
        assert ingest_result(file_db, doc) and ingest_result(db, doc)
        assert ingest_result(db, doc) is False  # idempotent by run_id on the lake too
    same_rows(queries.history(file_db), queries.history(db), ordered=True)
    for q in (
        lambda d: queries.history(d, hardware="B200", limit=1),
        lambda d: queries.runs(d).drop(columns=["ingested_at"], errors="ignore"),
        lambda d: queries.records(d).drop(columns=["updated_at"], errors="ignore"),
        lambda d: queries.record_events(d).drop(columns=["id", "broken_at"], errors="ignore"),
        lambda d: queries.run_cases(d, "r3"),
        lambda d: queries.run_sql(d, "SELECT hardware_label, count(*) AS n FROM runs GROUP BY 1 ORDER BY 1"),
    ):
        same_rows(q(file_db), q(db))
    with db.read() as conn:
        seqs = [r[0] for r in conn.execute("SELECT seq FROM runs ORDER BY ingested_at").fetchall()]
    assert len(set(seqs)) == len(seqs) and seqs == sorted(seqs)  # a time-ordered id without a sequence


def test_readers_are_locked_down_and_never_create(lake: Lake, pg) -> None:
    empty = open_database(lake.spec, data_path=lake.data_path, create=False)
    with pytest.raises(HistoryMissingError):
        queries.runs(empty)
    assert not empty.catalog_exists()  # the reader created nothing
    db = lake.db()
    ingest_result(db, docs(1)[0])
    compact(db)  # the rows now live in Parquet files of the data folder, which readers may read
    reader = open_database(lake.spec, create=False)  # an existing lake remembers its data folder
    assert len(queries.runs(reader)) == 1
    for sql in (
        "SELECT * FROM read_csv('/etc/passwd')",
        "COPY (SELECT 1) TO '/tmp/solci-lake-leak.csv'",
        "ATTACH '/tmp/solci-other.duckdb' AS other",
        f"ATTACH '{pg.conninfo('postgres')}' AS other (TYPE postgres)",
        "INSERT INTO runs (run_id) VALUES ('x')",
        "DELETE FROM runs",
        "SET enable_external_access = true",
        "LOAD httpfs",
    ):
        with pytest.raises(Exception), reader.read() as conn:  # noqa: B017  (DuckDB raises several kinds)
            conn.execute(sql).fetchall()
    assert not Path("/tmp/solci-lake-leak.csv").exists()
    assert len(queries.runs(reader)) == 1


def test_unreachable_catalog_is_said_clearly(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    spec = f"ducklake:postgres:dbname=lake host=127.0.0.1 port={port} user=postgres password=s3cret"
    db = open_database(spec, data_path=tmp_path / "data", create=False)
    with pytest.raises(CatalogUnreachableError, match="unreachable") as info:
        queries.runs(db)
    assert "s3cret" not in str(info.value)
    with pytest.raises(CatalogUnreachableError):
        jobs.list_jobs(db)
    env = Lake(spec, tmp_path / "data", "lake").env()
    for args in (["sql", "SELECT count(*) FROM runs"], ["history"], ["jobs"]):
        res = run_cli(args, env)
        assert res.returncode != 0
        assert "catalog (PostgreSQL) is unreachable" in res.stderr, res.stderr
        assert "s3cret" not in res.stderr and "Traceback" not in res.stderr


WRITER = textwrap.dedent("""
    import sys
    from datetime import timedelta
    from tests.support.factories import BASE_TIME, make_result
    from storage.db import open_database
    from storage.ingest import ingest_result
    db = open_database(sys.argv[1], data_path=sys.argv[2])
    k, n = sys.argv[3], int(sys.argv[4])
    for i in range(n):
        doc = make_result(run_id=f"w{k}-{i}", commit=f"w{k}c{i}", cases=["4,128", "8,256", "1,1024"], n_samples=8,
                          started_at=BASE_TIME + timedelta(minutes=i))
        assert ingest_result(db, doc)
""")


def test_dashboard_reads_while_writers_append(lake: Lake) -> None:
    """Two writer processes append runs while this process reads what the dashboard reads (storage.queries'
    series summary, runs, history, job queue): every read sees whole runs only, and the count never goes back."""
    db = lake.db()
    ingest_result(db, docs(1)[0])
    n = 8
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, lake.spec, str(lake.data_path), str(k), str(n)],
            env=lake.env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    reader = open_database(lake.spec, create=False, lock_timeout=10)
    seen: list[int] = []
    try:
        while any(w.poll() is None for w in writers) or not seen or seen[-1] < 1 + 2 * n:
            runs = queries.runs(reader)
            queries.series_summary(reader)
            queries.job_queue(reader)
            with reader.read() as conn:
                per_run = conn.execute(
                    "SELECT r.run_id, count(x.case_name) FROM runs r LEFT JOIN results x USING (run_id) GROUP BY 1"
                ).fetchall()
            assert all(c == (2 if rid == "r0" else 3) for rid, c in per_run), per_run  # never a partial run
            if not seen or seen[-1] != len(runs):
                seen.append(len(runs))
            queries.history(reader, limit=20)
            if len(seen) > 200 or (all(w.poll() is not None for w in writers) and seen[-1] == 1 + 2 * n):
                break
    finally:
        errs = [w.communicate(timeout=120)[1] for w in writers]
    assert all(w.returncode == 0 for w in writers), errs
    assert seen == sorted(seen) and seen[-1] == 1 + 2 * n
    assert len(seen) >= 2, seen  # it read while the writers were appending


# ------------------------------------------------------------------------------------------------ migrate
def _file_history(tmp_path: Path) -> Database:
    """A history file with what runners store: runs judged (verdicts, steps, noise), jobs, watch state."""
    db = open_database(tmp_path / "history.duckdb", lock_timeout=20)
    repo = small_repo(tmp_path / "repo", n_commits=1)
    shas = [repo.commit_file("notes.txt", f"{i}\n", f"c{i}") for i in range(5)]
    plan = dict.fromkeys(shas, "pass") | {shas[3]: "slow", shas[4]: "incorrect"}
    for sha in shas:
        jobs.enqueue(db, str(repo.path), sha, branch="main")
    JobRunner(db, JobRunnerConfig(worker="w"), executor=FakeExecutor(plan)).run(once=True)
    jobs.enqueue(db, str(repo.path), "f" * 40, branch="main")  # one still queued
    jobs.set_watch_last_seen(db, str(repo.path), "main", shas[-1])
    return db


ANSWERS = {
    "history": lambda d: queries.history(d),
    "runs": lambda d: queries.runs(d),
    "records": lambda d: queries.records(d),
    "record_events": lambda d: queries.record_events(d),
    "changes": lambda d: queries.changes(d),
    "series": lambda d: queries.series_summary(d),
    "jobs": lambda d: pd.DataFrame([vars(j) for j in jobs.list_jobs(d)]),
    "job_queue": lambda d: queries.job_queue(d)[0],
    "sql": lambda d: queries.run_sql(
        d, 'SELECT v.verdict, r."commit" FROM verdicts v JOIN runs r USING (run_id) ORDER BY r.started_at'
    ),
}


def test_migrate_copies_a_history_that_answers_the_same(lake: Lake, tmp_path: Path) -> None:
    src = _file_history(tmp_path)
    env = lake.env()
    res = run_cli(["migrate", "--db", str(src.path), "--to", lake.spec, "--data-path", str(lake.data_path)], env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "verified" in res.stdout and "DIFFERS" not in res.stdout
    dst = open_database(lake.spec, create=False)
    for name, answer in ANSWERS.items():
        same_rows(answer(src), answer(dst), name, ordered=name in ("history", "runs", "jobs", "sql"))
    repo = jobs.list_jobs(src)[0].repo
    assert jobs.watch_last_seen(dst, repo, "main") == jobs.watch_last_seen(src, repo, "main") is not None
    # a second copy into the same lake is refused; --check finds a tampered table
    again = run_cli(["migrate", "--db", str(src.path), "--to", lake.spec], env)
    assert again.returncode == 2 and "holds a history already" in again.stderr
    with dst.transaction() as conn:
        conn.execute("DELETE FROM results WHERE run_id = (SELECT min(run_id) FROM runs)")
    check = run_cli(["migrate", "--db", str(src.path), "--to", lake.spec, "--check"], env)
    assert check.returncode == 1
    assert "results" in check.stderr and "DIFFERS" in check.stdout and "jobs" not in check.stderr
    # the queue goes on: a new job's id is past the copied ones
    new_id, created = jobs.enqueue(dst, "repo", "e" * 40, gpu_model="H200")
    assert created and new_id > max(j.id for j in jobs.list_jobs(src))


def test_compaction_merges_small_files_and_keeps_the_rows(lake: Lake) -> None:
    """Every run appended to a lake leaves small Parquet files (here 8 runs of 16 cases with 50 samples each, too
    many rows to inline); compaction merges them and commits. Before 2026-12-01 ``compact`` read each maintenance
    function's result with ``fetchone()``, which left the autocommit statement unfinished: it reported files merged
    while no snapshot was ever committed and every file stayed ("samples files 91 -> 91" in scripts/bench_lake.py)."""
    db = lake.db()
    for i in range(8):  # the 16 cases: 48 sample rows a run, more than DuckLake inlines
        ingest_result(db, make_result(run_id=f"m{i}", commit=f"{i:040x}", n_samples=50))

    def state() -> tuple[int, int, int]:
        with db.read() as conn:
            files = conn.execute("SELECT count(*) FROM ducklake_list_files('lake', 'samples')").fetchone()[0]
            snap = conn.execute("SELECT max(snapshot_id) FROM ducklake_snapshots('lake')").fetchone()[0]
            rows = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        return files, snap, rows

    with db.read() as conn:
        before_rows = conn.execute("SELECT count(*), sum(hash(s)::HUGEINT) FROM samples s").fetchone()
    files, snap, _ = state()
    assert files >= 8, "precondition: each run wrote its own samples file"
    out = compact(db)
    assert out["files_merged"] >= 8 and out["files_written"] >= 1, out
    files_after, snap_after, _ = state()
    assert files_after == 1, f"{files} samples files before compaction, {files_after} after: nothing was committed"
    assert snap_after > snap
    res = run_cli(["compact"], lake.env())  # the command too; a second pass has nothing left to merge
    assert res.returncode == 0 and "files_merged" in res.stdout, res.stderr
    with db.read() as conn:
        after_rows = conn.execute("SELECT count(*), sum(hash(s)::HUGEINT) FROM samples s").fetchone()
    assert after_rows == before_rows
    assert state()[0] == 1
    # time travel given up and the merged-away files deleted, committed too: the data folder shrinks
    parquet = lambda: sum(1 for _ in Path(lake.data_path).rglob("*.parquet"))
    n_parquet = parquet()
    swept = compact(db, keep_days=0, grace_hours=0)
    assert swept["snapshots_expired"] > 0 and swept["files_deleted"] >= 8, swept
    assert parquet() <= n_parquet - 8
    with db.read() as conn:
        assert conn.execute("SELECT count(*), sum(hash(s)::HUGEINT) FROM samples s").fetchone() == before_rows


# ------------------------------------------------------------------------------------------------ the queue
def test_one_job_per_gpu_model_and_exactly_one_host_takes_it(lake: Lake, monkeypatch) -> None:
    db = lake.db()
    monkeypatch.setenv("SOLCI_HOSTNAME", "h200-a")
    assert jobs.claim_next(db, "w", "gpu0", gpu_model="H200") is None  # registers H200 on h200-a
    monkeypatch.setenv("SOLCI_HOSTNAME", "b200-a")
    assert jobs.claim_next(db, "w", "gpu0", gpu_model="B200") is None
    ids = [jobs.enqueue(db, "repo", f"c{i}", branch="main")[0] for i in range(6)]
    all_jobs = jobs.list_jobs(db)
    assert len(all_jobs) == 12 and {j.gpu_model for j in all_jobs} == {"H200", "B200"}
    assert jobs.enqueue(db, "repo", "c0")[1] is False  # already queued for every model
    assert ids[0] in {j.id for j in all_jobs if j.gpu_model == "B200"}  # this host (b200-a) got its model's id

    got: dict[str, list[int]] = {}
    lock = threading.Lock()

    def host(name: str, model: str) -> None:
        other = open_database(lake.spec)
        while True:
            slot = f"{name}-{len(got.get(name, []))}"
            job = jobs.claim_next(other, name, slot, gpu_model=model, owner=f"{name}:1:1")
            if job is None:
                return
            assert job.gpu_model == model
            with lock:
                got.setdefault(name, []).append(job.id)

    monkeypatch.setenv("SOLCI_HOSTNAME", "tester")
    threads = [threading.Thread(target=host, args=(f"{m}-{k}", m)) for m in ("H200", "B200") for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [i for v in got.values() for i in v]
    assert sorted(claimed) == sorted(j.id for j in all_jobs)  # every job once, none twice
    measured = {(jobs.get_job(db, i).commit, h.split("-")[0]) for h, v in got.items() for i in v}
    assert measured == {(f"c{i}", m) for i in range(6) for m in ("H200", "B200")}  # each commit on each model


def test_force_queues_this_hosts_model_only_and_a_modelless_job_is_adopted(lake: Lake, monkeypatch) -> None:
    db = lake.db()
    first, created = jobs.enqueue(db, "repo", "c1")  # no runner registered yet: a job for any model
    assert created and jobs.get_job(db, first).gpu_model is None
    monkeypatch.setenv("SOLCI_GPU_MODEL", "H200")
    job = jobs.claim_next(db, "w", "gpu0")
    assert job.id == first and job.gpu_model == "H200"  # adopted by the first runner's model
    monkeypatch.setenv("SOLCI_HOSTNAME", "other")
    jobs.claim_next(db, "w", "gpu0", gpu_model="B200")  # a B200 host registers
    monkeypatch.setenv("SOLCI_HOSTNAME", "me")
    forced, created = jobs.enqueue(db, "repo", "c1", force=True)
    assert created and jobs.get_job(db, forced).gpu_model == "H200"  # $SOLCI_GPU_MODEL: only this host's model
    assert [j.gpu_model for j in jobs.list_jobs(db) if j.commit == "c1"].count("B200") == 0
    assert lake_queue.registered_models(db)


def test_the_dashboards_cache_key_follows_runs_and_the_queue_not_the_clock(lake: Lake, monkeypatch) -> None:
    """dashboard.data.db_token is the history's change_token: the same while nothing changes (cached reads are
    reused), new after a run is appended or a job is queued, claimed or finished; a heartbeat alone keeps it."""
    monkeypatch.setenv("SOLCI_DATA_PATH", str(lake.data_path))
    monkeypatch.setenv("SOLCI_HOSTNAME", "h200-a")
    db = lake.db()
    ingest_result(db, docs(1)[0])
    seen = [data.db_token(lake.spec)]
    assert data.db_token(lake.spec) == seen[-1]  # nothing changed: same key

    def changed() -> None:
        now = data.db_token(lake.spec)
        assert now not in seen, now
        seen.append(now)

    ingest_result(db, docs(2, prefix="s")[1])
    changed()
    assert jobs.claim_next(db, "w", "gpu0", gpu_model="H200") is None
    job_id = jobs.enqueue(db, "repo", "c1", branch="main")[0]
    changed()
    job = jobs.claim_next(db, "w", "gpu0", gpu_model="H200", owner="w:1:1")
    assert job is not None and job.id == job_id
    changed()
    jobs.heartbeat(db, job_id, "w:1:1")
    assert data.db_token(lake.spec) == seen[-1]
    jobs.finish(db, job_id, status="done", outcome="passed", log="ok")
    changed()


def test_a_claim_without_a_gpu_model_says_so_and_changes_nothing(lake: Lake, monkeypatch) -> None:
    """No model given, none in $SOLCI_GPU_MODEL, none registered by this host: a clear StorageError (not a
    NotNullViolation from registering a NULL model), nothing registered, the job left queued for a runner that
    knows its model. A host that registered a model claims with it; $SOLCI_GPU_MODEL comes first."""
    monkeypatch.delenv("SOLCI_GPU_MODEL", raising=False)
    monkeypatch.setenv("SOLCI_HOSTNAME", "unknown-host")
    db = lake.db()
    job_id, _ = jobs.enqueue(db, "repo", "c1")
    with pytest.raises(StorageError, match="GPU model is unknown") as info:
        jobs.claim_next(db, "w", "gpu0")
    assert "SOLCI_GPU_MODEL" in str(info.value)
    assert lake_queue.registered_models(db) == []
    assert jobs.get_job(db, job_id).status == "queued"

    monkeypatch.setenv("SOLCI_HOSTNAME", "h200-a")
    assert jobs.claim_next(db, "w", "gpu1", gpu_model="H200", job_id=-1) is None  # registers H200 on h200-a
    job = jobs.claim_next(db, "w", "gpu0")  # no model given: the host's registered one
    assert job is not None and job.id == job_id and job.gpu_model == "H200"
    b200 = jobs.enqueue(db, "repo", "c2", gpu_model="B200")[0]
    monkeypatch.setenv("SOLCI_GPU_MODEL", "B200")
    job = jobs.claim_next(db, "w", "gpu2")
    assert job is not None and job.id == b200  # $SOLCI_GPU_MODEL before the registered model


# ------------------------------------------------------------------------------------------------ catalog errors
def _holding_row_lock(pg, dbname: str, job_id: int, release: threading.Event) -> threading.Thread:
    """Another session that locks a job's row (FOR UPDATE) until ``release`` is set."""
    import psycopg

    held = threading.Event()

    def hold() -> None:
        with psycopg.connect(pg.conninfo(dbname)) as other:
            other.execute("SELECT id FROM solci.jobs WHERE id = %s FOR UPDATE", (job_id,))
            held.set()
            release.wait(30)
            other.rollback()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert held.wait(30)
    return thread


def _failed_job(db) -> int:
    job_id = jobs.enqueue(db, "repo", "c1", gpu_model="H200")[0]
    jobs.claim_next(db, "w", "gpu0", gpu_model="H200", owner="w:1:1")
    jobs.finish(db, job_id, status="failed", outcome="infra_error", log="x")
    return job_id


def test_the_write_locks_timeout_stays_with_the_write_lock(lake: Lake, pg, monkeypatch) -> None:
    """The write lock waits lock_timeout and then says the lake is locked; the queue's statements on the same
    session (a FOR UPDATE behind another session's row lock) do not inherit that timeout: they wait."""
    import psycopg

    db = lake.db(lock_timeout=0.3)
    ingest_result(db, docs(1)[0])
    session = db._pg_session()
    assert session.execute("SHOW lock_timeout").fetchone()[0] == "0"  # nothing left on the session
    with psycopg.connect(pg.conninfo(lake.dbname), autocommit=True) as writer:
        writer.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_NAMESPACE, WRITE_LOCK))
        started = time.monotonic()
        with pytest.raises(DatabaseLockedError, match="write lock"), db.write():
            pass
        assert time.monotonic() - started > 0.2  # it waited for the lock, then said so (the raises above)
    assert db._pg_session() is session  # a lock wait keeps the session (and the instances)
    assert session.execute("SHOW lock_timeout").fetchone()[0] == "0"

    job_id = _failed_job(db)
    release = threading.Event()
    holder = _holding_row_lock(pg, lake.dbname, job_id, release)
    threading.Timer(1.0, release.set).start()
    started = time.monotonic()
    assert jobs.requeue_for_judging(db, job_id, None, "judge it again")  # waited for the row, then queued it
    assert time.monotonic() - started >= 0.8
    holder.join(30)
    assert jobs.get_job(db, job_id).status == "queued"


@pytest.mark.parametrize("how", ["lock_timeout", "cancel"])
def test_a_lock_wait_on_the_queue_is_a_lock_error_not_an_unreachable_catalog(
    lake: Lake,
    pg,
    monkeypatch,
    how: str,
) -> None:
    """A queue statement that gives up waiting (55P03 lock_timeout, 57014 canceled) raises DatabaseLockedError
    and keeps the session; it is not reported as an unreachable catalog and nothing is dropped."""
    import psycopg

    monkeypatch.setattr(backend, "_PING_AFTER_S", 1e9)
    db = lake.db()
    ingest_result(db, docs(1)[0])
    job_id = _failed_job(db)
    session = db._pg_session()
    instances = {k for k in backend._INSTANCES if k[0] == db._key}
    assert instances
    release = threading.Event()
    holder = _holding_row_lock(pg, lake.dbname, job_id, release)
    try:
        if how == "lock_timeout":  # e.g. set on the role by an administrator
            session.execute("SET lock_timeout = '200ms'")
        else:
            pid = session.info.backend_pid

            def cancel() -> None:
                with psycopg.connect(pg.conninfo(lake.dbname), autocommit=True) as admin:
                    wait_until = time.monotonic() + 30
                    while time.monotonic() < wait_until:
                        row = admin.execute(
                            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
                        ).fetchone()
                        if row and row[0] == "Lock":
                            admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
                            return
                        time.sleep(0.02)

            threading.Thread(target=cancel, daemon=True).start()
        with pytest.raises(DatabaseLockedError, match="gave up waiting") as info:
            jobs.requeue_for_judging(db, job_id, None, "judge it again")
        assert not isinstance(info.value, CatalogUnreachableError)
    finally:
        release.set()
        holder.join(30)
    assert db._pg_session() is session
    assert {k for k in backend._INSTANCES if k[0] == db._key} == instances
    session.execute("RESET lock_timeout")
    assert jobs.requeue_for_judging(db, job_id, None, "judge it again")  # the same session, now free


def test_a_lost_session_is_an_unreachable_catalog_and_the_next_call_reconnects(
    lake: Lake,
    pg,
    monkeypatch,
) -> None:
    import psycopg

    monkeypatch.setattr(backend, "_PING_AFTER_S", 1e9)  # no check before use: the next statement finds it gone
    db = lake.db()
    job_id = jobs.enqueue(db, "repo", "c1", gpu_model="H200")[0]
    session = db._pg_session()
    with psycopg.connect(pg.conninfo(lake.dbname), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (session.info.backend_pid,))
    with pytest.raises(CatalogUnreachableError, match="unreachable"):
        jobs.get_job(db, job_id)
    assert jobs.get_job(db, job_id).status == "queued"
    assert db._pg_session() is not session


def test_psycopg_errors_are_classified_by_sqlstate(lake: Lake) -> None:
    """Connection lost (no SQLSTATE, class 08, 57P01-57P03): unreachable; lock waits (55P03, 57014): locked; the
    other OperationalErrors of a live session (deadlock, serialization failure) and the rest: themselves."""
    import psycopg
    from psycopg import errors

    db = lake.db()
    lost = [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        errors.ConnectionFailure("x"),
        errors.SqlclientUnableToEstablishSqlconnection("x"),
        errors.AdminShutdown("x"),
        errors.CrashShutdown("x"),
        errors.CannotConnectNow("x"),
    ]
    for exc in lost:
        assert pg_connection_lost(exc) and is_unreachable(exc) and not is_lock_wait(exc), exc
        assert isinstance(db._pg_error(exc), CatalogUnreachableError)
    for exc in (errors.LockNotAvailable("x"), errors.QueryCanceled("x")):
        assert is_lock_wait(exc) and not is_unreachable(exc), exc
        assert type(db._pg_error(exc)) is DatabaseLockedError
    for exc in (
        errors.DeadlockDetected("x"),
        errors.SerializationFailure("x"),
        errors.DiskFull("x"),
        errors.NotNullViolation("x"),
        psycopg.ProgrammingError("x"),
    ):
        assert not is_unreachable(exc) and not is_lock_wait(exc), exc
        assert db._pg_error(exc) is exc


# ------------------------------------------------------------------------------------------------ claims
def test_a_failure_after_a_committed_claim_still_hands_over_the_job(lake: Lake, monkeypatch) -> None:
    """Looking up an earlier attempt's stored run (DuckDB) or linking it (PostgreSQL) fails after the claim
    committed: the caller still gets the job (measured again without the run; with it when only the link
    failed), so it is not left running under a live owner with its slot busy until the lease runs out."""
    db = lake.db()
    job_id = _failed_job(db)
    assert jobs.requeue_for_judging(db, job_id, None, "again")

    def unreachable(*_a, **_k):
        raise CatalogUnreachableError("the catalog went away")

    monkeypatch.setattr(lake_queue, "_stored_run_of", unreachable)
    job = jobs.claim_next(db, "w", "gpu0", gpu_model="H200", owner="w:1:1")
    assert job is not None and job.id == job_id and job.attempts == 2 and job.run_id is None
    assert jobs.slot_owner(db, "gpu0") is None or jobs.slot_owner(db, "gpu0").id == job_id
    assert jobs.get_job(db, job_id).status == "running"

    jobs.finish(db, job_id, status="failed", outcome="infra_error", log="x")
    assert jobs.requeue_for_judging(db, job_id, None, "again")
    monkeypatch.setattr(lake_queue, "_stored_run_of", lambda _db, _id: "r0")
    monkeypatch.setattr(lake_queue, "link_run", unreachable)
    job = jobs.claim_next(db, "w", "gpu0", gpu_model="H200", owner="w:1:1")
    assert job is not None and job.id == job_id and job.run_id == "r0"  # judged, not measured again


# ------------------------------------------------------------------------------------------------ hot path
@pytest.fixture
def pg_statements(monkeypatch) -> list[str]:
    """Every statement sent through a psycopg connection of this process (from now on)."""
    import psycopg

    monkeypatch.setattr(backend, "_PING_AFTER_S", 1e9)  # no idle checks in the counts
    sent: list[str] = []
    execute = psycopg.Connection.execute

    def counting(self, query, *args, **kwargs):
        sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    return sent


def test_reads_writes_and_the_cache_key_skip_needless_round_trips(lake: Lake, pg_statements: list[str]) -> None:
    """Once the schema is ready a write sends only the lock and the unlock; reads of a lake without a queue send
    nothing to PostgreSQL; change_token is one statement once the lake's and the queue's tables exist."""
    db = lake.db()
    ingest_result(db, docs(1)[0])
    reader = lake.db(create=False)
    queries.runs(reader)

    pg_statements.clear()
    for _ in range(3):
        with db.write():
            pass
    assert len(pg_statements) == 6, pg_statements  # lock + unlock each (no catalog check, no SET)
    assert not any("lock_timeout" in s and s.lstrip().upper().startswith("SET") for s in pg_statements)

    pg_statements.clear()
    for _ in range(20):
        with reader.read() as conn:
            assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    assert pg_statements == []  # no queue: not looked for on every read

    before = reader.change_token()
    jobs.enqueue(db, "repo", "c1", gpu_model="H200")  # the queue appears
    assert reader.change_token() != before
    assert len(queries.job_queue(reader)[0]) == 1  # seen at once: the cache key saw the queue
    pg_statements.clear()
    tokens = {reader.change_token() for _ in range(5)}
    assert len(tokens) == 1 and len(pg_statements) == 5, pg_statements
    ingest_result(db, docs(2, prefix="t")[1])
    assert reader.change_token() not in tokens


def test_a_reader_finds_a_queue_another_process_made(lake: Lake, pg, monkeypatch) -> None:
    """A reader made before the queue existed sees it after a few seconds at most (another process made it)."""
    import psycopg

    db = lake.db()
    ingest_result(db, docs(1)[0])
    reader = lake.db(create=False)
    assert queries.job_queue(reader)[0].empty
    with psycopg.connect(pg.conninfo(lake.dbname), autocommit=True) as other:  # another process's first enqueue
        other.execute(schema.QUEUE_DDL)
        other.execute(
            """INSERT INTO solci.jobs (repo, "commit", "trigger", status, attempts, enqueued_at)
               VALUES ('repo', 'c1', 'manual', 'queued', 0, now())"""
        )
    monkeypatch.setattr(backend, "_QUEUE_RECHECK_S", 0.0)
    assert len(queries.job_queue(reader)[0]) == 1
