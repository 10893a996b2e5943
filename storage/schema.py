"""DDL and migrations. The version lives in table ``solci_schema`` (one row per applied migration).

To change the schema, append a migration to ``MIGRATIONS`` (never edit an applied one); ``migrate`` applies
the missing ones in order, each in its own transaction together with its version row.

Tables (version 1):
- ``solci_schema``   version, applied_at, description
- ``commits``        commit, repo, branch, first_seen
- ``hardware``       fingerprint -> label, gpu_model, gpu_name, sm_count, memory, driver, cuda, torch, ...
- ``protocols``      hash -> name, timer, warmup, iters, l2_flush, flush_bytes, rotate_inputs, statistic, spec
- ``runs``           one row per run: commit, time, hardware, primary protocol, suite figures, job_id
- ``results``        one row per run x case: status, error, median/eager/cuBLAS/T_SOL (us), score, config...
- ``samples``        one row per run x case x impl x protocol: summary statistics and ``samples_us DOUBLE[]``
- ``jobs``           the queue (queued/running/done/failed)
- ``flags``          version 1's judging (regression / improvement / ... per run and case); dropped by version 3
- ``records``        best-known figures: published B200 leaderboard rows and the project's own records
- ``record_events``  "record broken": a figure that beat the project's record

Added by version 2:
- ``verdicts``       one row per judged run: verdict (see ``ci.verdict.rules.VERDICTS``), suite change and
                     interval, cases moved, drift / clock notes, the step it opened, the message
- ``verdict_cases``  per run x case: change against the level, the tested figure, threshold, z, p, q (FDR), the
                     noise used, the controls' change, and the confirmation's paired change with its interval
- ``steps``          one row per detected change of level (culprit commit, status open / fixed / acknowledged /
                     improvement / ambiguous / not_reproduced / pending, suite change with its interval)
- ``step_cases``     the cases a step moved: change, interval, level before and after (us)
- ``noise``          the between-run spread per series (hardware label, protocol) and case last used by judging
- ``rejected_runs``  result documents that failed validation at ingest, with the reason (never stored as figures)
- ``watch_state``    the last commit ``solci watch`` saw per (repo, branch)
- columns: ``commits.parent``; ``runs.purpose`` (measure | confirm), ``runs.harness`` (the harness version),
  ``runs.quarantine`` (why its figures are impossible, e.g. below the speed of light); ``jobs.lease_owner``,
  ``jobs.heartbeat_at``, ``jobs.gpu_model``

Version 3 drops ``flags`` (never written since version 2, read by nothing; ``solci flags`` lists ``steps``) and
its sequence.

Version 4 makes records from confirmed levels (``storage.records``, docs/verdicts.md "How records are made"):
- columns ``records.lo_us``, ``hi_us`` (the 95 % interval), ``n_runs`` (the commits it stands on), ``basis``
  (level | improvement), ``step_id``; ``record_events.new_lo_us``, ``new_hi_us``, ``n_runs``, ``basis``,
  ``step_id``
- ``levels``         the current level of each series and case as judging last left it, against the record
                     (``below_record``, ``below_since``)
- the project records are recomputed from the stored levels (``recompute_project_records``); the migration
  says what changed in one line (stderr, and the version row's description). A migration may return such a
  note.

Version 5 adds pull-request and branch series (docs/verdicts.md "Pull requests and branches"): ``runs.base`` and
``jobs.base``, the merge-base a run of a pull request's commit was judged against (NULL: the run is of main's
line); such runs and their steps never enter main's levels, steps or records.

Case names are stored in column ``case_name`` (``case`` is an SQL keyword); ``'__suite__'`` stands for the
geometric mean over a run's cases.

Backends: the same migrations build the file's schema and a lake's (``storage.lake``). DuckLake has no
PRIMARY KEY / UNIQUE / CHECK constraints, indexes or sequences, so ``adapt_ddl`` drops those for the lake and
replaces each ``DEFAULT nextval(...)`` by a time-ordered 64-bit id (``LAKE_ID_DEFAULT``: the transaction's
millisecond times 2^20 plus 20 random bits). The tables mean the same on both; uniqueness of run_id is kept by
ingest (a SELECT first, inside its transaction) and, on the lake, by serialized write transactions. A lake's
``jobs`` and ``watch_state`` tables exist for the same SQL to run, but stay empty: its queue lives in PostgreSQL
(``storage.lake_queue``), and a lake's readers see that queue under those two names.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from problem.workload import B200_RECORDS, CASES, LEADERBOARD_SOURCE
from storage import records
from storage.backend import SchemaVersionError

SUITE = "__suite__"
# steps.status: a boundary is a change of level the judging stands by (the level starts again after it); the
# others are a step's way there (pending) or its end without one, or a step blamed on a descendant of the
# commit that made the change, withdrawn when that commit was judged (withdrawn).
BOUNDARY_STATUSES = ("open", "fixed", "acknowledged", "improvement")
STEP_STATUSES = (*BOUNDARY_STATUSES, "pending", "ambiguous", "not_reproduced", "withdrawn")
PUBLISHED_PROTOCOL = "SOL-ExecBench v1.1"
PUBLISHED_HARDWARE_LABEL = "NVIDIA B200"

_V1_DDL = """
CREATE TABLE solci_schema (
    version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL, description VARCHAR NOT NULL);
