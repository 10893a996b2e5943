"""Read-only queries; each opens a read-only connection (retrying while locked) and returns a DataFrame.

DataFrame columns use ``case`` for the case name (the tables call it ``case_name``); ``'__suite__'`` stands for
the geometric mean over a run's cases. ``hardware`` filters match the hardware label ("NVIDIA H200") or the
GPU model ("H200"); ``protocol`` filters match the protocol hash or its name.
"""

from __future__ import annotations

import re
import threading

import duckdb
import pandas as pd

from problem.workload import Case
from storage.backend import READ_ONLY_CONFIG
from storage.db import Database, StorageError
from storage.schema import BOUNDARY_STATUSES, SUITE

_BOUNDARY = "(" + ", ".join(f"'{s}'" for s in BOUNDARY_STATUSES) + ")"  # SQL: IN {_BOUNDARY}

_READ_ONLY_STATEMENTS = ("SELECT", "EXPLAIN", "PRAGMA", "CALL")


def _passing(alias: str = "r") -> str:
    """SQL: the runs row ``alias`` is a passing run: every case passed and its figures are believed (not
    quarantined: faster than its hardware's speed of light). The one definition the dashboard's reads, judging's
    baselines and the best SOL score share."""
    return f"({alias}.status = 'pass' AND {alias}.n_pass = {alias}.n_cases AND {alias}.quarantine IS NULL)"


# The spread of the kernel's raw samples per run x case under the run's primary protocol (``$ids``: the runs).
_SPREAD = """
    SELECT s.run_id, s.case_name, list_aggregate(s.samples_us, 'quantile_cont', 0.25) AS q25_us,
           list_aggregate(s.samples_us, 'quantile_cont', 0.75) AS q75_us, s.min_us, s.max_us, s.n
    FROM samples s JOIN runs r ON r.run_id = s.run_id AND s.protocol = r.protocol
    WHERE s.impl = 'kernel' AND s.run_id IN (SELECT unnest($ids::VARCHAR[]))"""


def _case_name(case: str) -> str:
    if case == SUITE:
        return case
    try:
        return Case.parse(case).name
    except ValueError:
        return case


def _run_filters(hardware: str | None, protocol: str | None, alias: str = "r") -> tuple[list[str], list]:
    where: list[str] = []
    params: list = []
    if hardware is not None:
        where.append(f"({alias}.hardware_label = ? OR {alias}.gpu_model = ?)")
        params += [hardware, hardware]
    if protocol is not None:
        where.append(f"({alias}.protocol = ? OR {alias}.protocol IN (SELECT hash FROM protocols WHERE name = ?))")
        params += [protocol, protocol]
    return where, params


def _where(clauses: list[str]) -> str:
    return ("WHERE " + " AND ".join(clauses)) if clauses else ""


def history(
    db: Database,
    *,
    case: str | None = None,
    hardware: str | None = None,
    protocol: str | None = None,
    limit: int | None = None,
) -> pd.DataFrame:
    """One row per run x case, oldest first: run_id, commit, branch, started_at, hardware (label), gpu_model,
    protocol, mode, run_status, case, m, status, median_us, eager_us, cublas_us, t_sol_us, score.
    ``limit``: only the most recent ``limit`` runs (after the filters)."""
    run_where, params = _run_filters(hardware, protocol)
    case_clause = ""
    if case is not None:
        case_clause = "AND x.case_name = ?"
    limit_clause = ""
    if limit is not None:
        limit_clause = "ORDER BY r.started_at DESC, r.seq DESC LIMIT ?"
    sql = f"""
        WITH sel AS (
            SELECT r.run_id, r.seq, r."commit", r.branch, r.started_at, r.hardware_label, r.gpu_model,
                   r.protocol, r.mode, r.status
            FROM runs r {_where(run_where)} {limit_clause}
        )
        SELECT sel.run_id, sel."commit", sel.branch, sel.started_at, sel.hardware_label AS hardware,
               sel.gpu_model, sel.protocol, sel.mode, sel.status AS run_status, x.case_name AS "case", x.m,
               x.status, x.median_us, x.eager_us, x.cublas_us, x.t_sol_us, x.score
        FROM sel JOIN results x ON x.run_id = sel.run_id {case_clause}
        ORDER BY sel.started_at, sel.seq, x.m, x.case_name
    """
    if limit is not None:
        params.append(int(limit))
    if case is not None:
        params.append(_case_name(case))
    with db.read() as conn:
        return conn.execute(sql, params).df()


def runs(
    db: Database, *, hardware: str | None = None, protocol: str | None = None, limit: int | None = None
) -> pd.DataFrame:
    """One row per run, oldest first, with the suite figures (geomean_us, score, ratios) and the job id."""
    where, params = _run_filters(hardware, protocol)
    limit_clause = ""
    if limit is not None:
        limit_clause = "ORDER BY started_at DESC, seq DESC LIMIT ?"
        params.append(int(limit))
    sql = f"""
        SELECT * FROM (
            SELECT r.run_id, r."commit", r.branch, r.repo, r.started_at, r.finished_at, r.wall_s, r.mode,
                   r.hardware_label AS hardware, r.gpu_model, r.hostname, r.protocol, r.status, r.n_cases,
                   r.n_pass, r.geomean_us, r.geomean_eager_us, r.geomean_cublas_us, r.score,
                   r.ratio_vs_cublas, r.ratio_vs_eager, r.job_id, r.seq
            FROM runs r {_where(where)} {limit_clause}
        ) ORDER BY started_at, seq
    """
    with db.read() as conn:
        return conn.execute(sql, params).df().drop(columns=["seq"])


def run_info(db: Database, run_id: str) -> dict | None:
    """The runs row of one run as a dict (None when not stored)."""
    with db.read() as conn:
        return _run_info(conn, run_id)


def _run_info(conn: duckdb.DuckDBPyConnection, run_id: str) -> dict | None:
    cur = conn.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row, strict=True))


def run_cases(db: Database, run_id: str) -> pd.DataFrame:
    """The results rows of one run (case, status, error, figures, config JSON ...)."""
    with db.read() as conn:
        return conn.execute(
            """SELECT case_name AS "case", * EXCLUDE (case_name) FROM results WHERE run_id = ?
               ORDER BY m, case_name""",
            [run_id],
        ).df()


def run_samples(db: Database, run_id: str, *, impl: str = "kernel") -> pd.DataFrame:
    """One row per case of one run: case, status, median_us, samples_us (list), under its primary protocol."""
    with db.read() as conn:
        return _samples_of(conn, [run_id], impl)


