"""Storage: opening, migrations, errors, ingest (idempotent, atomic), records, queries."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from problem.workload import B200_RECORDS, LEADERBOARD_SOURCE
from storage import ingest as ingest_mod
from storage import jobs, queries, schema
from storage.db import (
    DB_ENV,
    Database,
    DatabaseCorruptError,
    DatabaseLockedError,
    FileDatabase,
    LakeDatabase,
    SchemaVersionError,
    StorageError,
    default_db_path,
    open_database,
)
from storage.file_queue import FileQueue
from storage.ingest import ingest_result
from storage.lake_queue import PgQueue
from storage.result import RejectedResult
from tests.support.factories import BASE_TIME, make_result, make_series

FEW = ["4,128", "8,256", "1,1024"]
TABLES = {
    "solci_schema",
    "commits",
    "hardware",
    "protocols",
    "runs",
    "results",
    "samples",
    "jobs",
    "records",
    "record_events",
    "levels",
}


def count(db: Database, table: str, where: str = "", params: list | None = None) -> int:
    with db.read() as conn:
        return conn.execute(f"SELECT count(*) FROM {table} {where}", params or []).fetchone()[0]


# ------------------------------------------------------------------------------------------------ opening
def test_default_path(monkeypatch):
    monkeypatch.delenv(DB_ENV, raising=False)
    assert default_db_path() == Path(".solci") / "history.duckdb"
    monkeypatch.setenv(DB_ENV, "/tmp/x/y.duckdb")
    assert default_db_path() == Path("/tmp/x/y.duckdb")
    assert open_database().path == Path("/tmp/x/y.duckdb")


def test_migration_from_empty_and_reopen(tmp_path):
    db = open_database(tmp_path / "sub" / "dir" / "h.duckdb")
    assert db.schema_version() == 0  # missing file: nothing created by asking
    assert not db.path.exists()
    with db.write() as conn:
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert TABLES <= tables
    assert "flags" not in tables  # version 1's judging, dropped by version 3
    assert db.schema_version() == schema.CURRENT_VERSION
    # re-open (a new object, as another process would): nothing re-applied, records seeded once
    again = open_database(db.path)
    with again.write():
        pass
    assert again.schema_version() == schema.CURRENT_VERSION
    assert count(again, "solci_schema") == len(schema.MIGRATIONS)
    assert count(again, "records", "WHERE kind = 'published'") == len(B200_RECORDS)


def test_open_database_picks_the_backend_once(tmp_path, monkeypatch):
    monkeypatch.delenv(DB_ENV, raising=False)
    db = open_database(tmp_path / "h.duckdb", lock_timeout=3, create=False)
    assert isinstance(db, Database) and isinstance(db, FileDatabase) and db.backend == "file"
    assert (db.path, db.lock_timeout, db.create) == (tmp_path / "h.duckdb", 3.0, False)
    assert isinstance(db.queue, FileQueue) and db.queue is db.queue  # the queue is chosen once per handle
    lake = open_database("ducklake:postgres:dbname=x host=h user=u", data_path=tmp_path / "data")
    assert isinstance(lake, Database) and isinstance(lake, LakeDatabase) and lake.backend == "lake"
    assert isinstance(lake.queue, PgQueue) and lake.data_path == str(tmp_path / "data") + "/"
    monkeypatch.setenv("SOLCI_DATA_PATH", str(tmp_path / "env-data"))
    assert open_database("ducklake:postgres:dbname=x").data_path == str(tmp_path / "env-data") + "/"
    with pytest.raises(TypeError):
        Database(tmp_path / "h.duckdb")  # the interface itself opens nothing


def test_a_version_2_history_upgrades_and_loses_the_unused_flags_table(tmp_path, monkeypatch):
    path = tmp_path / "v2.duckdb"
    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:2])
    monkeypatch.setattr(schema, "CURRENT_VERSION", 2)
    with open_database(path).write() as conn:  # a history written by the solci before version 3
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "flags" in tables
    ingest_result(open_database(path), make_result(run_id="old", commit="c0", cases=FEW, n_samples=5))
    monkeypatch.undo()
    db = open_database(path)
    assert db.schema_version() == 2
    assert list(queries.runs(db)["run_id"]) == ["old"]  # a reader upgrades it; the runs stay
    assert db.schema_version() == schema.CURRENT_VERSION == 5
    with db.read() as conn:
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        sequences = {r[0] for r in conn.execute("SELECT sequence_name FROM duckdb_sequences()").fetchall()}
    assert TABLES <= tables and "flags" not in tables and "flags_seq" not in sequences
    assert count(db, "solci_schema") == 5


def test_read_creates_missing_file(tmp_path):
    db = open_database(tmp_path / "new.duckdb")
    assert queries.history(db).empty
    assert db.schema_version() == schema.CURRENT_VERSION


def test_existing_empty_duckdb_file_is_initialised(tmp_path):
    path = tmp_path / "h.duckdb"
    duckdb.connect(str(path)).close()
    db = open_database(path)
    assert len(queries.records(db)) == len(B200_RECORDS)


def test_migrations_apply_in_order(tmp_path, monkeypatch):
    db = open_database(tmp_path / "h.duckdb")
    with db.write():
        pass
    v2 = schema.Migration(
        schema.CURRENT_VERSION + 1, "test: add a column", lambda c: c.execute("ALTER TABLE runs ADD COLUMN x INT")
    )
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, v2))
    monkeypatch.setattr(schema, "CURRENT_VERSION", v2.version)
    with open_database(db.path).write() as conn:
        assert "x" in [r[0] for r in conn.execute("DESCRIBE runs").fetchall()]
    assert open_database(db.path).schema_version() == v2.version


def test_newer_schema_version_is_a_clear_error(tmp_path):
    db = open_database(tmp_path / "h.duckdb")
    with db.write() as conn:
        conn.execute("INSERT INTO solci_schema VALUES (999, now()::TIMESTAMP, 'from the future')")
    for opener in (open_database(db.path).write, open_database(db.path).read):
        with pytest.raises(SchemaVersionError) as err, opener():
            pass
        msg = str(err.value)
        assert "999" in msg and str(db.path) in msg and "newer" in msg


@pytest.mark.parametrize("content", [b"", b"this is not a database\n" * 500, b"\x00" * 8192])
def test_corrupt_file_left_untouched(tmp_path, content):
    path = tmp_path / "h.duckdb"
    path.write_bytes(content)
    before = sorted(p.name for p in tmp_path.iterdir())
    db = open_database(path, lock_timeout=1)
    for opener in (db.write, db.read):
        with pytest.raises(DatabaseCorruptError) as err, opener():
            pass
        msg = str(err.value)
        assert str(path) in msg and "untouched" in msg and "aside" in msg
    with pytest.raises(DatabaseCorruptError):
        ingest_result(db, make_result(cases=FEW))
    with pytest.raises(DatabaseCorruptError):
        queries.history(db)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_foreign_duckdb_file_is_refused(tmp_path):
    path = tmp_path / "other.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE mine (a INT)")
    with pytest.raises(SchemaVersionError, match="not a solci history"), open_database(path).write():
        pass
    with duckdb.connect(str(path), read_only=True) as conn:
        assert [r[0] for r in conn.execute("SHOW TABLES").fetchall()] == ["mine"]


def test_locked_file_is_a_clear_error(tmp_path):
    path = tmp_path / "h.duckdb"
    with open_database(path).write():
        pass
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import duckdb, sys, time
            c = duckdb.connect({str(path)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        db = open_database(path, lock_timeout=0.3)
        for opener in (db.write, db.read):
            with pytest.raises(DatabaseLockedError) as err, opener():
                pass
            msg = str(err.value)
            assert str(path) in msg and "another process" in msg
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    with open_database(path).read() as conn:  # released: fine again
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


# ------------------------------------------------------------------------------------------------ ingest
def test_ingest_is_idempotent(db):
    doc = make_result(run_id="r1", cases=FEW)
    assert ingest_result(db, doc) is True
    sizes = {t: count(db, t) for t in TABLES}
    assert ingest_result(db, doc) is False
    with pytest.raises(RejectedResult, match="already stored, for commit c1"):  # never another commit's run
        ingest_result(db, make_result(run_id="r1", cases=FEW, commit="other"))
    assert {t: count(db, t) for t in TABLES} == sizes
    assert sizes["runs"] == 1 and sizes["results"] == 3 and sizes["samples"] == 9
    with db.read() as conn:
        n = conn.execute("SELECT n, len(samples_us) FROM samples WHERE impl = 'kernel' LIMIT 1").fetchone()
    assert n == (50, 50)


def test_ingest_stores_the_document(db):
    doc = make_result(run_id="r1", commit="abc", cases=FEW, started_at="2026-11-05T10:00:00+02:00")
    ingest_result(db, doc, job_id=None)
    info = queries.run_info(db, "r1")
    assert info["commit"] == "abc" and info["hardware_label"] == "NVIDIA H200" and info["protocol"] == "p1"
    assert info["started_at"] == datetime(2026, 11, 5, 8, 0)  # stored as naive UTC
    assert info["geomean_us"] == pytest.approx(doc["suite"]["geomean_us"])
    cases = queries.run_cases(db, "r1")
    assert list(cases["case"]) == ["B4_S128", "B1_S1024", "B8_S256"]  # ordered by M
    s = queries.run_samples(db, "r1")
    assert s.loc[s["case"] == "B4_S128", "samples_us"].iloc[0].tolist() == next(
        t["samples_us"] for t in doc["cases"][0]["timings"] if t["impl"] == "kernel"
    )


def test_ingest_validates(db):
    doc = make_result(cases=FEW)
    del doc["hardware"]
    with pytest.raises(ValueError, match="hardware"):
        ingest_result(db, doc)


@pytest.mark.parametrize("failure", ["python", "sql"])
def test_ingest_is_atomic(db, monkeypatch, failure):
    ingest_result(db, make_result(run_id="before", commit="c0", cases=FEW, started_at=BASE_TIME))
    sizes = {t: count(db, t) for t in TABLES}

    def broken(conn, doc):
        if failure == "python":
            raise RuntimeError("disk on fire")
        conn.execute("INSERT INTO samples (run_id) VALUES ('x')")  # violates NOT NULL: a database error

    monkeypatch.setattr(ingest_mod, "_insert_samples", broken)
    doc = make_result(
        run_id="r2",
        commit="c-new",
        cases=FEW,
        medians=1.0,
        hardware_label="other gpu",
        protocol="p-new",
        started_at=BASE_TIME + timedelta(hours=1),
    )
    with pytest.raises((RuntimeError, duckdb.Error)):
        ingest_result(db, doc)
    # nothing of the run: no run, results, commit, hardware, protocol or record rows
    assert {t: count(db, t) for t in TABLES} == sizes
    monkeypatch.undo()
    assert ingest_result(db, doc) is True
    assert count(db, "results", "WHERE run_id = 'r2'") == 3


# ------------------------------------------------------------------------------------------------ records
def test_published_records_seeded(db):
    rec = queries.records(db)
    pub = rec[rec["kind"] == "published"]
    assert len(pub) == len(B200_RECORDS)
    top = pub.iloc[0]
    assert (top["rank"], top["implementation"], top["latency_us"], top["pct_sol"]) == (1, "RIAC as well", 39.4, 75)
    assert top["gpu_model"] == "B200" and top["source"] == LEADERBOARD_SOURCE and top["case"] == "__suite__"
    assert str(top["observed_at"].date()) == "2026-08-10"


def test_ingest_sets_no_record_records_come_from_judging(db):
    """A run never sets a record alone (issue 20): ingest stores figures; judging makes records from confirmed
    levels (storage.records, tests/verdict/test_records.py)."""
    for i, m in enumerate([100.0, 50.0, 40.0]):
        ingest_result(db, make_result(run_id=f"r{i}", commit=f"c{i}", cases=FEW, medians=m, started_at=BASE_TIME))
    assert queries.records(db).query("kind == 'project'").empty
    assert queries.record_events(db).empty and queries.levels(db).empty


def _judged(db, medians: list[float]) -> None:
    from ci.verdict.apply import judge_run

    commits = [f"c{i}" for i in range(len(medians))]
    for i, m in enumerate(medians):
        doc = make_result(
            run_id=f"r{i}", commit=commits[i], cases=FEW, medians=m, started_at=BASE_TIME + timedelta(hours=i)
        )
        ingest_result(db, doc)
        judge_run(db, doc["run_id"], ancestry=commits[: i + 1][::-1])


def test_project_records_are_per_hardware_label_and_from_passing_runs(db):
    _judged(db, [100.0, 100.2, 99.8])
    proj = queries.records(db).query("kind == 'project'").set_index("case")
    assert set(proj.index) == {"B4_S128", "B8_S256", "B1_S1024", "__suite__"}
    assert (proj["latency_us"].round(6) == 100.0).all() and set(proj["commit"]) == {"c0"}
    assert proj.loc["__suite__", "n_cases"] == 3 and set(proj["basis"]) == {"level"}
    # faster on every case but one case incorrect: judged incorrect, never a record
    bad = make_result(run_id="bad", commit="c3", cases=FEW, medians=50.0, status={"B8_S256": "incorrect"})
    ingest_result(db, bad)
    from ci.verdict.apply import judge_run

    assert judge_run(db, "bad", ancestry=["c3", "c2", "c1", "c0"]).verdict == "incorrect"
    assert set(queries.records(db).query("kind == 'project'")["commit"]) == {"c0"}
    assert queries.record_events(db).empty
    # records are per hardware label: another GPU starts its own
    for i in range(3):
        doc = make_result(
            run_id=f"h{i}", commit=f"h{i}", cases=FEW, medians=500.0, hardware_label="NVIDIA H100", gpu_model="H100"
        )
        ingest_result(db, doc)
        judge_run(db, f"h{i}", ancestry=[f"h{j}" for j in range(i, -1, -1)])
    proj = queries.records(db).query("kind == 'project'")
    assert set(proj["hardware"]) == {"NVIDIA H200", "NVIDIA H100"}


# ------------------------------------------------------------------------------------------------ queries
def test_history_filters_and_limit(db):
    for doc in make_series(4, cases=FEW):
        ingest_result(db, doc)
    ingest_result(
        db,
        make_result(
            run_id="h100",
            cases=FEW,
            hardware_label="NVIDIA H100",
            gpu_model="H100",
            protocol="p2",
            started_at=BASE_TIME + timedelta(days=1),
        ),
    )
    h = queries.history(db)
    assert len(h) == 5 * 3
    expected = {
        "run_id",
        "commit",
        "started_at",
        "hardware",
        "protocol",
        "run_status",
        "case",
        "status",
        "median_us",
        "eager_us",
        "cublas_us",
        "t_sol_us",
        "score",
    }
    assert expected <= set(h.columns)
    assert list(h["started_at"]) == sorted(h["started_at"])
    assert len(queries.history(db, case="4,128")) == 5
    assert set(queries.history(db, case="B4_S128")["case"]) == {"B4_S128"}
    assert len(queries.history(db, hardware="H200")) == 12
    assert len(queries.history(db, hardware="NVIDIA H100")) == 3
    assert len(queries.history(db, protocol="p2")) == 3
    assert len(queries.history(db, protocol="cuda_events_l2flush_rotate")) == 15  # by protocol name
    last2 = queries.history(db, hardware="H200", limit=2)
    assert list(dict.fromkeys(last2["run_id"])) == ["run0002", "run0003"]
    r = queries.runs(db, hardware="H200")
    assert list(r["run_id"]) == ["run0000", "run0001", "run0002", "run0003"]


def test_gaps(db):
    _judged(db, [100.0, 100.0, 100.0])  # a level of three commits: the records
    ingest_result(
        db, make_result(run_id="b", commit="cb", cases=FEW, medians=110.0, started_at=BASE_TIME + timedelta(hours=5))
    )
    g = queries.gaps(db).set_index("case")  # latest run: b
    assert (g["run_id"] == "b").all()
    assert g.loc["__suite__", "gap"] == pytest.approx(0.10)
    assert g.loc["__suite__", "best_commit"] == "c0"
    assert g.loc["__suite__", "record_implementation"] == "RIAC as well"
    assert g.loc["__suite__", "score_gap"] == pytest.approx(0.75 - g.loc["__suite__", "score"])
    assert g.loc["B4_S128", "gap"] == pytest.approx(0.10)
    assert queries.gaps(db, "r0").set_index("case").loc["__suite__", "gap"] == pytest.approx(0.0)
    with pytest.raises(StorageError):
        queries.gaps(db, "nope")


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO runs (run_id) VALUES ('x')",
        "DELETE FROM runs",
        "UPDATE jobs SET status = 'done'",
        "DROP TABLE runs",
        "CREATE TABLE t (a INT)",
        "COPY runs TO 'out.csv'",
        "ATTACH 'other.duckdb' AS o",
        "SELECT 1; DELETE FROM runs",
    ],
)
def test_run_sql_refuses_writes(db, sql, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ingest_result(db, make_result(run_id="r1", cases=FEW))
    with pytest.raises(StorageError, match="read-only"):
        queries.run_sql(db, sql)
    assert count(db, "runs") == 1
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "other.duckdb").exists()


def test_run_sql_reads(db):
    ingest_result(db, make_result(run_id="r1", cases=FEW))
    df = queries.run_sql(db, "SELECT case_name, median_us FROM results ORDER BY m")
    assert list(df["case_name"]) == ["B4_S128", "B1_S1024", "B8_S256"]
    assert not queries.run_sql(db, "SHOW TABLES").empty
    with pytest.raises(StorageError, match="no_such_table"):
        queries.run_sql(db, "SELECT * FROM no_such_table")


def test_nested_transactions_join_the_outer_one(db):
    with pytest.raises(RuntimeError), db.transaction():
        jobs.enqueue(db, "repo", "c1")
        ingest_result(db, make_result(run_id="r1", cases=FEW))
        raise RuntimeError("abort")
    assert count(db, "jobs") == 0 and count(db, "runs") == 0
    with db.transaction():
        jobs.enqueue(db, "repo", "c1")
        ingest_result(db, make_result(run_id="r1", cases=FEW))
    assert count(db, "jobs") == 1 and count(db, "runs") == 1


def test_sample_spread_and_protocol_names(db):
    import numpy as np

    doc = make_result(run_id="spread", commit="c1")
    ingest_result(db, doc)
    spread = queries.sample_spread(db, ["spread"])
    assert len(spread) == len(doc["cases"])
    for case in doc["cases"]:
        samples = next(
            t["samples_us"] for t in case["timings"] if t["impl"] == "kernel" and t["protocol"] == doc["protocol"]
        )
        row = spread[spread["case"] == case["case"]].iloc[0]
        assert row["q25_us"] == pytest.approx(np.quantile(samples, 0.25))
        assert row["q75_us"] == pytest.approx(np.quantile(samples, 0.75))
        assert row["n"] == len(samples)
    assert queries.sample_spread(db, []).empty
    names = queries.protocol_names(db)
    assert names[doc["protocol"]] == next(p["name"] for p in doc["protocols"] if p["hash"] == doc["protocol"])