CREATE TABLE commits (
    "commit" VARCHAR PRIMARY KEY, repo VARCHAR, branch VARCHAR, first_seen TIMESTAMP NOT NULL);
CREATE TABLE hardware (
    fingerprint VARCHAR PRIMARY KEY, label VARCHAR NOT NULL, gpu_model VARCHAR, gpu_name VARCHAR,
    sm_count INTEGER, memory_bytes BIGINT, driver VARCHAR, cuda VARCHAR, torch VARCHAR, triton VARCHAR,
    python VARCHAR, cpu VARCHAR, first_seen TIMESTAMP NOT NULL);
CREATE TABLE protocols (
    hash VARCHAR PRIMARY KEY, name VARCHAR NOT NULL, timer VARCHAR, warmup INTEGER, iters INTEGER,
    l2_flush BOOLEAN, flush_bytes BIGINT, rotate_inputs BOOLEAN, statistic VARCHAR, spec JSON,
    first_seen TIMESTAMP NOT NULL);
CREATE SEQUENCE runs_seq;
CREATE TABLE runs (
    run_id VARCHAR PRIMARY KEY, seq BIGINT NOT NULL DEFAULT nextval('runs_seq'),
    "commit" VARCHAR, branch VARCHAR, repo VARCHAR,
    started_at TIMESTAMP NOT NULL, finished_at TIMESTAMP, wall_s DOUBLE, mode VARCHAR NOT NULL,
    hardware_fingerprint VARCHAR, hardware_label VARCHAR NOT NULL, gpu_model VARCHAR, hostname VARCHAR,
    protocol VARCHAR NOT NULL, status VARCHAR NOT NULL, n_cases INTEGER NOT NULL, n_pass INTEGER NOT NULL,
    geomean_us DOUBLE, geomean_eager_us DOUBLE, geomean_cublas_us DOUBLE, score DOUBLE,
    ratio_vs_cublas DOUBLE, ratio_vs_eager DOUBLE, job_id BIGINT, ingested_at TIMESTAMP NOT NULL);
CREATE TABLE results (
    run_id VARCHAR NOT NULL, case_name VARCHAR NOT NULL, batch_size INTEGER, seq_len INTEGER, m INTEGER,
    status VARCHAR NOT NULL, error VARCHAR, median_us DOUBLE, eager_us DOUBLE, cublas_us DOUBLE,
    t_sol_us DOUBLE, score DOUBLE, config JSON, correctness JSON, telemetry JSON, wall_s DOUBLE);
