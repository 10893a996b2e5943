"""The job queue of a history file: its ``jobs`` and ``watch_state`` tables.

Every state change is one transaction under DuckDB's file lock (``FileDatabase.transaction``), so two runner
processes racing for ``claim_next`` never get the same job. Times are this host's clock (UTC).
"""

from __future__ import annotations

from typing import Any

from storage.backend import StorageError
from storage.queue import (
    ACTIVE,
    JOB_COLUMNS,
    Job,
    LeaseLostError,
    Queue,
    job_of,
    lease_lost_message,
    note_line,
    owner_id,
    stale_ids,
    utc_now,
)


def _requeue(conn: Any, ids: list[int]) -> None:
    if ids:
        conn.execute(
            f"""UPDATE jobs SET status = 'queued', started_at = NULL, worker = NULL, gpu = NULL, lease_owner = NULL,
                    heartbeat_at = NULL, log = coalesce(log, '') || ? WHERE id IN ({", ".join(["?"] * len(ids))})""",
            [note_line(utc_now(), "recovered: its runner stopped mid-job"), *ids],
        )


class FileQueue(Queue):
    """The queue in the history file's ``jobs`` table."""

    def enqueue(
        self,
        repo: str,
        commit: str,
        *,
        branch: str | None,
        trigger: str,
        force: bool,
        gpu_model: str | None,
        base: str | None = None,
    ) -> tuple[int, bool]:
        with self.db.transaction() as conn:
            if not force:
                row = conn.execute(
                    f"""SELECT id FROM jobs WHERE repo = ? AND "commit" = ? AND status IN {ACTIVE}
                        AND base IS NOT DISTINCT FROM ? ORDER BY id DESC LIMIT 1""",
                    [repo, commit, base],
                ).fetchone()
                if row:
                    return int(row[0]), False
            row = conn.execute(
                """INSERT INTO jobs (repo, "commit", branch, "trigger", status, attempts, enqueued_at, gpu_model,
                   base) VALUES (?, ?, ?, ?, 'queued', 0, ?, ?, ?) RETURNING id""",
                [repo, commit, branch, trigger, utc_now(), gpu_model, base],
            ).fetchone()
            return int(row[0]), True

    def queued_commits(self, repo: str) -> set[str]:
        with self.db.read() as conn:
            rows = conn.execute('SELECT DISTINCT "commit" FROM jobs WHERE repo = ?', [repo]).fetchall()
        return {r[0] for r in rows}

    def claim_next(
        self, worker: str, gpu: str, *, job_id: int | None, gpu_model: str | None, owner: str | None
    ) -> Job | None:
        owner = owner or owner_id()
        with self.db.transaction() as conn:
            now = utc_now()
            running = conn.execute(
                "SELECT id, lease_owner, heartbeat_at, started_at FROM jobs WHERE status = 'running'"
            ).fetchall()
            _requeue(conn, stale_ids(self.db, running, now, include_own=False))
            if conn.execute("SELECT 1 FROM jobs WHERE status = 'running' AND gpu = ?", [gpu]).fetchone():
                return None
            model = "" if gpu_model is None else " AND (gpu_model IS NULL OR gpu_model = ?)"
            if job_id is None:
                first = conn.execute(
                    f"SELECT id FROM jobs WHERE status = 'queued'{model} ORDER BY enqueued_at, id LIMIT 1",
                    [] if gpu_model is None else [gpu_model],
                ).fetchone()
                if first is None:
                    return None
                job_id = first[0]
            row = conn.execute(
                f"""UPDATE jobs SET status = 'running', attempts = attempts + 1, started_at = ?, finished_at = NULL,
                        worker = ?, gpu = ?, lease_owner = ?, heartbeat_at = ?, gpu_model = coalesce(?, gpu_model)
                    WHERE id = ? AND status = 'queued' RETURNING {JOB_COLUMNS}""",
                [now, worker, gpu, owner, now, gpu_model, job_id],
            ).fetchone()
            return job_of(row)

    def heartbeat(self, job_id: int, owner: str) -> bool:
        with self.db.transaction() as conn:
            row = conn.execute(
                "UPDATE jobs SET heartbeat_at = ? WHERE id = ? AND status = 'running' AND lease_owner = ? RETURNING id",
                [utc_now(), job_id, owner],
            ).fetchone()
        return row is not None

    def finish(
        self, job_id: int, *, status: str, outcome: str, log: str, run_id: str | None, owner: str | None
    ) -> None:
        guard, params = ("", []) if owner is None else (" AND status = 'running' AND lease_owner = ?", [owner])
        with self.db.transaction() as conn:
            row = conn.execute(
                f"""UPDATE jobs SET status = ?, outcome = ?, log = ?, run_id = coalesce(?, run_id), finished_at = ?
                   WHERE id = ?{guard} RETURNING id""",
                [status, outcome, log, run_id, utc_now(), job_id, *params],
            ).fetchone()
            if row is None:
                current = conn.execute("SELECT status, lease_owner FROM jobs WHERE id = ?", [job_id]).fetchone()
        if row is None:
            if current is None:
                raise StorageError(f"{self.db.path}: no job with id {job_id}")
            raise LeaseLostError(lease_lost_message(job_id, owner, *current))

    def recover_stale(self, *, gpu: str | None) -> list[int]:
        with self.db.transaction() as conn:
            where, params = ("status = 'running'", []) if gpu is None else ("status = 'running' AND gpu = ?", [gpu])
            rows = conn.execute(
                f"SELECT id, lease_owner, heartbeat_at, started_at FROM jobs WHERE {where}", params
            ).fetchall()
            ids = stale_ids(self.db, rows, utc_now(), include_own=True)
            _requeue(conn, ids)
        return sorted(ids)

    def slot_owner(self, gpu: str) -> Job | None:
        now = utc_now()
        for job in self.list_jobs(status="running", limit=1000):
            row = (job.id, job.lease_owner, job.heartbeat_at, job.started_at)
            if job.gpu == gpu and not stale_ids(self.db, [row], now, include_own=True):
                return job
        return None

    def link_run(self, job_id: int, run_id: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE jobs SET run_id = ? WHERE id = ? AND run_id IS NULL", [run_id, job_id])

    def requeue_for_judging(self, job_id: int, run_id: str | None, note: str) -> bool:
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT status, lease_owner, heartbeat_at, started_at FROM jobs WHERE id = ?", [job_id]
            ).fetchone()
            if row is None or row[0] in ("done", "queued"):
                return False
            if row[0] == "running" and not stale_ids(self.db, [(job_id, *row[1:])], utc_now(), include_own=True):
                return False
            conn.execute(
                """UPDATE jobs SET status = 'queued', run_id = coalesce(?, run_id), started_at = NULL, worker = NULL,
                       gpu = NULL, lease_owner = NULL, heartbeat_at = NULL, log = coalesce(log, '') || ?
                   WHERE id = ?""",
                [run_id, note_line(utc_now(), note), job_id],
            )
        return True

    def get_job(self, job_id: int) -> Job | None:
        with self.db.read() as conn:
            return job_of(conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", [job_id]).fetchone())

    def list_jobs(self, *, status: str | None, limit: int) -> list[Job]:
        where, params = ("WHERE status = ?", [status]) if status else ("", [])
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs {where} ORDER BY id DESC LIMIT ?", [*params, int(limit)]
            ).fetchall()
        return [Job(*r) for r in rows]

    def watch_last_seen(self, repo: str, branch: str) -> str | None:
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT last_commit FROM watch_state WHERE repo = ? AND branch = ?", [repo, branch]
            ).fetchone()
        return row[0] if row else None

    def set_watch_last_seen(self, repo: str, branch: str, commit: str) -> None:
        with self.db.write() as conn:
            conn.execute("INSERT OR REPLACE INTO watch_state VALUES (?, ?, ?, ?)", [repo, branch, commit, utc_now()])
