"""Writes of judging: a run's verdict and per-case figures, the steps it opens or changes, the noise model it
used, and acknowledgements. Judging (``ci.verdict.apply``) decides; this module stores, each judgement in one
transaction. Reads are in ``storage.queries`` (``verdict``, ``changes``, ``series_runs`` ...)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from storage.db import Database, StorageError
from storage.ingest import insert_rows
from storage.schema import BOUNDARY_STATUSES

VERDICT_COLUMNS = (
    "run_id",
    "commit",
    "hardware_label",
    "protocol",
    "branch",
    "verdict",
    "n_cases",
    "cases_moved",
    "suite_change",
    "suite_lo",
    "suite_hi",
    "worst_case",
    "worst_change",
    "drift",
    "clock",
    "level_commits",
    "baseline_commit",
    "step_id",
    "message",
)
CASE_COLUMNS = (
    "case_name",
    "status",
    "change",
    "tested_change",
    "threshold",
    "z",
    "p_value",
    "q_value",
    "sigma",
    "moved",
    "control_change",
    "clock_change",
    "throttled",
    "confirmed",
    "confirmed_change",
    "confirmed_lo",
    "confirmed_hi",
)
STEP_COLUMNS = (
    "step_id",
    "hardware_label",
    "protocol",
    "branch",
    "commit",
    "parent_commit",
    "run_id",
    "status",
    "direction",
    "detected_by",
    "n_cases",
    "cases_moved",
    "suite_change",
    "suite_lo",
    "suite_hi",
    "fixed_by",
    "message",
)
STEP_CASE_COLUMNS = ("case_name", "change", "lo", "hi", "before_us", "after_us")
ACKABLE = ("open", "ambiguous")
# Commits below a commit (its descendants), through commits.parent (each commit's first parent).
_BELOW = """
    WITH RECURSIVE below(c, depth) AS (
        SELECT "commit", 1 FROM commits WHERE parent = $commit
        UNION ALL
        SELECT k."commit", b.depth + 1 FROM commits k JOIN below b ON k.parent = b.c WHERE b.depth < 1000
    )"""


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass
class Judgement:
    """What one judging of a run stores (plain values; ``ci.verdict.apply`` fills it)."""

    verdict: dict[str, Any]  # VERDICT_COLUMNS
    cases: list[dict[str, Any]] = field(default_factory=list)  # CASE_COLUMNS
    step: dict[str, Any] | None = None  # STEP_COLUMNS
    step_cases: list[dict[str, Any]] = field(default_factory=list)  # STEP_CASE_COLUMNS
    fixes: list[str] = field(default_factory=list)  # step ids that become fixed by ``step``
    noise: list[dict[str, Any]] = field(default_factory=list)  # case_name, sigma_screen, sigma_pair, ...
    ancestors: list[str] = field(default_factory=list)  # the step's commit's first-parent ancestors, newest first


def _row(d: Mapping[str, Any], cols: Sequence[str]) -> list[Any]:
    return [d.get(c) for c in cols]


def _write_step(
    conn: Any, step: Mapping[str, Any], cases: Sequence[Mapping[str, Any]], fixes: Sequence[str], now: datetime
) -> None:
    sid = step["step_id"]
    old = conn.execute("SELECT created_at FROM steps WHERE step_id = ?", [sid]).fetchone()
    conn.execute("DELETE FROM steps WHERE step_id = ?", [sid])
    conn.execute("DELETE FROM step_cases WHERE step_id = ?", [sid])
    columns = ", ".join(f'"{c}"' for c in STEP_COLUMNS)
    conn.execute(
        f"INSERT INTO steps ({columns}, created_at, updated_at) VALUES ({', '.join(['?'] * (len(STEP_COLUMNS) + 2))})",
        [*_row(step, STEP_COLUMNS), old[0] if old else now, now],
    )
    insert_rows(conn, "step_cases", [[sid, *_row(c, STEP_CASE_COLUMNS)] for c in cases])
    for fixed in fixes:
        conn.execute(
            "UPDATE steps SET status = 'fixed', fixed_by = ?, updated_at = ? WHERE step_id = ? AND status = 'open'",
            [sid, now, fixed],
        )


def _withdraw_below(conn: Any, step: Mapping[str, Any], ancestors: Sequence[str], now: datetime) -> None:
    """The same change wrongly blamed on a descendant goes when its culprit's step opens: a confirmed step of the
    series, the same way, at a commit below ``step``'s (through commits.parent) and confirmed against one of
    ``step``'s ancestors (so across it). Its status, when acknowledged or fixed, passes to ``step`` (an
    acknowledged change stays acknowledged); the steps it fixed are fixed by ``step``; the verdicts that named
    it pass, saying why; the step itself stays, ``withdrawn``."""
    sid, status = step["step_id"], step["status"]
    if status not in BOUNDARY_STATUSES or not ancestors:
        return
    rows = conn.execute(
        f"""{_BELOW}
        SELECT s.step_id, s."commit", s.status, s.fixed_by, s.ack_reason, s.ack_at FROM steps s
        WHERE s.hardware_label = $hw AND s.protocol = $proto AND s.direction = $dir AND s.step_id <> $sid
          AND s.status IN {BOUNDARY_STATUSES} AND list_contains($anc::VARCHAR[], s.parent_commit)
          AND s."commit" IN (SELECT c FROM below)
        ORDER BY s.created_at, s.step_id""",
        {
            "commit": step["commit"],
            "hw": step["hardware_label"],
            "proto": step["protocol"],
            "dir": step["direction"],
            "sid": sid,
            "anc": list(ancestors),
        },
    ).fetchall()
    for wrong, commit, wrong_status, fixed_by, ack_reason, ack_at in rows:
        if status == "open" and wrong_status in ("acknowledged", "fixed"):
            status = wrong_status
            conn.execute(
                "UPDATE steps SET status = ?, fixed_by = ?, ack_reason = ?, ack_at = ?, updated_at = ? "
                "WHERE step_id = ?",
                [wrong_status, fixed_by, ack_reason, ack_at, now, sid],
            )
        conn.execute("UPDATE steps SET fixed_by = ?, updated_at = ? WHERE fixed_by = ?", [sid, now, wrong])
        why = f"withdrawn: the change is {step['commit'][:12]}'s (its step {sid}, judged later), not {commit[:12]}'s; "
        conn.execute(
            "UPDATE verdicts SET verdict = 'pass', step_id = NULL, message = ? || message WHERE step_id = ?",
            [why, wrong],
        )
        conn.execute(  # kept, as what was said then: no longer a boundary, so no level starts there
            "UPDATE steps SET status = 'withdrawn', ack_reason = ?, updated_at = ? WHERE step_id = ?",
            [f"withdrawn: the change is {step['commit'][:12]}'s (step {sid})", now, wrong],
        )


def record_judgement(db: Database, j: Judgement) -> None:
    """Store a judgement: replaces the run's earlier verdict and step (a job retried after its runner died is
    judged again: what its first judging left, a pending step say, goes; the steps that one fixed are open
    again until this judgement says otherwise); marks the fixed steps; withdraws the same change's step wrongly
    blamed on a descendant (``j.ancestors``: below the step's commit, across it); refreshes the series' noise
    rows. Late steps stored on the run (found at its commit later) stay, and so does a step the verdict joins
    (a re-run of its culprit)."""
    now = _now()
    run_id = j.verdict["run_id"]
    keep = j.step["step_id"] if j.step is not None else (j.verdict.get("step_id") or "")
    with db.transaction() as conn:
        conn.execute("DELETE FROM verdicts WHERE run_id = ?", [run_id])
        conn.execute("DELETE FROM verdict_cases WHERE run_id = ?", [run_id])
        stale = [
            r[0]
            for r in conn.execute(
                "SELECT step_id FROM steps WHERE run_id = ? AND detected_by <> 'late' AND step_id <> ?", [run_id, keep]
            ).fetchall()
        ]
        if stale:
            conn.execute(
                "UPDATE steps SET status = 'open', fixed_by = NULL, updated_at = ? "
                "WHERE list_contains(?::VARCHAR[], fixed_by)",
                [now, stale],
            )
            conn.execute("DELETE FROM step_cases WHERE list_contains(?::VARCHAR[], step_id)", [stale])
            conn.execute("DELETE FROM steps WHERE list_contains(?::VARCHAR[], step_id)", [stale])
        insert_rows(conn, "verdicts", [[*_row(j.verdict, VERDICT_COLUMNS), now]])
        insert_rows(conn, "verdict_cases", [[run_id, *_row(c, CASE_COLUMNS)] for c in j.cases])
        if j.step is not None:
            _write_step(conn, j.step, j.step_cases, j.fixes, now)
            _withdraw_below(conn, j.step, j.ancestors, now)
        if j.noise:
            hw, proto = j.verdict["hardware_label"], j.verdict["protocol"]
            conn.execute("DELETE FROM noise WHERE hardware_label = ? AND protocol = ?", [hw, proto])
            insert_rows(
                conn,
                "noise",
                [
                    [
                        hw,
                        proto,
                        n["case_name"],
                        n.get("sigma_screen"),
                        n.get("sigma_pair"),
                        n.get("sigma_adjusted"),
                        n.get("n_screen"),
                        n.get("n_pair"),
                        now,
                    ]
                    for n in j.noise
                ],
            )


def record_step(
    db: Database, step: Mapping[str, Any], cases: Sequence[Mapping[str, Any]], fixes: Sequence[str] = ()
) -> None:
    """Store a step found apart from a run's own verdict (a late step at an earlier commit)."""
    with db.transaction() as conn:
        _write_step(conn, step, cases, fixes, _now())


def acknowledge(
    db: Database, commit: str | None, reason: str, *, hardware: str | None = None, step_id: str | None = None
) -> list[dict[str, Any]]:
    """Accept the open (or ambiguous) steps at ``commit`` (a full sha or a prefix), or the one step ``step_id``
    (as ``solci report`` and ``solci flags`` name it), as intended: their status becomes acknowledged, with the
    reason. Returns the steps changed; StorageError when there are none."""
    if not reason or not reason.strip():
        raise StorageError("ack: a --reason is required (why the change is intended)")
    if (commit is None) == (step_id is None):
        raise StorageError("ack: name a commit or a step id (step:ID or --step ID), one of the two")
    if step_id is not None:
        where, what_of = "step_id = ? AND status IN (?, ?)", f"step {step_id!r}"
        params: list[Any] = [step_id, *ACKABLE]
        known_sql, known_param = "SELECT DISTINCT status FROM steps WHERE step_id = ?", step_id
    else:
        where, what_of = 'starts_with("commit", ?) AND status IN (?, ?)', f"commit {commit!r}"
        params = [commit, *ACKABLE]
        known_sql, known_param = 'SELECT DISTINCT status FROM steps WHERE starts_with("commit", ?)', commit
    if hardware is not None:
        where += " AND hardware_label = ?"
        params.append(hardware)
    with db.transaction() as conn:
        rows = conn.execute(
            f'SELECT step_id, "commit", status, hardware_label, protocol FROM steps WHERE {where}', params
        ).fetchall()
        if not rows:
            known = conn.execute(known_sql, [known_param]).fetchall()
            what = f"its steps are {', '.join(sorted(r[0] for r in known))}" if known else "no step names it"
            if step_id is not None:
                what = f"it is {known[0][0]}" if known else "no such step"
            raise StorageError(f"ack: no open step at {what_of} in {db.path} ({what})")
        now = _now()
        conn.execute(
            f"UPDATE steps SET status = 'acknowledged', ack_reason = ?, ack_at = ?, updated_at = ? WHERE {where}",
            [reason.strip(), now, now, *params],
        )
    return [
        {"step_id": r[0], "commit": r[1], "previous_status": r[2], "hardware": r[3], "protocol": r[4]} for r in rows
    ]