CREATE TABLE samples (
    run_id VARCHAR NOT NULL, case_name VARCHAR NOT NULL, impl VARCHAR NOT NULL, protocol VARCHAR NOT NULL,
    n INTEGER NOT NULL, median_us DOUBLE, mean_us DOUBLE, min_us DOUBLE, max_us DOUBLE, iqr_us DOUBLE,
    stdev_us DOUBLE, samples_us DOUBLE[] NOT NULL);
CREATE SEQUENCE jobs_seq;
CREATE TABLE jobs (
    id BIGINT PRIMARY KEY DEFAULT nextval('jobs_seq'), repo VARCHAR NOT NULL, "commit" VARCHAR NOT NULL,
    branch VARCHAR, "trigger" VARCHAR NOT NULL,
    status VARCHAR NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0, enqueued_at TIMESTAMP NOT NULL, started_at TIMESTAMP,
    finished_at TIMESTAMP, outcome VARCHAR, run_id VARCHAR, worker VARCHAR, gpu VARCHAR, log VARCHAR);
CREATE SEQUENCE flags_seq;
CREATE TABLE flags (
    id BIGINT PRIMARY KEY DEFAULT nextval('flags_seq'), run_id VARCHAR NOT NULL, "commit" VARCHAR,
    case_name VARCHAR NOT NULL,
    kind VARCHAR NOT NULL CHECK (kind IN ('regression', 'improvement', 'new_record', 'incorrect', 'error')),
    magnitude DOUBLE, p_value DOUBLE, baseline_median_us DOUBLE, new_median_us DOUBLE,
    message VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL);
CREATE TABLE records (
    kind VARCHAR NOT NULL CHECK (kind IN ('published', 'project')),
    gpu_model VARCHAR, hardware_label VARCHAR NOT NULL, protocol VARCHAR NOT NULL, case_name VARCHAR NOT NULL,
    n_cases INTEGER, rank INTEGER, implementation VARCHAR, latency_us DOUBLE NOT NULL, pct_sol DOUBLE,
    source VARCHAR NOT NULL, observed_at TIMESTAMP, run_id VARCHAR, "commit" VARCHAR, updated_at TIMESTAMP);
CREATE SEQUENCE record_events_seq;
CREATE TABLE record_events (
    id BIGINT PRIMARY KEY DEFAULT nextval('record_events_seq'), run_id VARCHAR NOT NULL, "commit" VARCHAR,
    hardware_label VARCHAR NOT NULL, gpu_model VARCHAR, protocol VARCHAR NOT NULL, case_name VARCHAR NOT NULL,
    n_cases INTEGER, previous_us DOUBLE NOT NULL, previous_run_id VARCHAR, previous_commit VARCHAR,
    new_us DOUBLE NOT NULL, broken_at TIMESTAMP NOT NULL);
