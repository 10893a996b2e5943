"""Best-known records: the published B200 leaderboard (seeded by the migration) and the project's own bests.

The project's best is kept per (hardware label, primary protocol, case), and for the suite (geometric mean
over a run's cases, ``case_name = '__suite__'``, keyed also by the number of cases so a 3-case smoke run never
competes with the 16-case suite). Only passing runs (every case correct) are considered; ingest calls
``update_project_records`` inside its transaction. Beating an existing best writes a ``record_events`` row
("record broken"), which ``ci.regression`` turns into a ``new_record`` flag. The first run on a hardware and
protocol sets the bests without an event (nothing was broken).
"""

from __future__ import annotations

from datetime import datetime

import duckdb

from problem.workload import geomean
from storage.schema import SUITE

PROJECT_SOURCE = "solci (this project's passing runs)"


def _candidates(doc: dict) -> list[tuple[str, int | None, float, float | None]]:
    """(case name, n_cases for the suite row else None, latency us, pct_sol) for a passing run."""
    out: list[tuple[str, int | None, float, float | None]] = []
    for c in doc["cases"]:
        if c.get("median_us") is not None and c["median_us"] > 0:
            score = c.get("score")
            out.append((c["case"], None, float(c["median_us"]), None if score is None else 100.0 * score))
    suite = doc["suite"]
    geo = suite.get("geomean_us")
    if geo is None:
        geo = geomean([c.get("median_us") for c in doc["cases"]])
    if geo is not None and len(out) == len(doc["cases"]):
        score = suite.get("score")
        out.append((SUITE, len(doc["cases"]), float(geo), None if score is None else 100.0 * score))
    return out


def update_project_records(
    conn: duckdb.DuckDBPyConnection, doc: dict, observed_at: datetime | None, now: datetime
) -> list[dict]:
    """Update the project's bests with a passing run; return the "record broken" events written."""
    hw = doc["hardware"]
    label, model, protocol = hw["label"], hw.get("gpu_model"), doc["protocol"]
    current = {
        (row[0], row[1]): row[2:]
        for row in conn.execute(
            """SELECT case_name, n_cases, latency_us, run_id, "commit" FROM records
               WHERE kind = 'project' AND hardware_label = ? AND protocol = ?""",
            [label, protocol],
        ).fetchall()
    }
    events: list[dict] = []
    for case, n_cases, latency, pct in _candidates(doc):
        prev = current.get((case, n_cases))
        if prev is not None and latency >= prev[0]:
            continue
        if prev is not None:
            conn.execute(
                """DELETE FROM records WHERE kind = 'project' AND hardware_label = ? AND protocol = ?
                   AND case_name = ? AND n_cases IS NOT DISTINCT FROM ?""",
                [label, protocol, case, n_cases],
            )
            event = {
                "run_id": doc["run_id"],
                "commit": doc.get("commit"),
                "hardware_label": label,
                "gpu_model": model,
                "protocol": protocol,
                "case": case,
                "n_cases": n_cases,
                "previous_us": prev[0],
                "previous_run_id": prev[1],
                "previous_commit": prev[2],
                "new_us": latency,
            }
            conn.execute(
                """INSERT INTO record_events (run_id, "commit", hardware_label, gpu_model, protocol,
                       case_name, n_cases, previous_us, previous_run_id, previous_commit, new_us, broken_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [*event.values(), now],
            )
            events.append(event)
        conn.execute(
            """INSERT INTO records (kind, gpu_model, hardware_label, protocol, case_name, n_cases, rank,
                   implementation, latency_us, pct_sol, source, observed_at, run_id, "commit", updated_at)
               VALUES ('project', ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                model,
                label,
                protocol,
                case,
                n_cases,
                f"solci@{doc.get('commit') or doc['run_id'][:12]}",
                latency,
                pct,
                PROJECT_SOURCE,
                observed_at,
                doc["run_id"],
                doc.get("commit"),
                now,
            ],
        )
    return events
