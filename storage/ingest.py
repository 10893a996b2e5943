"""Store one result document (storage/result.py, schema v1): idempotent by run_id, atomic (one transaction)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import duckdb

from problem.workload import geomean, t_sol_us
from storage.db import Database
from storage.result import RejectedResult, validate


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
    """A run every case of which passed (only such runs can serve as baselines, or count in a record's level)."""
    cases = doc["cases"]
    return bool(cases) and doc["suite"]["status"] == "pass" and all(c["status"] == "pass" for c in cases)


RUN_PURPOSES = ("measure", "confirm")
# A case faster than this share of its hardware's speed of light is impossible: its run is quarantined.
QUARANTINE_FRACTION = 0.9


def quarantine_reason(doc: dict) -> str | None:
    """Why a GPU run's figures are impossible (a case below QUARANTINE_FRACTION x T_SOL of its GPU model,
    computed here from problem.workload, not taken from the document), or None."""
    model = doc["hardware"].get("gpu_model")
    if doc["mode"] != "gpu" or model is None:
        return None
    low = []
    for c in doc["cases"]:
        t_sol = t_sol_us(c["m"], model)
        if c["status"] == "pass" and t_sol and c["median_us"] < QUARANTINE_FRACTION * t_sol:
            low.append(f"{c['case']} {c['median_us']:.3g} us < {QUARANTINE_FRACTION:g} x T_SOL {t_sol:.3g} us")
    if not low:
        return None
    return (
        f"faster than the {model}'s speed of light allows: "
        + "; ".join(low[:4])
        + (f" (+{len(low) - 4} more)" if len(low) > 4 else "")
    )


def ingest_result(
    db: Database,
    doc: dict,
    *,
    job_id: int | None = None,
    purpose: str = "measure",
    parent: str | None = None,
    expect_gpu_model: str | None = None,
    expect_commit: str | None = None,
    base: str | None = None,
) -> bool:
    """Store a run whole or not at all; False when its run_id is already stored (nothing is added).

    The document is believed only after ``storage.result.validate`` (SchemaError / RejectedResult otherwise:
    store it with ``reject``); with ``expect_gpu_model`` (the runner's own GPU) it must say it ran there, with
    ``expect_commit`` (the commit the runner measured) that it is that commit's. A run_id already stored is
    believed a re-delivery only when that run is of the same commit and, with ``job_id``, of no other job. A
    document measured in the kernel's own process (``measured_by`` "direct") is refused. A run
    faster than its hardware's speed of light is stored quarantined (``runs.quarantine``): never a record,
    never a baseline. Links the run to ``job_id`` (a ``measure`` run becomes the job's run; ``confirm`` runs are
    the re-measurements of a confirmation) and records the commit's first parent. ``base``: the merge-base a
    pull request's run is judged against (``runs.base``; None for main's line). A run sets no record: records
    are made by judging, from confirmed levels (``storage.records``).
    """
    if purpose not in RUN_PURPOSES:
        raise ValueError(f"ingest: purpose must be one of {RUN_PURPOSES}, got {purpose!r}")
    validate(doc)
    if doc.get("measured_by") == "direct":
        raise RejectedResult(
            "result.measured_by: 'direct' (the kernel was called in the measuring process, solci measure "
            "--direct): a developer's own figures, never stored as a CI result"
        )
    if expect_gpu_model is not None and doc["hardware"].get("gpu_model") != expect_gpu_model:
        raise RejectedResult(
            f"result.hardware.gpu_model: {doc['hardware'].get('gpu_model')!r}, but this runner measures on "
            f"{expect_gpu_model!r}"
        )
    if expect_commit is not None and doc["commit"] != expect_commit:
        raise RejectedResult(f"result.commit: {doc['commit']!r}, but this runner measured {expect_commit!r}")
    quarantine = quarantine_reason(doc)
    with db.transaction() as conn:
        stored = conn.execute('SELECT "commit", job_id FROM runs WHERE run_id = ?', [doc["run_id"]]).fetchone()
        if stored is not None:
            if stored[0] != doc["commit"] or (job_id is not None and stored[1] not in (None, job_id)):
                raise RejectedResult(
                    f"result.run_id: {doc['run_id']!r} is already stored, for commit {stored[0]} (job "
                    f"{stored[1]}); this document says commit {doc['commit']} (job {job_id})"
                )
            return False
        now = datetime.now(UTC).replace(tzinfo=None)
        _insert_dimensions(conn, doc, now, parent)
        _insert_run(conn, doc, now, job_id, purpose, quarantine, base)
        _insert_results(conn, doc)
        _insert_samples(conn, doc)
        if job_id is not None and purpose == "measure":
            conn.execute("UPDATE jobs SET run_id = ? WHERE id = ?", [doc["run_id"], job_id])
    return True


def reject(db: Database, doc: Any, reason: str, *, job_id: int | None = None, size_bytes: int | None = None) -> None:
    """Store a document that failed validation as a rejected run: who sent it and why, never its figures."""

    def field(key: str) -> str | None:
        v = doc.get(key) if isinstance(doc, dict) else None
        return v[:200] if isinstance(v, str) else None

    excerpt = json.dumps(doc, default=str)[:2000] if doc is not None else None
    with db.transaction() as conn:
        conn.execute(
            """INSERT INTO rejected_runs (run_id, job_id, "commit", repo, branch, reason, size_bytes, excerpt,
                   received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                field("run_id"),
                job_id,
                field("commit"),
                field("repo"),
                field("branch"),
                reason[:4000],
                size_bytes,
                excerpt,
                datetime.now(UTC).replace(tzinfo=None),
            ],
        )


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
            [
                [
                    hw["fingerprint"],
                    hw["label"],
                    hw.get("gpu_model"),
                    hw.get("gpu_name"),
                    hw.get("sm_count"),
                    hw.get("memory_bytes"),
                    hw.get("driver"),
                    hw.get("cuda"),
                    hw.get("torch"),
                    hw.get("triton"),
                    hw.get("python"),
                    hw.get("cpu"),
                    now,
                ]
            ],
        )
    new_protocols = {p["hash"]: p for p in doc["protocols"] if p["hash"] not in set(known)}
    insert_rows(
        conn,
        "protocols",
        [
            [
                p["hash"],
                p["name"],
                p.get("timer"),
                p.get("warmup"),
                p.get("iters"),
                p.get("l2_flush"),
                p.get("flush_bytes"),
                p.get("rotate_inputs"),
                p.get("statistic"),
                _json(p),
                now,
            ]
            for p in new_protocols.values()
        ],
    )


def _insert_run(
    conn: duckdb.DuckDBPyConnection,
    doc: dict,
    now: datetime,
    job_id: int | None,
    purpose: str,
    quarantine: str | None,
    base: str | None = None,
) -> None:
    hw, suite = doc["hardware"], doc["suite"]
    geo = suite.get("geomean_us")
    if geo is None and is_passing(doc):
        geo = geomean([c["median_us"] for c in doc["cases"]])
    # ``base`` only for a pull request's run: main's runs leave it NULL (and a history older than version 5,
    # as the upgrade tests write one, has no such column)
    extra = ", base" if base is not None else ""
    conn.execute(
        f"""INSERT INTO runs (run_id, "commit", branch, repo, started_at, finished_at, wall_s, mode,
               hardware_fingerprint, hardware_label, gpu_model, hostname, protocol, status, n_cases, n_pass,
               geomean_us, geomean_eager_us, geomean_cublas_us, score, ratio_vs_cublas, ratio_vs_eager,
               job_id, ingested_at, purpose, harness, quarantine{extra})
           VALUES ({", ".join(["?"] * (27 + bool(extra)))})""",
        [
            doc["run_id"],
            doc.get("commit"),
            doc.get("branch"),
            doc.get("repo"),
            parse_time(doc["started_at"]),
            parse_time(doc.get("finished_at")),
            doc.get("wall_s"),
            doc["mode"],
            hw["fingerprint"],
            hw["label"],
            hw.get("gpu_model"),
            hw.get("hostname"),
            doc["protocol"],
            suite["status"],
            suite["n_cases"],
            suite["n_pass"],
            geo,
            suite.get("geomean_eager_us"),
            suite.get("geomean_cublas_us"),
            suite.get("score"),
            suite.get("ratio_vs_cublas"),
            suite.get("ratio_vs_eager"),
            job_id,
            now,
            purpose,
            doc.get("harness"),
            quarantine,
            *([base] if extra else []),
        ],
    )


def _insert_results(conn: duckdb.DuckDBPyConnection, doc: dict) -> None:
    rows = [
        [
            doc["run_id"],
            c["case"],
            c["batch_size"],
            c["seq_len"],
            c["m"],
            c["status"],
            c.get("error"),
            c.get("median_us"),
            c.get("eager_us"),
            c.get("cublas_us"),
            c.get("t_sol_us"),
            c.get("score"),
            _json(c.get("config")),
            _json(c.get("correctness")),
            _json(c.get("telemetry")),
            c.get("wall_s"),
        ]
        for c in doc["cases"]
    ]
    insert_rows(conn, "results", rows)


def _insert_samples(conn: duckdb.DuckDBPyConnection, doc: dict) -> None:
    rows = [
        [
            doc["run_id"],
            c["case"],
            t["impl"],
            t["protocol"],
            len(t["samples_us"]),
            t.get("median_us"),
            t.get("mean_us"),
            t.get("min_us"),
            t.get("max_us"),
            t.get("iqr_us"),
            t.get("stdev_us"),
            [float(x) for x in t["samples_us"]],
        ]
        for c in doc["cases"]
        for t in c["timings"]
    ]
    insert_rows(conn, "samples", rows)