CREATE INDEX runs_hw_proto ON runs (hardware_label, protocol);
"""


def _seed_published_records(conn: duckdb.DuckDBPyConnection) -> None:
    now = _now()
    rows = [
        (
            "published",
            r.gpu_model,
            PUBLISHED_HARDWARE_LABEL,
            PUBLISHED_PROTOCOL,
            SUITE,
            len(CASES),
            r.rank,
            r.implementation,
            r.latency_us,
            float(r.pct_sol),
            LEADERBOARD_SOURCE,
            datetime.fromisoformat(r.observed),
            None,
            None,
            now,
        )
        for r in B200_RECORDS
    ]
    conn.executemany("INSERT INTO records VALUES (" + ", ".join(["?"] * 15) + ")", rows)


BACKENDS = ("file", "lake")
# A time-ordered id without a sequence (DuckLake has none): milliseconds of the transaction x 2^20 + 20 random
# bits. Unique with overwhelming probability, ordered between transactions, fits BIGINT until the year 2248.
LAKE_ID_DEFAULT = "(epoch_ms(now()) * 1048576 + CAST(floor(random() * 1048576) AS BIGINT))"


def _strip_checks(stmt: str) -> str:
    """Remove every ``CHECK (...)`` clause (balanced parentheses)."""
    out, i = [], 0
    for m in re.finditer(r"\s+CHECK\s*\(", stmt):
        if m.start() < i:
            continue
        out.append(stmt[i : m.start()])
        depth, j = 1, m.end()
        while depth and j < len(stmt):
            depth += {"(": 1, ")": -1}.get(stmt[j], 0)
            j += 1
        i = j
    out.append(stmt[i:])
    return "".join(out)


# The lake backend's job queue and watch state live in PostgreSQL beside the catalog (storage/lake_queue.py):
# row locks (FOR UPDATE SKIP LOCKED) across hosts. Created once by the process that creates the lake.
QUEUE_DDL = """
CREATE SCHEMA IF NOT EXISTS solci;
CREATE TABLE IF NOT EXISTS solci.jobs (
    id BIGSERIAL PRIMARY KEY, repo TEXT NOT NULL, "commit" TEXT NOT NULL, branch TEXT, "trigger" TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0, enqueued_at TIMESTAMP NOT NULL, started_at TIMESTAMP,
    finished_at TIMESTAMP, outcome TEXT, run_id TEXT, worker TEXT, gpu TEXT, log TEXT,
    lease_owner TEXT, heartbeat_at TIMESTAMP, gpu_model TEXT);
ALTER TABLE solci.jobs ADD COLUMN IF NOT EXISTS base TEXT;
CREATE INDEX IF NOT EXISTS jobs_queued ON solci.jobs (enqueued_at, id) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS jobs_running ON solci.jobs (gpu) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS jobs_commit ON solci.jobs (repo, "commit");
CREATE TABLE IF NOT EXISTS solci.gpu_models (
    gpu_model TEXT NOT NULL, host TEXT NOT NULL, first_seen TIMESTAMP NOT NULL, last_seen TIMESTAMP NOT NULL,
    PRIMARY KEY (gpu_model, host));
CREATE TABLE IF NOT EXISTS solci.watch_state (
    repo TEXT NOT NULL, branch TEXT NOT NULL, last_commit TEXT NOT NULL, updated_at TIMESTAMP NOT NULL,
    PRIMARY KEY (repo, branch));
"""


def adapt_ddl(ddl: str, backend: str) -> list[str]:
    """The statements of ``ddl`` for ``backend``: unchanged for the file; for the lake without sequences,
    indexes, PRIMARY KEY / UNIQUE / CHECK constraints, and with sequence defaults replaced by LAKE_ID_DEFAULT."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    statements = [s.strip() for s in ddl.split(";") if s.strip()]
    if backend == "file":
        return statements
    out = []
    for stmt in statements:
        head = " ".join(stmt.split()[:2]).upper()
        if head in ("CREATE SEQUENCE", "CREATE INDEX", "CREATE UNIQUE"):
            continue
        stmt = re.sub(r"DEFAULT\s+nextval\('[^']*'\)", f"DEFAULT {LAKE_ID_DEFAULT}", stmt)
        stmt = re.sub(r",\s*PRIMARY KEY\s*\([^)]*\)", "", stmt)
        stmt = re.sub(r"\s+PRIMARY KEY\b", "", stmt)
        stmt = re.sub(r",\s*UNIQUE\s*\([^)]*\)", "", stmt)
        out.append(_strip_checks(stmt))
    return out


def _run_ddl(conn: duckdb.DuckDBPyConnection, ddl: str, backend: str) -> None:
    for stmt in adapt_ddl(ddl, backend):
        conn.execute(stmt)


def _v1(conn: duckdb.DuckDBPyConnection, backend: str = "file") -> None:
    _run_ddl(conn, _V1_DDL, backend)
    _seed_published_records(conn)


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[..., str | None]  # (conn) on the file; (conn, backend) on a lake; a note of what changed


