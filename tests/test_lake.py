"""The lake backend against a real PostgreSQL (tests/test_lake_pg.py starts one): one interface, two backends.

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
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from factories import BASE_TIME, make_result
from test_lake_pg import PROJECT, Lake, new_lake, pg  # noqa: F401  (pg: the session's PostgreSQL fixture)

from storage import jobs, lake_queue, queries, schema
from storage.db import CatalogUnreachableError, Database, HistoryMissingError, StorageError
from storage.ingest import ingest_result
from storage.lake import LakeDatabase, compact, redact

FEW = ["4,128", "8,256"]


def same_rows(a: pd.DataFrame, b: pd.DataFrame, name: str = "", *, ordered: bool = False) -> None:
    """Equal frames; unless ``ordered``, as multisets of rows (a query may order ties either way)."""
    if not ordered:
        key = lambda df: pd.Series(["|".join(map(str, row)) for row in df.itertuples(index=False)])
        a = a.iloc[key(a).argsort(kind="stable")].reset_index(drop=True)
        b = b.iloc[key(b).argsort(kind="stable")].reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False, obj=name)


@pytest.fixture
def lake(pg, tmp_path: Path) -> Lake:  # noqa: F811
    return new_lake(pg, tmp_path)


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
    again = Database(db.path, data_path=lake.data_path)  # what the dashboard's server does with db.path
    assert isinstance(again, LakeDatabase) and again.url == lake.spec
    monkeypatch.setenv("SOLCI_DB", lake.spec)
    assert isinstance(Database(), LakeDatabase)
    secret = LakeDatabase("ducklake:postgres:dbname=x host=h user=u password=hunter2")
    assert "hunter2" not in secret.describe() and "hunter2" not in redact(secret.url)
    with pytest.raises(StorageError, match="ducklake:postgres:"):
        LakeDatabase("ducklake:sqlite:x.db")


def test_first_writers_race_and_migrations_run_once(lake: Lake) -> None:
    """Four processes open a new lake and ingest at the same moment: one migrates, the others wait for it."""
    script = textwrap.dedent("""
        import json, sys
        from factories import make_result
        from storage.db import Database
        from storage.ingest import ingest_result
        db = Database(sys.argv[1], data_path=sys.argv[2])
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
    assert n_published == len(__import__("kernel.workload", fromlist=["B200_RECORDS"]).B200_RECORDS)


def test_same_sql_same_answers_as_a_file(lake: Lake, tmp_path: Path) -> None:
    file_db = Database(tmp_path / "h.duckdb")
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


def test_readers_are_locked_down_and_never_create(lake: Lake, pg) -> None:  # noqa: F811
    empty = Database(lake.spec, data_path=lake.data_path, create=False)
    with pytest.raises(HistoryMissingError):
        queries.runs(empty)
    assert not empty.catalog_exists()  # the reader created nothing
    db = lake.db()
    ingest_result(db, docs(1)[0])
    compact(db)  # the rows now live in Parquet files of the data folder, which readers may read
    reader = Database(lake.spec, create=False)  # an existing lake remembers its data folder
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
    db = Database(spec, data_path=tmp_path / "data", create=False)
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
    from factories import BASE_TIME, make_result
    from storage.db import Database
    from storage.ingest import ingest_result
    db = Database(sys.argv[1], data_path=sys.argv[2])
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
    reader = Database(lake.spec, create=False, lock_timeout=10)
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
    from test_runner import FakeExecutor

    from ci.runner import Runner, RunnerConfig
    from tests.repo_factory import small_repo

    db = Database(tmp_path / "history.duckdb", lock_timeout=20)
    repo = small_repo(tmp_path / "repo", n_commits=1)
    shas = [repo.commit_file("notes.txt", f"{i}\n", f"c{i}") for i in range(5)]
    plan = dict.fromkeys(shas, "pass") | {shas[3]: "slow", shas[4]: "incorrect"}
    for sha in shas:
        jobs.enqueue(db, str(repo.path), sha, branch="main")
    Runner(db, RunnerConfig(worker="w"), executor=FakeExecutor(plan)).run(once=True)
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
    dst = Database(lake.spec, create=False)
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
    db = lake.db()
    for doc in docs(10):
        ingest_result(db, doc)

    def files() -> int:
        with db.read() as conn:
            return conn.execute("SELECT count(*) FROM ducklake_list_files('lake', 'samples')").fetchone()[0]

    with db.read() as conn:
        before = conn.execute("SELECT count(*), sum(hash(s)::HUGEINT) FROM samples s").fetchone()
    compact(db)  # inlined rows to Parquet, then adjacent files merged
    res = run_cli(["compact"], lake.env())
    assert res.returncode == 0 and "files_merged" in res.stdout, res.stderr
    with db.read() as conn:
        after = conn.execute("SELECT count(*), sum(hash(s)::HUGEINT) FROM samples s").fetchone()
    assert after == before
    assert files() <= 2


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
        other = Database(lake.spec)
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
    from dashboard import data

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