def _samples_of(conn: duckdb.DuckDBPyConnection, run_ids: list[str], impl: str) -> pd.DataFrame:
    return conn.execute(
        """SELECT r.run_id, r."commit", r.started_at, x.case_name AS "case", x.status, x.error,
                  s.median_us, s.samples_us
           FROM runs r
           JOIN results x ON x.run_id = r.run_id
           LEFT JOIN samples s ON s.run_id = x.run_id AND s.case_name = x.case_name AND s.impl = ?
                AND s.protocol = r.protocol
           WHERE r.run_id IN (SELECT unnest(?::VARCHAR[]))
           ORDER BY r.started_at, r.seq, x.m, x.case_name""",
        [impl, run_ids],
    ).df()


def record_events(db: Database, run_id: str | None = None) -> pd.DataFrame:
    """ "Record broken" events (newest first), optionally of one run: the record before and the figure that beat
    it, with its interval (new_lo_us, new_hi_us), the commits it stands on (n_runs), its basis (level |
    improvement; empty for an event of before schema version 4, when one run set a record) and the step of an
    improvement."""
    where, params = ("WHERE run_id = ?", [run_id]) if run_id else ("", [])
    with db.read() as conn:
        return conn.execute(
            f"""SELECT id, run_id, "commit", hardware_label AS hardware, gpu_model, protocol,
                       case_name AS "case", n_cases, previous_us, previous_run_id, previous_commit, new_us,
                       broken_at, new_lo_us, new_hi_us, n_runs, basis, step_id
                FROM record_events {where} ORDER BY id DESC""",
            params,
        ).df()


def records(db: Database) -> pd.DataFrame:
    """Best-known records: the published B200 leaderboard rows (by rank), then the project's records per
    hardware label, protocol and case (the suite row '__suite__' first): the best confirmed level
    (``storage.records``) with its interval (lo_us, hi_us), the commits it stands on (n_runs), its basis (level |
    improvement), its commit (a level's first commit, an improvement's culprit) and step."""
    with db.read() as conn:
        return conn.execute(
            """SELECT kind, gpu_model, hardware_label AS hardware, protocol, case_name AS "case", n_cases, rank,
                      implementation, latency_us, pct_sol, source, observed_at, run_id, "commit", lo_us, hi_us,
                      n_runs, basis, step_id
               FROM records
               ORDER BY kind = 'project', hardware_label, protocol, case_name <> '__suite__', rank,
                        case_name"""
        ).df()


def levels(db: Database, *, hardware: str | None = None, protocol: str | None = None) -> pd.DataFrame:
    """The current level of each series (hardware label, protocol) and case, as judging last left it, against
    the project record: level_us with its interval (lo_us, hi_us), n_runs (its commits), pct_sol (its SOL score,
    percent), since (its first commit), record_us, record_commit, below_record (slower than the record beyond
    noise) and below_since (the first commit of the level since which it has been), updated_at. Cases in
    benchmark order, the suite last; ``hardware`` matches the label exactly, ``protocol`` its hash or name."""
    where, params = [], []
    if hardware is not None:
        where.append("l.hardware_label = ?")
        params.append(hardware)
    if protocol is not None:
        where.append("(l.protocol = ? OR l.protocol IN (SELECT hash FROM protocols WHERE name = ?))")
        params += [protocol, protocol]
    with db.read() as conn:
        df = conn.execute(
            f"""SELECT l.hardware_label AS hardware, l.protocol, l.case_name AS "case", l.n_cases, l.level_us,
                       l.lo_us, l.hi_us, l.n_runs, l.pct_sol, l.first_commit AS since, l.record_us, l.record_commit,
                       l.level_us / l.record_us - 1 AS gap, l.below_record, l.below_since, l.updated_at
                FROM levels l {_where(where)}
                ORDER BY l.hardware_label, l.protocol, l.case_name = '__suite__', l.case_name""",
            params,
        ).df()
    if not df.empty:
        m = df["case"].map(lambda c: 1e18 if c == SUITE else _case_m(c))
        df = df.assign(_m=m).sort_values(["hardware", "protocol", "_m", "case"], kind="stable").drop(columns="_m")
        df.insert(df.columns.get_loc("below_record"), "standing", [standing(r) for r in df.to_dict("records")])
    return df.reset_index(drop=True)


def standing(row: dict) -> str:
    """A level against its record, in words: "below record since COMMIT" (slower beyond noise, since the first
    commit of the level that went below), "the record" (the record is this level's), "within noise of the
    record", or "no record yet"."""
    if row.get("record_us") is None or pd.isna(row.get("record_us")):
        return "no record yet"
    if row.get("below_record"):
        return f"below record since {str(row.get('below_since') or '?')[:12]}"
    if row.get("record_commit") is not None and row.get("record_commit") == row.get("since"):
        return "the record"
    return "within noise of the record"


def _case_m(case: str) -> float:
    try:
        parsed = Case.parse(case)
    except ValueError:
        return 1e17
    return parsed.m * 1e6 + parsed.batch_size


def gaps(db: Database, run_id: str | None = None) -> pd.DataFrame:
    """How far a run (default: the latest) is from the best known figures.

    One row per case, then '__suite__': median_us, the project's best on the same hardware label and protocol
    (best_us, best_run_id, best_commit) and ``gap`` = median_us / best_us - 1 (0 when this run is the best);
    score (mean SOL score for the suite), and for the suite the published #1 B200 record
    (record_implementation, record_latency_us, record_pct_sol) with ``score_gap`` = record_pct_sol / 100 -
    score (the SOL score compares across GPUs; latencies do not)."""
    with db.read() as conn:
        if run_id is None:
            row = conn.execute("SELECT run_id FROM runs ORDER BY started_at DESC, seq DESC LIMIT 1").fetchone()
            if row is None:
                return pd.DataFrame()
            run_id = row[0]
        info = _run_info(conn, run_id)
        if info is None:
            raise StorageError(f"{db.path}: no run {run_id!r}")
        return conn.execute(
            """
            WITH me AS (
                SELECT case_name, NULL::INTEGER AS n_cases, median_us, score, m FROM results WHERE run_id = $run
                UNION ALL
                SELECT '__suite__', n_cases, geomean_us, score, 1e18 FROM runs WHERE run_id = $run
            ),
            top AS (
                SELECT implementation, latency_us, pct_sol FROM records WHERE kind = 'published'
                ORDER BY latency_us LIMIT 1
            )
            SELECT $run AS run_id, $commit AS "commit", $hw AS hardware, $proto AS protocol,
                   me.case_name AS "case", me.median_us, b.latency_us AS best_us, b.run_id AS best_run_id,
                   b."commit" AS best_commit, me.median_us / b.latency_us - 1 AS gap, me.score,
                   CASE WHEN me.case_name = '__suite__' THEN top.implementation END AS record_implementation,
                   CASE WHEN me.case_name = '__suite__' THEN top.latency_us END AS record_latency_us,
                   CASE WHEN me.case_name = '__suite__' THEN top.pct_sol END AS record_pct_sol,
                   CASE WHEN me.case_name = '__suite__' THEN top.pct_sol / 100 - me.score END AS score_gap
            FROM me
            LEFT JOIN records b ON b.kind = 'project' AND b.hardware_label = $hw AND b.protocol = $proto
                 AND b.case_name = me.case_name AND b.n_cases IS NOT DISTINCT FROM me.n_cases
            CROSS JOIN top
            ORDER BY me.m, me.case_name
            """,
            {
                "run": run_id,
                "commit": info["commit"],
                "hw": info["hardware_label"],
                "proto": info["protocol"],
            },
        ).df()