_V2_DDL = """
ALTER TABLE commits ADD COLUMN parent VARCHAR;
ALTER TABLE runs ADD COLUMN purpose VARCHAR DEFAULT 'measure';
ALTER TABLE runs ADD COLUMN harness VARCHAR;
ALTER TABLE runs ADD COLUMN quarantine VARCHAR;
ALTER TABLE jobs ADD COLUMN lease_owner VARCHAR;
ALTER TABLE jobs ADD COLUMN heartbeat_at TIMESTAMP;
ALTER TABLE jobs ADD COLUMN gpu_model VARCHAR;
CREATE TABLE verdicts (
    run_id VARCHAR PRIMARY KEY, "commit" VARCHAR, hardware_label VARCHAR, protocol VARCHAR, branch VARCHAR,
    verdict VARCHAR NOT NULL, n_cases INTEGER, cases_moved INTEGER, suite_change DOUBLE, suite_lo DOUBLE,
    suite_hi DOUBLE, worst_case VARCHAR, worst_change DOUBLE, drift BOOLEAN, clock BOOLEAN, level_commits INTEGER,
    baseline_commit VARCHAR, step_id VARCHAR, message VARCHAR NOT NULL, judged_at TIMESTAMP NOT NULL);
CREATE TABLE verdict_cases (
    run_id VARCHAR NOT NULL, case_name VARCHAR NOT NULL, status VARCHAR, change DOUBLE, tested_change DOUBLE,
    threshold DOUBLE, z DOUBLE, p_value DOUBLE, q_value DOUBLE, sigma DOUBLE, moved BOOLEAN, control_change DOUBLE,
    clock_change DOUBLE, throttled BOOLEAN, confirmed BOOLEAN, confirmed_change DOUBLE, confirmed_lo DOUBLE,
    confirmed_hi DOUBLE);
CREATE TABLE steps (
    step_id VARCHAR PRIMARY KEY, hardware_label VARCHAR NOT NULL, protocol VARCHAR NOT NULL, branch VARCHAR,
    "commit" VARCHAR NOT NULL, parent_commit VARCHAR, run_id VARCHAR, status VARCHAR NOT NULL,
    direction VARCHAR NOT NULL, detected_by VARCHAR NOT NULL, n_cases INTEGER, cases_moved INTEGER,
    suite_change DOUBLE, suite_lo DOUBLE, suite_hi DOUBLE, fixed_by VARCHAR, ack_reason VARCHAR, ack_at TIMESTAMP,
    message VARCHAR, created_at TIMESTAMP NOT NULL, updated_at TIMESTAMP NOT NULL);
CREATE TABLE step_cases (
    step_id VARCHAR NOT NULL, case_name VARCHAR NOT NULL, change DOUBLE, lo DOUBLE, hi DOUBLE, before_us DOUBLE,
    after_us DOUBLE);
CREATE TABLE noise (
    hardware_label VARCHAR NOT NULL, protocol VARCHAR NOT NULL, case_name VARCHAR NOT NULL, sigma_screen DOUBLE,
    sigma_pair DOUBLE, sigma_adjusted DOUBLE, n_screen INTEGER, n_pair INTEGER, updated_at TIMESTAMP NOT NULL);
CREATE TABLE rejected_runs (
    run_id VARCHAR, job_id BIGINT, "commit" VARCHAR, repo VARCHAR, branch VARCHAR, reason VARCHAR NOT NULL,
    size_bytes BIGINT, excerpt VARCHAR, received_at TIMESTAMP NOT NULL);
CREATE TABLE IF NOT EXISTS watch_state (
    repo VARCHAR NOT NULL, branch VARCHAR NOT NULL, last_commit VARCHAR NOT NULL, updated_at TIMESTAMP NOT NULL,
    PRIMARY KEY (repo, branch));
"""


def _v2(conn: duckdb.DuckDBPyConnection, backend: str = "file") -> None:
    _run_ddl(conn, _V2_DDL, backend)


