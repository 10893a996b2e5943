"""The job queue of a lake: PostgreSQL tables next to the DuckLake catalog, through psycopg.

Why PostgreSQL and psycopg: claiming a job must be one PostgreSQL transaction with row locks held across its
statements (``SELECT ... FOR UPDATE SKIP LOCKED`` then ``UPDATE ... RETURNING``) and real errors and timeouts;
DuckDB's ``postgres_execute`` returns no rows and the lake itself has no row locks (and commits far slower).
psycopg 3 is the standard PostgreSQL client for Python (``psycopg[binary]``, pinned).

Tables (schema ``solci``, created on first use under an advisory lock):

- ``solci.jobs``: the columns of the file's ``jobs`` table (``id`` a BIGSERIAL). A job is (repo, commit,
  gpu_model): every host of that model may take it, exactly one does.
- ``solci.gpu_models``: (gpu_model, host, first_seen, last_seen): every claim registers its runner's model (a
  claim needs one: the caller's, else ``$SOLCI_GPU_MODEL``, else the host's last registered one; with none known
  it raises StorageError and changes nothing, since a job taken without a model would count for every model).
- ``solci.watch_state``: what ``solci watch`` saw last, per (repo, branch).

Per-model jobs: ``enqueue`` creates one job per GPU model a runner has registered (a model seen within
``MODEL_TTL_DAYS``), so a push is measured once on each kind of GPU of the fleet. Before any runner registered,
one job without a model is queued, and the first runner to claim it gives it its model. ``force`` (what
``solci run`` does: measure this commit here, now) queues only this host's model. A model that joins later is
measured from the commits queued after it joined (``solci enqueue --force`` on one of its hosts backfills).

Times are PostgreSQL's (``timezone('UTC', now())``), so the hosts' clocks never matter for leases.

``PgQueue`` is the lake's ``Database.queue`` (the interface: ``storage.queue.Queue``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import duckdb

from storage.backend import StorageError
from storage.queue import (
    ACTIVE,
    GPU_MODEL_ENV,
    JOB_COLUMNS,
    JOB_FIELDS,
    Job,
    LeaseLostError,
    Queue,
    job_of,
    lease_lost_message,
    local_gpu_model,
    note_line,
    owner_id,
    stale_ids,
    this_host,
)

if TYPE_CHECKING:
    from storage.lake import LakeDatabase

MODEL_TTL_DAYS = 30
_NOW = "timezone('UTC', now())"


def _pg_now(pg: Any) -> datetime:
    return pg.execute(f"SELECT {_NOW}").fetchone()[0]


def _host_model(pg: Any) -> str | None:
    """This host's model: $SOLCI_GPU_MODEL (``local_gpu_model``), else what its runners registered last; None
    when neither says."""
    model = local_gpu_model()
    if model:
        return model
    row = pg.execute(
        "SELECT gpu_model FROM solci.gpu_models WHERE host = %s ORDER BY last_seen DESC LIMIT 1", (this_host(),)
    ).fetchone()
    return row[0] if row else None


def registered_models(db: Any) -> list[tuple[str, str, datetime, datetime]]:
    """(gpu_model, host, first_seen, last_seen) of every runner that ever claimed from this queue."""
    with db.pg() as pg:
        return pg.execute("SELECT * FROM solci.gpu_models ORDER BY gpu_model, host").fetchall()


def _requeue(pg: Any, ids: list[int], now: datetime) -> None:
    if ids:
        pg.execute(
            """UPDATE solci.jobs SET status = 'queued', started_at = NULL, worker = NULL, gpu = NULL,
                   lease_owner = NULL, heartbeat_at = NULL, log = coalesce(log, '') || %s WHERE id = ANY(%s)""",
            (note_line(now, "recovered: its runner stopped mid-job (lease expired or process gone)"), ids),
        )


def _running_rows(pg: Any, gpu: str | None = None) -> list[tuple]:
    where, params = ("", ()) if gpu is None else (" AND gpu = %s", (gpu,))
    return pg.execute(
        f"""SELECT id, lease_owner, heartbeat_at, started_at FROM solci.jobs WHERE status = 'running'{where}
            FOR UPDATE SKIP LOCKED""",
        params,
    ).fetchall()


def _lookup_errors() -> tuple[type[BaseException], ...]:
    """What looking up an earlier attempt's run may raise once a claim committed: storage failures, not bugs."""
    import psycopg  # lazy: psycopg takes ~0.3 s to import and only a lake needs it (loaded by then)

    return (StorageError, OSError, duckdb.Error, psycopg.Error)