def protocol_names(db: Database) -> dict[str, str]:
    """Protocol hash -> its name."""
    with db.read() as conn:
        return {h: n for h, n in conn.execute("SELECT hash, name FROM protocols").fetchall()}


def sample_spread(db: Database, run_ids: list[str]) -> pd.DataFrame:
    """Quartiles, min, max and count of the kernel's raw samples per run x case (each run's primary protocol)."""
    if not run_ids:
        return pd.DataFrame(columns=["run_id", "case", "q25_us", "q75_us", "min_us", "max_us", "n"])
    with db.read() as conn:
        return conn.execute(
            f"""SELECT run_id, case_name AS "case", q25_us, q75_us, min_us, max_us, n FROM ({_SPREAD})""",
            {"ids": list(run_ids)},
        ).df()


# Statements that read or write a folder of files whatever the connection allows (DuckDB expands them while it
# parses): refused before anything parses them.
_FOLDER_STATEMENTS = re.compile(r"\b(import_database|export_database)\b", re.IGNORECASE)
SQL_TIMEOUT_S = 30.0
SQL_MAX_ROWS = 10_000


def _one_line(exc: BaseException) -> str:
    """DuckDB's message without the query excerpt and caret lines it appends: a refusal is one line."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def run_sql(db: Database, query: str, *, timeout_s: float | None = None, max_rows: int | None = None) -> pd.DataFrame:
    """Run read-only SQL (SELECT, EXPLAIN, PRAGMA, CALL; several statements: the last one's result) on a
    read-only, locked-down connection (``storage.db.READ_ONLY_CONFIG``: no file but the history, no network,
    no extension, no setting changed), parsed on that connection too. Anything else (INSERT, UPDATE, CREATE,
    COPY, ATTACH, SET, import/export_database ...) is refused, and so is a SELECT that reaches outside the
    history (read_csv, read_text, glob, a URL). ``timeout_s``: the query is interrupted after that long;
    ``max_rows``: at most that many rows are fetched (``df.attrs["truncated"]`` says when there were more)."""
    if _FOLDER_STATEMENTS.search(query):
        raise StorageError("sql: refused: import_database / export_database read or write folders of files")
    # Parsed on a locked-down connection of its own (never DuckDB's default one, whose parse expands pragmas with
    # full access), before the history is opened: a write is refused even where there is no history.
    try:
        with duckdb.connect(":memory:", config=dict(READ_ONLY_CONFIG)) as parser:
            statements = parser.extract_statements(query)
    except duckdb.PermissionException as exc:
        raise StorageError(f"sql: refused: `solci sql` reads the history only: {_one_line(exc)}") from None
    except duckdb.Error as exc:
        raise StorageError(f"sql: cannot parse the query: {_one_line(exc)}") from None
    if not statements:
        raise StorageError("sql: empty query")
    for st in statements:
        kind = str(st.type).rsplit(".", 1)[-1].upper()
        if kind not in _READ_ONLY_STATEMENTS:
            raise StorageError(
                f"sql: {kind} statements are refused: `solci sql` is read-only ({db.path} is opened "
                "read_only); only SELECT / EXPLAIN / PRAGMA / CALL queries run. The history is written "
                "by `solci run` and the runner."
            )
    with db.read() as conn:
        timer = threading.Timer(timeout_s, conn.interrupt) if timeout_s else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            return _execute(conn, statements, max_rows)
        except duckdb.InterruptException:
            raise StorageError(f"sql: stopped after {timeout_s:g} s (the query's time limit, --timeout)") from None
        finally:
            if timer is not None:
                timer.cancel()


def _execute(conn: duckdb.DuckDBPyConnection, statements: list, max_rows: int | None) -> pd.DataFrame:
    result = None
    for st in statements:
        try:
            result = conn.execute(st.query)
        except duckdb.InterruptException:
            raise
        except duckdb.PermissionException as exc:
            raise StorageError(
                "sql: refused: `solci sql` reads the history only (no other file, no network, no extension): "
                + _one_line(exc)
            ) from None
        except duckdb.InvalidInputException as exc:
            if "read-only" in str(exc) or "configuration" in str(exc):
                why = _one_line(exc)
                raise StorageError(f"sql: refused, the database is opened read-only and locked: {why}") from None
            raise StorageError(f"sql: {_one_line(exc)}") from None
        except duckdb.Error as exc:
            raise StorageError(f"sql: {_one_line(exc)}") from None
    if result is None or result.description is None:
        return pd.DataFrame()
    if max_rows is None:
        return result.df()
    parts, n = [], 0
    while n <= max_rows:  # chunks (up to a vector each, fewer rows after a filter) until one row past the cap
        chunk = result.fetch_df_chunk(1)
        if chunk.empty:
            break
        parts.append(chunk)
        n += len(chunk)
    df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else (parts[0] if parts else result.df())
    truncated = n > max_rows
    df = df.head(max_rows)
    df.attrs["truncated"] = truncated
    return df


# ------------------------------------------------------------------------------------------------ judging
_SERIES_COLUMNS = """r.run_id, r."commit", r.purpose, r.job_id, r.started_at, r.seq, x.case_name AS "case",
                     x.median_us, x.eager_us, x.cublas_us, x.telemetry"""


def series_runs(
    db: Database,
    *,
    hardware: str,
    protocol: str,
    run_id: str,
    ancestry: list[str] | None,
    branch: str | None = None,
    max_runs: int = 2000,
    base: str | None = None,
) -> pd.DataFrame:
    """The figures judging reads for ``run_id``'s series: one row per run x case of every passing,
    unquarantined GPU run of the series (this hardware label and protocol) on ``ancestry`` (the run's commit
    and its first-parent ancestors, newest first), ``run_id`` itself excluded; rows ordered by the commit's
    place in the ancestry (oldest first), then by run. Without ``ancestry`` (no repository at hand): the runs of
    the same branch that started before ``run_id``, in time order. ``max_runs`` bounds what is read.

    Only main's runs count (``runs.base`` NULL), and, with ``base`` (a pull request's run, judged against its
    merge-base ``base``: ``ancestry`` is then the run's commit followed by the merge-base's line), the earlier
    runs of the same commit against the same merge-base too."""
    with db.read() as conn:
        info = _run_info(conn, run_id)
        if info is None:
            raise StorageError(f"{db.path}: no run {run_id!r}")
        passing = f"""r.hardware_label = $hw AND r.protocol = $proto AND {_passing("r")} AND r.mode = 'gpu'
                      AND r.run_id <> $run AND (r.base IS NULL OR (r.base = $base AND r."commit" = $own))"""
        params: dict = {
            "hw": hardware,
            "proto": protocol,
            "run": run_id,
            "lim": int(max_runs),
            "base": base,
            "own": info["commit"],
        }
        if ancestry:
            params["chain"] = list(ancestry)
            sql = f"""
                WITH chain AS (SELECT unnest($chain::VARCHAR[]) AS c, generate_subscripts($chain::VARCHAR[], 1) AS pos),
                sel AS (
                    SELECT r.run_id, chain.pos FROM runs r JOIN chain ON chain.c = r."commit"
                    WHERE {passing} ORDER BY chain.pos, r.started_at DESC LIMIT $lim
                )
                SELECT {_SERIES_COLUMNS}, sel.pos FROM sel JOIN runs r USING (run_id) JOIN results x USING (run_id)
                ORDER BY sel.pos DESC, r.started_at, r.seq, x.case_name"""
        else:
            params.update(
                t=info["started_at"], seq=info["seq"], branch=branch if branch is not None else info["branch"]
            )
            sql = f"""
                WITH sel AS (
                    SELECT r.run_id FROM runs r
                    WHERE {passing} AND r.branch IS NOT DISTINCT FROM $branch
                      AND (r.started_at < $t OR (r.started_at = $t AND r.seq < $seq))
                    ORDER BY r.started_at DESC, r.seq DESC LIMIT $lim
                )
                SELECT {_SERIES_COLUMNS}, NULL AS pos FROM sel JOIN runs r USING (run_id) JOIN results x USING (run_id)
                ORDER BY r.started_at, r.seq, x.case_name"""
        return conn.execute(sql, params).df()


def run_figures(db: Database, run_id: str) -> pd.DataFrame:
    """The per-case figures of one run that judging reads (same columns as ``series_runs``, status too)."""
    with db.read() as conn:
        return conn.execute(
            f"""SELECT {_SERIES_COLUMNS}, x.status FROM runs r JOIN results x USING (run_id)
                WHERE r.run_id = ? ORDER BY x.case_name""",
            [run_id],
        ).df()


def series_steps(
    db: Database,
    *,
    hardware: str,
    protocol: str,
    commits: list[str] | None = None,
    base: str | None = None,
    own: str | None = None,
) -> pd.DataFrame:
    """Steps of a series (optionally only those at ``commits``), oldest first, with their cases as a list of
    structs (case, change, lo, hi, before_us, after_us). Main's steps only (their run's ``base`` NULL), and with
    ``base`` the steps of ``own`` against that merge-base too (a pull request's run judged again)."""
    where = """s.hardware_label = $hw AND s.protocol = $proto
                AND (s.run_id IS NULL OR s.run_id NOT IN (SELECT run_id FROM runs WHERE base IS NOT NULL)
                     OR s.run_id IN (SELECT run_id FROM runs WHERE base = $base AND "commit" = $own))"""
    params: dict = {"hw": hardware, "proto": protocol, "base": base, "own": own}
    if commits is not None:
        where += ' AND list_contains($commits::VARCHAR[], s."commit")'
        params["commits"] = list(commits)
    with db.read() as conn:
        return conn.execute(
            f"""SELECT s.*, (SELECT list({{'case': c.case_name, 'change': c.change, 'lo': c.lo, 'hi': c.hi,
                                           'before_us': c.before_us, 'after_us': c.after_us}} ORDER BY c.case_name)
                             FROM step_cases c WHERE c.step_id = s.step_id) AS cases
                FROM steps s WHERE {where} ORDER BY s.created_at, s.step_id""",
            params,
        ).df()


def verdict(db: Database, run_id: str) -> dict | None:
    """The stored verdict of one run (a dict of the verdicts row), None when it was not judged."""
    with db.read() as conn:
        cur = conn.execute("SELECT * FROM verdicts WHERE run_id = ?", [run_id])
        row = cur.fetchone()
        return None if row is None else dict(zip([d[0] for d in cur.description], row, strict=True))


def verdict_cases(db: Database, run_id: str) -> pd.DataFrame:
    with db.read() as conn:
        return conn.execute(
            'SELECT case_name AS "case", * EXCLUDE (case_name) FROM verdict_cases WHERE run_id = ? ORDER BY case_name',
            [run_id],
        ).df()


def _step_listing(db: Database, where: list[str], params: dict, *, limit: int | None, by_run: bool) -> pd.DataFrame:
    """The stored steps matching ``where`` (SQL on ``s`` = steps, ``r`` = the culprit's run), the newest ``limit``
    by creation, one row each: step_id, commit, parent_commit, run_id, status, direction, detected_by,
    cases_moved, n_cases, suite_change/lo/hi, worst_case, worst_change (the case that moved most), fixed_by (step
    id) and fixed_by_commit, ack_reason, ack_at, message, branch, hardware, protocol, created_at, started_at (of
    the culprit's run), base (the merge-base a pull request's step was judged against; None on main's line).
    Newest first: by creation, or (``by_run``) by the culprit run's start."""
    lim = "" if limit is None else f"LIMIT {int(limit)}"
    order = "coalesce(sel.started_at, sel.created_at) DESC, " if by_run else ""
    with db.read() as conn:
        return conn.execute(
            f"""
            WITH sel AS (
                SELECT s.*, r.started_at, r.base FROM steps s LEFT JOIN runs r ON r.run_id = s.run_id
                {_where(where)} ORDER BY s.created_at DESC, s.step_id DESC {lim}
            ),
            worst AS (
                SELECT c.step_id, arg_max(c.case_name, abs(c.change)) AS worst_case,
                       arg_max(c.change, abs(c.change)) AS worst_change
                FROM step_cases c WHERE c.step_id IN (SELECT step_id FROM sel) GROUP BY c.step_id
            )
            SELECT sel.step_id, sel."commit", sel.parent_commit, sel.run_id, sel.status, sel.direction,
                   sel.detected_by, sel.cases_moved, sel.n_cases, sel.suite_change, sel.suite_lo, sel.suite_hi,
                   worst.worst_case, worst.worst_change, sel.fixed_by, f."commit" AS fixed_by_commit, sel.ack_reason,
                   sel.ack_at, sel.message, sel.branch, sel.hardware_label AS hardware, sel.protocol, sel.created_at,
                   sel.started_at, sel.base
            FROM sel LEFT JOIN worst ON worst.step_id = sel.step_id
            LEFT JOIN steps f ON f.step_id = sel.fixed_by
            ORDER BY {order}sel.created_at DESC, sel.step_id DESC
            """,
            params,
        ).df()


def changes(
    db: Database,
    *,
    hardware: str | None = None,
    status: str | None = None,
    commit: str | None = None,
    limit: int | None = None,
    pull_requests: bool = False,
) -> pd.DataFrame:
    """Every detected step of main's line, newest first (by creation), one row each with the columns of
    ``series_changes`` (a pull request's steps are its report's, never a change of main's level); with
    ``pull_requests`` the steps of pull requests' runs instead (each against its merge-base, ``base``).
    Filters: hardware label or GPU model, status, commit prefix."""
    where: list[str] = ["r.base IS NOT NULL" if pull_requests else "r.base IS NULL"]
    params: dict = {}
    if hardware is not None:
        where.append("(s.hardware_label = $hw OR r.gpu_model = $hw)")
        params["hw"] = hardware
    if status is not None:
        where.append("s.status = $status")
        params["status"] = status
    if commit is not None:
        where.append('starts_with(s."commit", $commit)')
        params["commit"] = commit
    return _step_listing(db, where, params, limit=limit, by_run=False)


def step_cases(db: Database, step_id: str) -> pd.DataFrame:
    with db.read() as conn:
        return conn.execute(
            'SELECT case_name AS "case", change, lo, hi, before_us, after_us FROM step_cases WHERE step_id = ? '
            "ORDER BY abs(change) DESC",
            [step_id],
        ).df()


def verdict_marks(db: Database, run_ids: list[str]) -> pd.DataFrame:
    """What to mark on charts for these runs, one row per run x case: the cases of the confirmed steps the
    runs opened (kind regression / improvement, their change), the suite row of those steps, and the failed
    cases (incorrect / error). Columns: run_id, commit, case, kind, magnitude, message, started_at, verdict."""
    cols = ["run_id", "commit", "case", "kind", "magnitude", "message", "started_at", "verdict"]
    if not run_ids:
        return pd.DataFrame(columns=cols)
    with db.read() as conn:
        return conn.execute(
            f"""
            WITH v AS (SELECT * FROM verdicts WHERE list_contains($ids::VARCHAR[], run_id))
            SELECT v.run_id, v."commit", c.case_name AS "case",
                   CASE WHEN c.change > 0 THEN 'regression' ELSE 'improvement' END AS kind, c.change AS magnitude,
                   v.message, r.started_at, v.verdict
            FROM v JOIN steps s ON s.step_id = v.step_id JOIN step_cases c ON c.step_id = s.step_id
                   JOIN runs r ON r.run_id = v.run_id
            WHERE s.status IN {_BOUNDARY}
            UNION ALL
            SELECT v.run_id, v."commit", '__suite__',
                   CASE WHEN s.suite_change > 0 THEN 'regression' ELSE 'improvement' END, s.suite_change,
                   v.message, r.started_at, v.verdict
            FROM v JOIN steps s ON s.step_id = v.step_id JOIN runs r ON r.run_id = v.run_id
            WHERE s.status IN {_BOUNDARY} AND s.suite_change IS NOT NULL
            UNION ALL
            SELECT v.run_id, v."commit", x.case_name,
                   CASE WHEN x.status = 'incorrect' THEN 'incorrect' ELSE 'error' END, NULL,
                   coalesce({_error_line("x.error")}, x.status), r.started_at, v.verdict
            FROM v JOIN results x ON x.run_id = v.run_id JOIN runs r ON r.run_id = v.run_id
            WHERE x.status <> 'pass'
            ORDER BY started_at DESC
            """,
            {"ids": list(run_ids)},
        ).df()


# --- dashboard and read commands
# What the dashboard and the read commands (``ci.cli.read``) read: aggregated in SQL, bounded by a window of
# the newest N runs of one selection (hardware label x protocol), never the whole history into Python.
# confirmation re-measurements and pull requests' runs (judged against a merge-base) are not main's series points
_MEASURED = "coalesce(r.purpose, 'measure') = 'measure' AND r.base IS NULL"


def _error_line(col: str) -> str:
    """SQL for the informative line of an error text: its first non-blank line, or, for a Python traceback, its
    last one (the exception); NULL for no error."""
    lines = f"list_filter(string_split(coalesce({col}, ''), chr(10)), lambda l: trim(l) <> '')"
    return f"""(CASE WHEN len({lines}) = 0 THEN NULL
                     WHEN starts_with(trim({lines}[1]), 'Traceback') THEN left(trim({lines}[-1]), 300)
                     ELSE left(trim({lines}[1]), 300) END)"""


def series_summary(db: Database) -> pd.DataFrame:
    """One row per series (hardware label x protocol) of the runs measured for their own sake: hardware,
    gpu_model, protocol, protocol_name, gpu (any run on a GPU), n_runs, n_pass (passing runs: every case passed,
    not quarantined), last_at, last_pass_at (of a passing run), branches (sorted list). GPU series first, the one
    with the newest passing run first."""
    with db.read() as conn:
        return conn.execute(
            f"""SELECT r.hardware_label AS hardware, max(r.gpu_model) AS gpu_model, r.protocol,
                       max(p.name) AS protocol_name, bool_or(r.mode = 'gpu') AS gpu, count(*) AS n_runs,
                       count(*) FILTER (WHERE {_passing("r")}) AS n_pass, max(r.started_at) AS last_at,
                       max(r.started_at) FILTER (WHERE {_passing("r")}) AS last_pass_at,
                       list_sort(list(DISTINCT r.branch) FILTER (WHERE r.branch IS NOT NULL)) AS branches
                FROM runs r LEFT JOIN protocols p ON p.hash = r.protocol
                WHERE {_MEASURED}
                GROUP BY r.hardware_label, r.protocol
                ORDER BY gpu DESC, last_pass_at DESC NULLS LAST, last_at DESC, hardware, r.protocol"""
        ).df()


def stored_values(db: Database) -> dict[str, list[str]]:
    """What the history holds, for messages about filters that matched nothing: hardware labels, GPU models,
    protocols (hash and name), case names (by M), branches; each sorted."""
    with db.read() as conn:
        row = conn.execute(
            """SELECT (SELECT list_sort(list(DISTINCT hardware_label)) FROM runs),
                      (SELECT list_sort(list(DISTINCT gpu_model)) FROM runs WHERE gpu_model IS NOT NULL),
                      (SELECT list_sort(list(DISTINCT protocol)) FROM runs),
                      (SELECT list_sort(list(DISTINCT name)) FROM protocols WHERE hash IN (SELECT protocol FROM runs)),
                      (SELECT list(case_name ORDER BY m, case_name)
                       FROM (SELECT case_name, min(m) AS m FROM results GROUP BY case_name)),
                      (SELECT list_sort(list(DISTINCT branch)) FROM runs WHERE branch IS NOT NULL)"""
        ).fetchone()
    keys = ("hardware", "gpu_model", "protocol", "protocol_name", "case", "branch")
    return {k: list(v or []) for k, v in zip(keys, row or [None] * len(keys), strict=True)}


def run_window(
    db: Database, *, hardware: str, protocol: str, branch: str | None = None, limit: int = 200
) -> pd.DataFrame:
    """The newest ``limit`` runs of one series (exactly this hardware label and protocol; optionally one branch),
    measured for their own sake, oldest first. Per run: the runs row's figures (hardware = the label), quarantine
    and ``passing`` (every case passed, not quarantined: the run's figures stand), its stored verdict (verdict,
    cases_moved, suite_change/lo/hi, worst_case, worst_change, drift, clock, step_id, message, baseline_commit,
    judged_at), its step's status (step_status) and acknowledgement (step_ack_reason), the suite's screened change
    and the in-run baselines' change (screen_change, control_change: what drift is judged on), and for a run with failed
    cases: n_failed, failed_case and failed_status (the first by M), error_line (its informative error line)
    and n_errors (how many distinct error lines)."""
    err = _error_line("x.error")
    with db.read() as conn:
        return conn.execute(
            f"""
            WITH sel AS (
                SELECT r.* FROM runs r
                WHERE r.hardware_label = $hw AND r.protocol = $proto AND {_MEASURED}
                  AND ($branch IS NULL OR r.branch = $branch)
                ORDER BY r.started_at DESC, r.seq DESC LIMIT $lim
            ),
            bad AS (
                SELECT x.run_id, count(*) AS n_failed, first(x.case_name ORDER BY x.m, x.case_name) AS failed_case,
                       first(x.status ORDER BY x.m, x.case_name) AS failed_status,
                       first({err} ORDER BY x.m, x.case_name) AS error_line, count(DISTINCT {err}) AS n_errors
                FROM results x WHERE x.status <> 'pass' AND x.run_id IN (SELECT run_id FROM sel)
                GROUP BY x.run_id
            )
            SELECT sel.run_id, sel.seq, sel."commit", sel.branch, sel.repo, sel.started_at, sel.finished_at,
                   sel.wall_s, sel.mode, sel.hardware_label AS hardware, sel.gpu_model, sel.hostname, sel.protocol,
                   sel.status, sel.n_cases, sel.n_pass, sel.geomean_us, sel.geomean_eager_us, sel.geomean_cublas_us,
                   sel.score, sel.ratio_vs_cublas, sel.ratio_vs_eager, sel.job_id, sel.quarantine,
                   {_passing("sel")} AS passing, v.verdict, v.cases_moved, v.suite_change, v.suite_lo, v.suite_hi,
                   v.worst_case, v.worst_change, v.drift, v.clock, v.step_id, v.message, v.baseline_commit,
                   v.judged_at, s.status AS step_status, s.ack_reason AS step_ack_reason, vc.change AS screen_change,
                   vc.control_change,
                   coalesce(bad.n_failed, 0) AS n_failed, bad.failed_case, bad.failed_status, bad.error_line,
                   coalesce(bad.n_errors, 0) AS n_errors
            FROM sel
            LEFT JOIN verdicts v ON v.run_id = sel.run_id
            LEFT JOIN steps s ON s.step_id = v.step_id
            LEFT JOIN verdict_cases vc ON vc.run_id = sel.run_id AND vc.case_name = '__suite__'
            LEFT JOIN bad ON bad.run_id = sel.run_id
            ORDER BY sel.started_at, sel.seq
            """,
            {"hw": hardware, "proto": protocol, "branch": branch, "lim": int(limit)},
        ).df()


def window_cases(db: Database, run_ids: list[str]) -> pd.DataFrame:
    """Per run x case of these runs, oldest first: run_id, commit, branch, started_at, hardware (label), the
    run's quarantine and ``passing`` (as run_window), case, m, status, median_us, eager_us, cublas_us, t_sol_us,
    score, and the spread of the kernel's raw samples under the run's primary protocol (q25_us, q75_us, min_us,
    max_us, n: sample_spread)."""
    cols = [
        "run_id",
        "commit",
        "branch",
        "started_at",
        "hardware",
        "quarantine",
        "passing",
        "case",
        "m",
        "status",
        "median_us",
        "eager_us",
        "cublas_us",
        "t_sol_us",
        "score",
        "q25_us",
        "q75_us",
        "min_us",
        "max_us",
        "n",
    ]
    if not run_ids:
        return pd.DataFrame(columns=cols)
    with db.read() as conn:
        return conn.execute(
            f"""
            WITH sp AS ({_SPREAD})
            SELECT r.run_id, r."commit", r.branch, r.started_at, r.hardware_label AS hardware, r.quarantine,
                   {_passing("r")} AS passing, x.case_name AS "case", x.m, x.status, x.median_us, x.eager_us,
                   x.cublas_us, x.t_sol_us, x.score, sp.q25_us, sp.q75_us, sp.min_us, sp.max_us, sp.n
            FROM runs r JOIN results x ON x.run_id = r.run_id
            LEFT JOIN sp ON sp.run_id = x.run_id AND sp.case_name = x.case_name
            WHERE r.run_id IN (SELECT unnest($ids::VARCHAR[]))
            ORDER BY r.started_at, r.seq, x.m, x.case_name
            """,
            {"ids": list(run_ids)},
        ).df()


def run_judgement(db: Database, run_id: str) -> pd.DataFrame:
    """Per case of one run (by M, then the suite row '__suite__' when judged): status, error_line (the
    informative line), error (full text), median_us, eager_us, cublas_us, t_sol_us, score, and what judging
    stored for it: change (against its level), threshold, z, p_value, q_value, moved, control_change (the in-run
    baselines), clock_change, confirmed, confirmed_change, confirmed_lo, confirmed_hi."""
    err = _error_line("x.error")
    with db.read() as conn:
        return conn.execute(
            f"""
            WITH cases AS (
                SELECT x.case_name, x.m, x.status, {err} AS error_line, x.error, x.median_us, x.eager_us,
                       x.cublas_us, x.t_sol_us, x.score
                FROM results x WHERE x.run_id = $run
                UNION ALL
                SELECT '__suite__', 1e18, r.status, NULL, NULL, r.geomean_us, r.geomean_eager_us, r.geomean_cublas_us,
                       NULL, r.score
                FROM runs r WHERE r.run_id = $run AND EXISTS (
                    SELECT 1 FROM verdict_cases c WHERE c.run_id = $run AND c.case_name = '__suite__')
            )
            SELECT cases.case_name AS "case", cases.status, cases.error_line, cases.error, cases.median_us,
                   cases.eager_us, cases.cublas_us, cases.t_sol_us, cases.score, c.change, c.threshold, c.z,
                   c.p_value, c.q_value, c.moved, c.control_change, c.clock_change, c.confirmed, c.confirmed_change,
                   c.confirmed_lo, c.confirmed_hi
            FROM cases LEFT JOIN verdict_cases c ON c.run_id = $run AND c.case_name = cases.case_name
            ORDER BY cases.m, cases.case_name
            """,
            {"run": run_id},
        ).df()


def series_changes(
    db: Database, *, hardware: str, protocol: str, branch: str | None = None, limit: int = 500
) -> pd.DataFrame:
    """Every stored step of one series (exactly this hardware label and protocol; optionally one branch), newest
    first (by the culprit run's start), one row each: step_id, commit, parent_commit, run_id, status, direction,
    detected_by, cases_moved, n_cases, suite_change/lo/hi, worst_case, worst_change, fixed_by (step id) and
    fixed_by_commit, ack_reason, ack_at, message, branch, hardware, protocol, created_at, started_at (of the
    culprit's run). Main's steps only (not a pull request's)."""
    where = [
        "s.hardware_label = $hw",
        "s.protocol = $proto",
        "($branch IS NULL OR s.branch = $branch)",
        "r.base IS NULL",
    ]
    params = {"hw": hardware, "proto": protocol, "branch": branch}
    return _step_listing(db, where, params, limit=limit, by_run=True)


def best_suite_score(db: Database, *, hardware: str, protocol: str, n_cases: int | None = None) -> dict | None:
    """The project's best suite SOL score on one series: the passing GPU run (every case passed, not
    quarantined, measured for its own sake) with the highest score, of ``n_cases`` cases (default: the most
    cases any such run has). A dict (run_id, commit, branch, started_at, score, geomean_us, n_cases), None when
    the series has no scored passing run."""
    with db.read() as conn:
        cur = conn.execute(
            f"""
            WITH ok AS (
                SELECT r.* FROM runs r
                WHERE r.hardware_label = $hw AND r.protocol = $proto AND {_MEASURED} AND r.mode = 'gpu'
                  AND {_passing("r")} AND r.score IS NOT NULL
            )
            SELECT run_id, "commit", branch, started_at, score, geomean_us, n_cases FROM ok
            WHERE n_cases = coalesce($n, (SELECT max(n_cases) FROM ok))
            ORDER BY score DESC, started_at LIMIT 1
            """,
            {"hw": hardware, "proto": protocol, "n": n_cases},
        )
        row = cur.fetchone()
        return None if row is None else dict(zip([d[0] for d in cur.description], row, strict=True))


def job_queue(db: Database, *, limit: int = 200) -> tuple[pd.DataFrame, dict[str, int]]:
    """(the newest ``limit`` jobs without their logs: id, status, outcome, commit, branch, trigger, attempts,
    enqueued_at, started_at, finished_at, gpu, worker, run_id, repo, log_chars; the number of jobs per status
    over the whole queue)."""
    with db.read() as conn:
        jobs = conn.execute(
            """SELECT id, status, outcome, "commit", branch, "trigger", attempts, enqueued_at, started_at,
                      finished_at, gpu, worker, run_id, repo, coalesce(length(log), 0) AS log_chars
               FROM jobs ORDER BY id DESC LIMIT ?""",
            [int(limit)],
        ).df()
        counts = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    return jobs, {k: int(v) for k, v in counts.items()}


def job_log(db: Database, job_id: int) -> str | None:
    """The log of one job ('' when it has none yet), None when there is no such job."""
    with db.read() as conn:
        row = conn.execute("SELECT coalesce(log, '') FROM jobs WHERE id = ?", [int(job_id)]).fetchone()
    return None if row is None else str(row[0])


def pull_request_runs(db: Database, *, hardware: str | None = None, limit: int | None = 50) -> pd.DataFrame:
    """Pull requests' runs (each judged against its merge-base, ``runs.base``; never points of main's series),
    newest first: run_id, commit, branch, base, hardware, gpu_model, protocol, started_at, and what judging
    stored (verdict, n_cases, cases_moved, suite_change/lo/hi, worst_case, worst_change, step_id, message).
    ``hardware``: a hardware label or GPU model."""
    where = ["coalesce(r.purpose, 'measure') = 'measure'", "r.base IS NOT NULL"]
    params: dict = {}
    if hardware is not None:
        where.append("(r.hardware_label = $hw OR r.gpu_model = $hw)")
        params["hw"] = hardware
    lim = "" if limit is None else f"LIMIT {int(limit)}"
    with db.read() as conn:
        return conn.execute(
            f"""SELECT r.run_id, r."commit", r.branch, r.base, r.hardware_label AS hardware, r.gpu_model, r.protocol,
                       r.started_at, v.verdict, v.n_cases, v.cases_moved, v.suite_change, v.suite_lo, v.suite_hi,
                       v.worst_case, v.worst_change, v.step_id, v.message
                FROM runs r LEFT JOIN verdicts v ON v.run_id = r.run_id
                {_where(where)} ORDER BY r.started_at DESC, r.seq DESC {lim}""",
            params,
        ).df()


# --- reports (``solci report``)
def commit_run(db: Database, commit: str, *, base: str | None = None) -> dict | None:
    """The run a report or the dashboard shows for ``commit`` (a full sha or a prefix): the newest run of it
    measured for its own sake, a GPU run before a CPU-interpreter one; a run of main's line before a pull
    request's (judged against a merge-base), and with ``base`` only a run judged against that merge-base. A dict
    (run_id, commit, hardware, protocol, branch, base, n_runs: how many such runs the commit has), None when the
    commit was never measured so; StorageError when the prefix names several commits."""
    which = "coalesce(r.purpose, 'measure') = 'measure' AND r.base IS NOT DISTINCT FROM coalesce($base, r.base)"
    with db.read() as conn:
        shas = [
            r[0]
            for r in conn.execute(
                f"""SELECT DISTINCT r."commit" FROM runs r WHERE starts_with(r."commit", $commit) AND {which}
                    ORDER BY 1 LIMIT 6""",
                {"commit": commit, "base": base},
            ).fetchall()
        ]
        if len(shas) > 1:
            raise StorageError(f"commit {commit!r} is ambiguous: it starts {', '.join(s[:12] for s in shas)}")
        if not shas:
            return None
        cur = conn.execute(
            f"""SELECT r.run_id, r."commit", r.hardware_label AS hardware, r.protocol, r.branch, r.base,
                       count(*) OVER (PARTITION BY r.base IS NULL) AS n_runs
                FROM runs r WHERE r."commit" = $commit AND {which}
                ORDER BY r.base IS NULL DESC, r.mode = 'gpu' DESC, r.started_at DESC, r.seq DESC LIMIT 1""",
            {"commit": shas[0], "base": base},
        )
        row = cur.fetchone()
        return None if row is None else dict(zip([d[0] for d in cur.description], row, strict=True))


def commit_report(db: Database, commit: str, *, base: str | None = None) -> dict | None:
    """What ``solci report`` says of one commit (a full sha or a prefix), as stored; None when it was never
    measured (with ``base``: never measured against that merge-base). A dict of plain values:

    - ``run``: its run (``commit_run``) with the runs row's figures and what judging stored (as ``run_window``:
      verdict, n_cases, cases_moved, suite_change/lo/hi, worst_case, worst_change, message, baseline_commit,
      level_commits, step_id, judged_at, n_failed, failed_case, failed_status, error_line, quarantine), n_runs,
      base (the merge-base a pull request's run was judged against; None on main's line);
    - ``step``: the step of its verdict, else a step stored later at this commit on the same series (a late one),
      as ``changes`` lists it (status, detected_by, ack_reason, ack_at, fixed_by_commit ...); None when none;
    - ``moved``: the cases that moved, largest change first (case, before_us, after_us, change, lo, hi): the
      step's cases, else the screened cases of the verdict (before_us: the level, after_us: the run's figure,
      lo/hi: the paired interval when confirmed);
    - ``level``: the series' current suite level against the project record (as ``levels``), None when none."""
    found = commit_run(db, commit, base=base)
    if found is None:
        return None
    err = _error_line("x.error")
    with db.read() as conn:
        cur = conn.execute(
            f"""
            WITH bad AS (
                SELECT count(*) AS n_failed, first(x.case_name ORDER BY x.m, x.case_name) AS failed_case,
                       first(x.status ORDER BY x.m, x.case_name) AS failed_status,
                       first({err} ORDER BY x.m, x.case_name) AS error_line
                FROM results x WHERE x.run_id = $run AND x.status <> 'pass'
            )
            SELECT r.run_id, r."commit", r.branch, r.repo, r.started_at, r.mode, r.hardware_label AS hardware,
                   r.gpu_model, r.protocol, p.name AS protocol_name, r.status, r.n_cases AS run_n_cases, r.n_pass,
                   r.geomean_us, r.score, r.quarantine, r.base, {_passing("r")} AS passing, v.verdict, v.n_cases,
                   v.cases_moved, v.suite_change, v.suite_lo, v.suite_hi, v.worst_case, v.worst_change, v.message,
                   v.baseline_commit, v.level_commits, v.step_id, v.judged_at, coalesce(bad.n_failed, 0) AS n_failed,
                   bad.failed_case, bad.failed_status, bad.error_line
            FROM runs r LEFT JOIN verdicts v ON v.run_id = r.run_id LEFT JOIN protocols p ON p.hash = r.protocol
            CROSS JOIN bad
            WHERE r.run_id = $run
            """,
            {"run": found["run_id"]},
        )
        run = dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))
    run["n_runs"] = int(found["n_runs"])
    where = [
        's."commit" = $commit',
        "s.hardware_label = $hw",
        "s.protocol = $proto",
        "r.base IS NOT DISTINCT FROM $base",
    ]
    params: dict = {"commit": run["commit"], "hw": run["hardware"], "proto": run["protocol"], "base": run["base"]}
    if run.get("step_id"):
        where, params = ["s.step_id = $sid"], {"sid": run["step_id"]}
    steps = _step_listing(db, where, params, limit=1, by_run=False)
    step = None if steps.empty else steps.iloc[0].to_dict()
    if step is not None:
        moved = step_cases(db, step["step_id"])[["case", "before_us", "after_us", "change", "lo", "hi"]]
    else:
        with db.read() as conn:
            moved = conn.execute(
                """SELECT c.case_name AS "case", x.median_us / (1 + c.change) AS before_us, x.median_us AS after_us,
                          c.change, c.confirmed_lo AS lo, c.confirmed_hi AS hi
                   FROM verdict_cases c JOIN results x ON x.run_id = c.run_id AND x.case_name = c.case_name
                   WHERE c.run_id = ? AND c.moved ORDER BY abs(c.change) DESC""",
                [run["run_id"]],
            ).df()
    lv = levels(db, hardware=run["hardware"], protocol=run["protocol"])
    suite = lv[lv["case"] == SUITE]
    return {
        "run": run,
        "step": step,
        "moved": moved.reset_index(drop=True),
        "level": None if suite.empty else suite.iloc[0].to_dict(),
    }