def _v3(conn: duckdb.DuckDBPyConnection, backend: str = "file") -> None:
    conn.execute("DROP TABLE IF EXISTS flags")
    if backend == "file":  # a lake has no sequences (adapt_ddl)
        conn.execute("DROP SEQUENCE IF EXISTS flags_seq")


def _series_points(conn: duckdb.DuckDBPyConnection, hw: str, proto: str) -> list[dict[str, Any]]:
    """The judged commits of a series in the order judging met them (their first measured run), each with its
    per-case mean log figure and the verdict of that run."""
    rows = conn.execute(
        """
        WITH judged AS (
            SELECT r."commit", min(r.started_at) AS t, arg_min(v.verdict, r.started_at) AS verdict,
                   arg_min(r.run_id, r.started_at) AS run_id
            FROM runs r JOIN verdicts v USING (run_id)
            WHERE r.hardware_label = $hw AND r.protocol = $proto AND r.mode = 'gpu' AND r.purpose = 'measure'
              AND r.status = 'pass' AND r.n_pass = r.n_cases AND r.quarantine IS NULL AND r.gpu_model IS NOT NULL
            GROUP BY 1
        )
        SELECT j."commit", j.t, j.verdict, j.run_id, x.case_name, avg(ln(x.median_us)) AS lg, count(DISTINCT r.run_id)
        FROM judged j JOIN runs r ON r."commit" = j."commit" JOIN results x ON x.run_id = r.run_id
        WHERE r.hardware_label = $hw AND r.protocol = $proto AND r.mode = 'gpu' AND r.status = 'pass'
          AND r.n_pass = r.n_cases AND r.quarantine IS NULL AND x.median_us > 0
        GROUP BY ALL ORDER BY j.t, j."commit", x.case_name
        """,
        {"hw": hw, "proto": proto},
    ).fetchall()
    points: dict[str, dict[str, Any]] = {}
    for commit, _, verdict, run_id, case, lg, _n in rows:
        p = points.setdefault(commit, {"commit": commit, "verdict": verdict, "run_id": run_id, "logs": {}})
        p["logs"][case] = lg
    return list(points.values())


