"""The job queue, kept in the history database: queued -> running -> done | failed.

Every state change is one transaction under DuckDB's file lock (one writer process at a time; a writer that
finds the file locked retries until ``Database.lock_timeout``), so two runner processes racing for
``claim_next`` never get the same job. A runner that died mid-job leaves its job ``running``;
``recover_stale`` puts it back to ``queued``. It is never lost, and never counted twice: its run, if stored,
was stored under its run_id, and ingest is idempotent by run_id.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime

from storage.db import Database, StorageError

JOB_STATUSES = ("queued", "running", "done", "failed")
OUTCOMES = ("passed", "incorrect", "regressed", "build_failed", "crashed", "timed_out", "error")
_ACTIVE = ("queued", "running", "done")  # a (repo, commit) in one of these is not queued again


@dataclass
class Job:
    id: int
    repo: str
    commit: str
    branch: str | None
    trigger: str
    status: str
    attempts: int
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str | None
    run_id: str | None
    worker: str | None
    gpu: str | None
    log: str | None


_COLUMNS = ", ".join(f'"{f.name}"' for f in fields(Job))


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _job(row: tuple) -> Job:
    return Job(*row)


def enqueue(
    db: Database,
    repo: str,
    commit: str,
    *,
    branch: str | None = None,
    trigger: str = "manual",
    force: bool = False,
) -> tuple[int, bool]:
    """Queue (repo, commit); returns (job id, created). An existing queued/running/done job for the same
    (repo, commit) is returned instead (created False) unless ``force``; a failed one is queued again."""
    with db.transaction() as conn:
        if not force:
            row = conn.execute(
                f"""SELECT id FROM jobs WHERE repo = ? AND "commit" = ? AND status IN {_ACTIVE}
                    ORDER BY id DESC LIMIT 1""",
                [repo, commit],
            ).fetchone()
            if row:
                return int(row[0]), False
        row = conn.execute(
            """INSERT INTO jobs (repo, "commit", branch, "trigger", status, attempts, enqueued_at)
               VALUES (?, ?, ?, ?, 'queued', 0, ?) RETURNING id""",
            [repo, commit, branch, trigger, _now()],
        ).fetchone()
        return int(row[0]), True


def claim_next(db: Database, worker: str, gpu: str = "gpu0", *, job_id: int | None = None) -> Job | None:
    """Atomically move the oldest queued job (or, with ``job_id``, that job: what ``solci run`` needs) to
    running on ``gpu``; None when there is none queued or the gpu already runs a job (one running job per gpu)."""
    with db.transaction() as conn:
        if conn.execute("SELECT 1 FROM jobs WHERE status = 'running' AND gpu = ?", [gpu]).fetchone():
            return None
        if job_id is None:
            first = conn.execute(
                "SELECT id FROM jobs WHERE status = 'queued' ORDER BY enqueued_at, id LIMIT 1"
            ).fetchone()
            if first is None:
                return None
            job_id = first[0]
        row = conn.execute(
            f"""UPDATE jobs SET status = 'running', attempts = attempts + 1, started_at = ?, finished_at = NULL,
                    worker = ?, gpu = ? WHERE id = ? AND status = 'queued' RETURNING {_COLUMNS}""",
            [_now(), worker, gpu, job_id],
        ).fetchone()
        return _job(row) if row else None


def finish(db: Database, job_id: int, *, status: str, outcome: str, log: str, run_id: str | None = None) -> None:
    """Close a job: status 'done' or 'failed', an outcome from OUTCOMES, the log (tail), the run it stored."""
    if status not in ("done", "failed"):
        raise ValueError(f"finish: status must be 'done' or 'failed', got {status!r}")
    if outcome not in OUTCOMES:
        raise ValueError(f"finish: outcome must be one of {OUTCOMES}, got {outcome!r}")
    with db.transaction() as conn:
        row = conn.execute(
            """UPDATE jobs SET status = ?, outcome = ?, log = ?, run_id = coalesce(?, run_id), finished_at = ?
               WHERE id = ? RETURNING id""",
            [status, outcome, log, run_id, _now(), job_id],
        ).fetchone()
        if row is None:
            raise StorageError(f"{db.path}: no job with id {job_id}")


def recover_stale(db: Database, *, gpu: str | None = None) -> list[int]:
    """Put running jobs (of ``gpu``, or all) back to queued; returns their ids. Call it when a runner starts:
    a job still running then belonged to a runner that died."""
    with db.transaction() as conn:
        where, params = ("status = 'running'", []) if gpu is None else ("status = 'running' AND gpu = ?", [gpu])
        rows = conn.execute(
            f"""UPDATE jobs SET status = 'queued', started_at = NULL, worker = NULL, gpu = NULL,
                    log = coalesce(log, '') || ? WHERE {where} RETURNING id""",
            [f"[{_now().isoformat(timespec='seconds')}] recovered: its runner stopped mid-job\n", *params],
        ).fetchall()
    return sorted(int(r[0]) for r in rows)


def get_job(db: Database, job_id: int) -> Job | None:
    with db.read() as conn:
        row = conn.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", [job_id]).fetchone()
    return _job(row) if row else None


def list_jobs(db: Database, *, status: str | None = None, limit: int = 100) -> list[Job]:
    """Jobs, newest first (optionally of one status)."""
    if status is not None and status not in JOB_STATUSES:
        raise ValueError(f"list_jobs: status must be one of {JOB_STATUSES}, got {status!r}")
    where, params = ("WHERE status = ?", [status]) if status else ("", [])
    with db.read() as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM jobs {where} ORDER BY id DESC LIMIT ?", [*params, int(limit)]
        ).fetchall()
    return [_job(r) for r in rows]


# ------------------------------------------------------------------------------------------------ watch state
def watch_last_seen(db: Database, repo: str, branch: str) -> str | None:
    """The last commit ``solci watch`` recorded for (repo, branch); None before the first poll."""
    with db.read() as conn:
        row = conn.execute(
            "SELECT last_commit FROM watch_state WHERE repo = ? AND branch = ?", [repo, branch]
        ).fetchone()
    return row[0] if row else None


def set_watch_last_seen(db: Database, repo: str, branch: str, commit: str) -> None:
    with db.write() as conn:
        conn.execute("INSERT OR REPLACE INTO watch_state VALUES (?, ?, ?, ?)", [repo, branch, commit, _now()])