# claim_next looks the two up as module attributes (tests replace them to fail after a committed claim)
def _stored_run_of(db: Any, job_id: int) -> str | None:
    with db.read() as conn:
        row = conn.execute(
            """SELECT run_id FROM runs WHERE job_id = ? AND coalesce(purpose, 'measure') = 'measure'
               ORDER BY ingested_at LIMIT 1""",
            [job_id],
        ).fetchone()
    return row[0] if row else None


def link_run(db: Any, job_id: int, run_id: str) -> None:
    """Record ``run_id`` as the job's run (when it has none)."""
    with db.pg() as pg:
        pg.execute("UPDATE solci.jobs SET run_id = %s WHERE id = %s AND run_id IS NULL", (run_id, job_id))


class PgQueue(Queue):
    """The lake's queue: PostgreSQL tables next to its catalog, through ``LakeDatabase.pg()``."""

    db: LakeDatabase

    # -------------------------------------------------------------------------------------------- enqueue
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
        with self.db.pg() as pg:
            pg.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"enqueue:{repo}:{commit}",))
            now = _pg_now(pg)
            local = gpu_model or _host_model(pg)
            if gpu_model or force:
                models: list[str | None] = [local]
            else:
                models = [
                    r[0]
                    for r in pg.execute(
                        f"""SELECT DISTINCT gpu_model FROM solci.gpu_models
                            WHERE last_seen > {_NOW} - interval '{MODEL_TTL_DAYS} days' ORDER BY 1"""
                    ).fetchall()
                ] or [None]
            out: dict[str | None, tuple[int, bool]] = {}
            for model in models:
                if not force:
                    row = pg.execute(
                        f"""SELECT id FROM solci.jobs WHERE repo = %s AND "commit" = %s AND status IN {ACTIVE}
                            AND (gpu_model IS NULL OR gpu_model = %s::text OR %s::text IS NULL)
                            AND base IS NOT DISTINCT FROM %s::text ORDER BY id DESC LIMIT 1""",
                        (repo, commit, model, model, base),
                    ).fetchone()
                    if row:
                        out[model] = (int(row[0]), False)
                        continue
                row = pg.execute(
                    """INSERT INTO solci.jobs (repo, "commit", branch, "trigger", status, attempts, enqueued_at,
                       gpu_model, base) VALUES (%s, %s, %s, %s, 'queued', 0, %s, %s, %s) RETURNING id""",
                    (repo, commit, branch, trigger, now, model, base),
                ).fetchone()
                out[model] = (int(row[0]), True)
        return out.get(local) or next(iter(out.values()))

    def queued_commits(self, repo: str) -> set[str]:
        with self.db.pg() as pg:
            rows = pg.execute('SELECT DISTINCT "commit" FROM solci.jobs WHERE repo = %s', (repo,)).fetchall()
        return {r[0] for r in rows}

    # -------------------------------------------------------------------------------------------- claim
    def claim_next(
        self, worker: str, gpu: str, *, job_id: int | None, gpu_model: str | None, owner: str | None
    ) -> Job | None:
        db = self.db
        owner = owner or owner_id()
        host = this_host()
        with db.pg() as pg:
            model = gpu_model or _host_model(pg)
            if not model:  # a job is measured once per model: a runner must say which model it measures on
                raise StorageError(
                    f"{db.describe()}: this host's GPU model is unknown, so it cannot take a job from the lake's "
                    f"queue (each job is for one GPU model): pass the runner's model or set ${GPU_MODEL_ENV} "
                    "(e.g. H200)"
                )
            # claims of one (host, slot) go one at a time, so two runners of one slot never both pass the busy check
            pg.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"slot:{host}:{gpu}",))
            now = _pg_now(pg)
            pg.execute(
                """INSERT INTO solci.gpu_models VALUES (%s, %s, %s, %s)
                   ON CONFLICT (gpu_model, host) DO UPDATE SET last_seen = EXCLUDED.last_seen""",
                (model, host, now, now),
            )
            _requeue(pg, stale_ids(db, _running_rows(pg), now, include_own=False), now)
            busy = pg.execute(
                "SELECT 1 FROM solci.jobs WHERE status = 'running' AND gpu = %s AND left(lease_owner, %s) = %s",
                (gpu, len(host) + 1, host + ":"),
            ).fetchone()
            if busy:
                return None
            if job_id is None:
                first = pg.execute(
                    """SELECT id FROM solci.jobs WHERE status = 'queued' AND (gpu_model = %s OR gpu_model IS NULL)
                       ORDER BY enqueued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED""",
                    (model,),
                ).fetchone()
            else:
                first = pg.execute(
                    """SELECT id FROM solci.jobs WHERE id = %s AND status = 'queued'
                       AND (gpu_model = %s OR gpu_model IS NULL) FOR UPDATE SKIP LOCKED""",
                    (job_id, model),
                ).fetchone()
            if first is None:
                return None
            job = job_of(
                pg.execute(
                    f"""UPDATE solci.jobs SET status = 'running', attempts = attempts + 1, started_at = %s,
                            finished_at = NULL, worker = %s, gpu = %s, lease_owner = %s, heartbeat_at = %s,
                            gpu_model = coalesce(gpu_model, %s)
                        WHERE id = %s AND status = 'queued' RETURNING {JOB_COLUMNS}""",
                    (now, worker, gpu, owner, now, model, first[0]),
                ).fetchone()
            )
        if job is not None and job.run_id is None and job.attempts > 1:
            # An earlier attempt may have stored its run, then its runner died. The claim is committed: should
            # storage fail here, the caller still gets the job (else it would stay running under this live owner,
            # its slot busy, until the lease ran out). Without the run it is measured again: ingest is idempotent
            # by run_id.
            try:
                job.run_id = _stored_run_of(db, job.id)
            except _lookup_errors():  # the catalog or the data folder failed us: measure it again
                job.run_id = None
            if job.run_id:
                try:
                    link_run(db, job.id, job.run_id)
                except _lookup_errors():  # the runner judges the stored run; finish() records the run_id later
                    pass
        return job

    def heartbeat(self, job_id: int, owner: str) -> bool:
        with self.db.pg() as pg:
            row = pg.execute(
                f"""UPDATE solci.jobs SET heartbeat_at = {_NOW}
                    WHERE id = %s AND status = 'running' AND lease_owner = %s RETURNING id""",
                (job_id, owner),
            ).fetchone()
        return row is not None

    def finish(
        self, job_id: int, *, status: str, outcome: str, log: str, run_id: str | None, owner: str | None
    ) -> None:
        guard, params = ("", ()) if owner is None else (" AND status = 'running' AND lease_owner = %s", (owner,))
        with self.db.pg() as pg:
            row = pg.execute(
                f"""UPDATE solci.jobs SET status = %s, outcome = %s, log = %s, run_id = coalesce(%s, run_id),
                        finished_at = {_NOW} WHERE id = %s{guard} RETURNING id""",
                (status, outcome, log, run_id, job_id, *params),
            ).fetchone()
            current = (
                None
                if row
                else pg.execute("SELECT status, lease_owner FROM solci.jobs WHERE id = %s", (job_id,)).fetchone()
            )
        if row is None:
            if current is None:
                raise StorageError(f"{self.db.describe()}: no job with id {job_id}")
            raise LeaseLostError(lease_lost_message(job_id, owner, *current))

    def recover_stale(self, *, gpu: str | None) -> list[int]:
        with self.db.pg() as pg:
            now = _pg_now(pg)
            ids = stale_ids(self.db, _running_rows(pg, gpu), now, include_own=True)
            _requeue(pg, ids, now)
        return sorted(ids)

    def slot_owner(self, gpu: str) -> Job | None:
        host = this_host()
        with self.db.pg() as pg:
            now = _pg_now(pg)
            rows = pg.execute(
                f"""SELECT {JOB_COLUMNS} FROM solci.jobs WHERE status = 'running' AND gpu = %s
                    AND left(lease_owner, %s) = %s""",
                (gpu, len(host) + 1, host + ":"),
            ).fetchall()
        for row in rows:
            job = Job(*row)
            stale = stale_ids(
                self.db, [(job.id, job.lease_owner, job.heartbeat_at, job.started_at)], now, include_own=True
            )
            if not stale:
                return job
        return None

    def link_run(self, job_id: int, run_id: str) -> None:
        link_run(self.db, job_id, run_id)

    def requeue_for_judging(self, job_id: int, run_id: str | None, note: str) -> bool:
        with self.db.pg() as pg:
            row = pg.execute(
                "SELECT status, lease_owner, heartbeat_at, started_at FROM solci.jobs WHERE id = %s FOR UPDATE",
                (job_id,),
            ).fetchone()
            if row is None or row[0] in ("done", "queued"):
                return False
            now = _pg_now(pg)
            if row[0] == "running" and not stale_ids(self.db, [(job_id, *row[1:])], now, include_own=True):
                return False
            pg.execute(
                """UPDATE solci.jobs SET status = 'queued', run_id = coalesce(%s, run_id), started_at = NULL,
                       worker = NULL, gpu = NULL, lease_owner = NULL, heartbeat_at = NULL,
                       log = coalesce(log, '') || %s WHERE id = %s""",
                (run_id, note_line(now, note), job_id),
            )
        return True

    def get_job(self, job_id: int) -> Job | None:
        with self.db.pg() as pg:
            return job_of(pg.execute(f"SELECT {JOB_COLUMNS} FROM solci.jobs WHERE id = %s", (job_id,)).fetchone())

    def list_jobs(self, *, status: str | None, limit: int) -> list[Job]:
        where, params = ("WHERE status = %s", (status,)) if status else ("", ())
        with self.db.pg() as pg:
            rows = pg.execute(
                f"SELECT {JOB_COLUMNS} FROM solci.jobs {where} ORDER BY id DESC LIMIT %s", (*params, int(limit))
            ).fetchall()
        return [Job(*r) for r in rows]

    # -------------------------------------------------------------------------------------------- watch state
    def watch_last_seen(self, repo: str, branch: str) -> str | None:
        with self.db.pg() as pg:
            row = pg.execute(
                "SELECT last_commit FROM solci.watch_state WHERE repo = %s AND branch = %s", (repo, branch)
            ).fetchone()
        return row[0] if row else None

    def set_watch_last_seen(self, repo: str, branch: str, commit: str) -> None:
        with self.db.pg() as pg:
            pg.execute(
                f"""INSERT INTO solci.watch_state VALUES (%s, %s, %s, {_NOW})
                    ON CONFLICT (repo, branch) DO UPDATE SET last_commit = EXCLUDED.last_commit,
                    updated_at = EXCLUDED.updated_at""",
                (repo, branch, commit),
            )

    # -------------------------------------------------------------------------------------------- solci migrate
    def import_jobs(self, jobs: list[Job]) -> int:
        """Copy jobs (ids kept) into an empty queue, then move the id sequence past them: what ``solci migrate``
        does with a history file's queue."""
        if not jobs:
            return 0
        with self.db.pg() as pg:
            if pg.execute("SELECT count(*) FROM solci.jobs").fetchone()[0]:
                raise StorageError(
                    f"{self.db.describe()}: the lake's queue is not empty; jobs are only copied into a new lake"
                )
            with pg.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO solci.jobs ({JOB_COLUMNS}) VALUES ({', '.join(['%s'] * len(JOB_FIELDS))})",
                    [tuple(getattr(j, f) for f in JOB_FIELDS) for j in jobs],
                )
            pg.execute("SELECT setval(pg_get_serial_sequence('solci.jobs', 'id'), (SELECT max(id) FROM solci.jobs))")
        return len(jobs)

    def import_watch_state(self, rows: list[tuple]) -> int:
        """Copy (repo, branch, last_commit, updated_at) rows into the queue's watch state (times kept)."""
        with self.db.pg() as pg, pg.cursor() as cur:
            cur.executemany(
                """INSERT INTO solci.watch_state VALUES (%s, %s, %s, %s)
                   ON CONFLICT (repo, branch) DO UPDATE SET last_commit = EXCLUDED.last_commit,
                   updated_at = EXCLUDED.updated_at""",
                rows,
            )
        return len(rows)