def recompute_project_records(conn: duckdb.DuckDBPyConnection) -> str | None:
    """Rebuild every project record from what judging stored: per series (hardware label, protocol), its judged
    GPU commits in the order they were first measured, cut into levels by the confirmed steps, each judging of
    a verdict in ``records.RECORD_VERDICTS`` offering its level (and a confirmed improvement its paired estimate) to
    ``beats``, with the series' stored noise (``noise.sigma_screen``; the prior, 1 %, where none). The earlier
    records (the fastest single run ever seen) are replaced; earlier record events stay, as what was said then
    (``basis`` empty). Returns one line saying what changed (None when there were and are no project records)."""
    now = _now()
    old = {
        (r[0], r[1], r[2], r[3]): r[4]
        for r in conn.execute(
            "SELECT hardware_label, protocol, case_name, n_cases, latency_us FROM records WHERE kind = 'project'"
        ).fetchall()
    }
    conn.execute("DELETE FROM records WHERE kind = 'project'")
    series = conn.execute(
        """SELECT DISTINCT r.hardware_label, r.protocol, r.gpu_model FROM runs r JOIN verdicts v USING (run_id)
           WHERE r.mode = 'gpu' AND r.gpu_model IS NOT NULL ORDER BY 1, 2"""
    ).fetchall()
    for hw, proto, model in series:
        sigma = {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT case_name, sigma_screen FROM noise WHERE hardware_label = ? AND protocol = ?", [hw, proto]
            ).fetchall()
            if r[1]
        }
        boundaries = {
            r[0]
            for r in conn.execute(
                f"""SELECT "commit" FROM steps WHERE hardware_label = ? AND protocol = ?
                    AND status IN ({", ".join("?" * len(BOUNDARY_STATUSES))})""",
                [hw, proto, *BOUNDARY_STATUSES],
            ).fetchall()
        }
        improvements = conn.execute(
            """SELECT s."commit", s.step_id, c.case_name, c.change, c.lo, c.hi, c.before_us FROM steps s
               JOIN step_cases c USING (step_id)
               WHERE s.hardware_label = ? AND s.protocol = ? AND s.status = 'improvement'
                 AND s.detected_by = 'confirmed' AND c.before_us > 0 AND c.change > -1 AND c.hi < 0""",
            [hw, proto],
        ).fetchall()
        where = {"hardware_label": hw, "gpu_model": model, "protocol": proto}
        current: dict[tuple[str, int | None], records.Figure] = {}
        level: list[dict[str, Any]] = []
        for p in _series_points(conn, hw, proto):
            if p["commit"] in boundaries:
                level = []
            level.append(p)
            if p["verdict"] not in records.RECORD_VERDICTS:
                continue
            cands: list[tuple[str, int | None, records.Figure]] = []
            for sha, step_id, case, change, lo, hi, before_us in improvements:
                if sha != p["commit"]:
                    continue
                se = (math.log1p(hi) - math.log1p(lo)) / (2.0 * 2.576)  # a confirmation's interval: alpha 0.01
                cands.append(
                    (
                        case,
                        None,
                        records.improvement_figure(
                            math.log(before_us), math.log1p(change), se, commit=sha, run_id=p["run_id"], step_id=step_id
                        ),
                    )
                )
            cases = sorted(set.intersection(*(set(q["logs"]) for q in level)))
            first = level[0]["commit"]
            for case in [*cases, SUITE]:
                if case == SUITE:
                    logs = [statistics.fmean(q["logs"][c] for c in cases) for q in level] if cases else []
                else:
                    logs = [q["logs"][case] for q in level]
                fig = records.level_figure(logs, sigma.get(case, 0.01), commit=first, run_id=p["run_id"])
                if fig is not None:
                    cands.append((case, len(cases) if case == SUITE else None, fig))
            records.apply_candidates(
                conn,
                where,
                cands,
                current,
                k=records.DEFAULT_K,
                min_effect=records.DEFAULT_MIN_EFFECT,
                observed_at=None,
                now=now,
                log_events=False,
            )
    new = {
        (r[0], r[1], r[2], r[3]): r[4]
        for r in conn.execute(
            "SELECT hardware_label, protocol, case_name, n_cases, latency_us FROM records WHERE kind = 'project'"
        ).fetchall()
    }
    if not old and not new:
        return None
    kept = sum(1 for key in new if key in old)
    slower = sum(1 for key, v in new.items() if key in old and v > old[key] * (1 + 1e-9))
    return (
        f"records: {len(old)} project records (each the fastest single run seen) replaced by {len(new)} from "
        f"confirmed levels: {kept} of the same cases ({slower} of them slower than the run they replace), "
        f"{len(old) - kept} dropped (no level of {records.LEVEL_RECORD_RUNS} judged commits), {len(new) - kept} new"
    )


_V4_DDL = """
ALTER TABLE records ADD COLUMN lo_us DOUBLE;
ALTER TABLE records ADD COLUMN hi_us DOUBLE;
ALTER TABLE records ADD COLUMN n_runs INTEGER;
ALTER TABLE records ADD COLUMN basis VARCHAR;
ALTER TABLE records ADD COLUMN step_id VARCHAR;
ALTER TABLE record_events ADD COLUMN new_lo_us DOUBLE;
ALTER TABLE record_events ADD COLUMN new_hi_us DOUBLE;
ALTER TABLE record_events ADD COLUMN n_runs INTEGER;
ALTER TABLE record_events ADD COLUMN basis VARCHAR;
ALTER TABLE record_events ADD COLUMN step_id VARCHAR;
CREATE TABLE levels (
    hardware_label VARCHAR NOT NULL, protocol VARCHAR NOT NULL, case_name VARCHAR NOT NULL, n_cases INTEGER,
    level_us DOUBLE NOT NULL, lo_us DOUBLE, hi_us DOUBLE, n_runs INTEGER NOT NULL, pct_sol DOUBLE,
    first_commit VARCHAR, run_id VARCHAR, record_us DOUBLE, record_commit VARCHAR, below_record BOOLEAN NOT NULL,
    below_since VARCHAR, updated_at TIMESTAMP NOT NULL);
"""


