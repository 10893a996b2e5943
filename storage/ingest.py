"""Store one result document (ci/result.py, schema v1): idempotent by run_id, atomic (one transaction)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import duckdb

from ci.result import validate
from kernel.workload import geomean
from storage.db import Database
from storage.records import update_project_records


def parse_time(text: str | None) -> datetime | None:
    """ISO-8601 (with or without offset, 'Z' allowed) -> naive UTC datetime; None stays None."""
    if text is None:
        return None
    t = datetime.fromisoformat(text)
    if t.tzinfo is not None:
        t = t.astimezone(UTC).replace(tzinfo=None)
    return t


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def insert_rows(conn: duckdb.DuckDBPyConnection, table: str, rows: list[list], suffix: str = "") -> None:
    """All rows in one INSERT statement (much faster than executemany for a few dozen rows)."""
    if not rows:
        return
    one = "(" + ", ".join(["?"] * len(rows[0])) + ")"
    conn.execute(
        f"INSERT INTO {table} VALUES " + ", ".join([one] * len(rows)) + f" {suffix}",
        [v for row in rows for v in row],
    )


def is_passing(doc: dict) -> bool:
    """A run every case of which passed (only such runs can set records or serve as baselines)."""
    cases = doc["cases"]
    return bool(cases) and doc["suite"]["status"] == "pass" and all(c["status"] == "pass" for c in cases)


RUN_PURPOSES = ("measure", "confirm")


def ingest_result(
    db: Database, doc: dict, *, job_id: int | None = None, purpose: str = "measure", parent: str | None = None
) -> bool:
    """Store a run whole or not at all; False when its run_id is already stored (nothing is added).

    Also updates the project's best-known records (passing GPU runs measured for their own sake only) and
    logs "record broken" events, links the run to ``job_id`` when given (a ``measure`` run becomes the job's
    run; ``confirm`` runs are the re-measurements of a confirmation), and records the commit's first parent.
    """
    if purpose not in RUN_PURPOSES:
        raise ValueError(f"ingest: purpose must be one of {RUN_PURPOSES}, got {purpose!r}")
    validate(doc)
    with db.transaction() as conn:
        if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", [doc["run_id"]]).fetchone():
            return False
        now = datetime.now(UTC).replace(tzinfo=None)
        _insert_dimensions(conn, doc, now, parent)
        _insert_run(conn, doc, now, job_id, purpose)
        _insert_results(conn, doc)
        _insert_samples(conn, doc)
        if is_passing(doc) and doc["mode"] == "gpu" and purpose == "measure":
            update_project_records(conn, doc, parse_time(doc["started_at"]), now)
        if job_id is not None and purpose == "measure":
            conn.execute("UPDATE jobs SET run_id = ? WHERE id = ?", [doc["run_id"], job_id])
    return True


def _insert_dimensions(conn: duckdb.DuckDBPyConnection, doc: dict, now: datetime, parent: str | None) -> None:
    """Commit, hardware and protocol rows, when new (a SELECT first: cheaper than INSERT ... ON CONFLICT)."""
    hw = doc["hardware"]
    commit = doc.get("commit")
    hashes = [p["hash"] for p in doc["protocols"]]
    has_commit, has_hw, known = conn.execute(
        """SELECT (SELECT count(*) FROM commits WHERE "commit" = $c) > 0,
                  (SELECT count(*) FROM hardware WHERE fingerprint = $f) > 0,
                  (SELECT coalesce(list(hash), []) FROM protocols WHERE list_contains($h, hash))""",
        {"c": commit or "", "f": hw["fingerprint"], "h": hashes},
    ).fetchone()
    if commit and not has_commit:
        conn.execute(
            'INSERT INTO commits ("commit", repo, branch, first_seen, parent) VALUES (?, ?, ?, ?, ?)',
            [commit, doc.get("repo"), doc.get("branch"), parse_time(doc["started_at"]) or now, parent],
        )
    elif commit and parent:
        conn.execute('UPDATE commits SET parent = ? WHERE "commit" = ? AND parent IS NULL', [parent, commit])
    if not has_hw:
        insert_rows(
            conn,
            "hardware",
            [[
                hw["fingerprint"], hw["label"], hw.get("gpu_model"), hw.get("gpu_name"), hw.get("sm_count"),
                hw.get("memory_bytes"), hw.get("driver"), hw.get("cuda"), hw.get("torch"), hw.get("triton"),
                hw.get("python"), hw.get("cpu"), now,
            ]],
        )  # fmt: skip
    new_protocols = {p["hash"]: p for p in doc["protocols"] if p["hash"] not in set(known)}
    insert_rows(
        conn,
        "protocols",
        [
            [
                p["hash"], p["name"], p.get("timer"), p.get("warmup"), p.get("iters"), p.get("l2_flush"),
                p.get("flush_bytes"), p.get("rotate_inputs"), p.get("statistic"), _json(p), now,
            ]
            for p in new_protocols.values()
        ],
    )  # fmt: skip


def _insert_run(conn: duckdb.DuckDBPyConnection, doc: dict, now: datetime, job_id: int | None, purpose: str) -> None:
    hw, suite = doc["hardware"], doc["suite"]
    geo = suite.get("geomean_us")
    if geo is None and is_passing(doc):
        geo = geomean([c["median_us"] for c in doc["cases"]])
    conn.execute(
        """INSERT INTO runs (run_id, "commit", branch, repo, started_at, finished_at, wall_s, mode,
               hardware_fingerprint, hardware_label, gpu_model, hostname, protocol, status, n_cases, n_pass,
               geomean_us, geomean_eager_us, geomean_cublas_us, score, ratio_vs_cublas, ratio_vs_eager,
               job_id, ingested_at, purpose, harness)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            doc["run_id"], doc.get("commit"), doc.get("branch"), doc.get("repo"),
            parse_time(doc["started_at"]), parse_time(doc.get("finished_at")), doc.get("wall_s"), doc["mode"],
            hw["fingerprint"], hw["label"], hw.get("gpu_model"), hw.get("hostname"), doc["protocol"],
            suite["status"], suite["n_cases"], suite["n_pass"], geo, suite.get("geomean_eager_us"),
            suite.get("geomean_cublas_us"), suite.get("score"), suite.get("ratio_vs_cublas"),
            suite.get("ratio_vs_eager"), job_id, now, purpose, doc.get("harness"),
        ],
    )  # fmt: skip


def _insert_results(conn: duckdb.DuckDBPyConnection, doc: dict) -> None:
    rows = [
        [
            doc["run_id"], c["case"], c["batch_size"], c["seq_len"], c["m"], c["status"], c.get("error"),
            c.get("median_us"), c.get("eager_us"), c.get("cublas_us"), c.get("t_sol_us"), c.get("score"),
            _json(c.get("config")), _json(c.get("correctness")), _json(c.get("telemetry")), c.get("wall_s"),
        ]
        for c in doc["cases"]
    ]  # fmt: skip
    insert_rows(conn, "results", rows)


def _insert_samples(conn: duckdb.DuckDBPyConnection, doc: dict) -> None:
    rows = [
        [
            doc["run_id"], c["case"], t["impl"], t["protocol"], len(t["samples_us"]), t.get("median_us"),
            t.get("mean_us"), t.get("min_us"), t.get("max_us"), t.get("iqr_us"), t.get("stdev_us"),
            [float(x) for x in t["samples_us"]],
        ]
        for c in doc["cases"]
        for t in c["timings"]
    ]  # fmt: skip
    insert_rows(conn, "samples", rows)