def _v4(conn: duckdb.DuckDBPyConnection, backend: str = "file") -> str | None:
    _run_ddl(conn, _V4_DDL, backend)
    return recompute_project_records(conn)


_V5_DDL = """
ALTER TABLE runs ADD COLUMN IF NOT EXISTS base VARCHAR;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS base VARCHAR;
"""


def _v5(conn: duckdb.DuckDBPyConnection, backend: str = "file") -> None:
    _run_ddl(conn, _V5_DDL, backend)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema; published B200 leaderboard records", _v1),
    Migration(
        2,
        "stored judging (verdicts, steps, noise), run purpose/harness/quarantine, commit parents, rejected runs, "
        "job leases, watch state",
        _v2,
    ),
    Migration(3, "drop the unused flags table (version 1's judging)", _v3),
    Migration(
        4,
        "records from confirmed levels: records and record_events gain interval, n_runs, basis, step_id; table "
        "levels; project records recomputed from the stored levels",
        _v4,
    ),
    Migration(5, "pull-request series: runs.base and jobs.base (the merge-base a run is judged against)", _v5),
)
CURRENT_VERSION = MIGRATIONS[-1].version


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _tables(conn: duckdb.DuckDBPyConnection) -> set[str]:
    rows = conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main'"
    ).fetchall()
    return {r[0] for r in rows}


def stored_version(conn: duckdb.DuckDBPyConnection, tables: set[str] | None = None) -> int:
    """The highest applied migration; 0 for a file without the version table."""
    if "solci_schema" not in (tables if tables is not None else _tables(conn)):
        return 0
    row = conn.execute("SELECT max(version) FROM solci_schema").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def check_version(conn: duckdb.DuckDBPyConnection, path: Path | str) -> int:
    """The stored version; SchemaVersionError when it is newer than this code or the file is not ours."""
    tables = _tables(conn)
    if "solci_schema" not in tables:
        if tables:
            raise SchemaVersionError(
                f"{path}: a DuckDB database, but not a solci history (tables: {', '.join(sorted(tables)[:8])}). "
                "It was left untouched; point --db / $SOLCI_DB at another file."
            )
        return 0
    version = stored_version(conn, tables)
    if version > CURRENT_VERSION:
        raise SchemaVersionError(
            f"{path}: schema version {version} is newer than this solci knows (up to {CURRENT_VERSION}); "
            "it was written by a newer solci. Upgrade solci (git pull; pip install -e .), or point "
            "--db / $SOLCI_DB at another file. The file was left untouched."
        )
    return version


def migrate(conn: duckdb.DuckDBPyConnection, path: Path | str, backend: str = "file") -> int:
    """Apply the missing migrations (each in one transaction); return the resulting version.

    A new lake gets them all in order too (it starts at the current version); the caller makes sure only one
    process migrates a lake (``storage.lake`` holds a PostgreSQL advisory lock around this)."""
    version = check_version(conn, path)
    for mig in MIGRATIONS:
        if mig.version <= version:
            continue
        conn.begin()
        try:
            note = mig.apply(conn) if backend == "file" else mig.apply(conn, backend)
            description = f"{mig.description}; {note}" if note else mig.description
            conn.execute("INSERT INTO solci_schema VALUES (?, ?, ?)", [mig.version, _now(), description])
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        if note:  # what a migration changed in the history's figures (one line, on stderr: stdout is the command's)
            print(f"solci: {path}: schema version {mig.version}: {note}", file=sys.stderr)
        version = mig.version
    return version
