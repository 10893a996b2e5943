"""The job queue: queued -> running -> done | failed, with leases. One interface, two backends.

- **file backend**: the queue is the ``jobs`` table of the history file; every state change is one transaction
  under DuckDB's file lock, so two runner processes racing for ``claim_next`` never get the same job.
- **lake backend** (``storage.lake``): the queue is a PostgreSQL table next to the lake's catalog
  (``storage.lake_queue``: ``SELECT ... FOR UPDATE SKIP LOCKED``); a job is (repo, commit, GPU model) and every
  host of that model may take it, exactly one does.

**Leases** (both backends). A claimed job records its owner, ``host:pid:start`` (the host name or
``$SOLCI_HOSTNAME``, the process id and the process's start time from /proc, so a recycled pid is not taken for
the old process), and a heartbeat: the runner holds the lease (``hold``) while it processes the job, and a thread
renews ``heartbeat_at`` every ``$SOLCI_HEARTBEAT_INTERVAL`` seconds (default 5). ``recover_stale`` puts a
running job back to queued only when its owner is gone:

- the owner is this process but no longer holds the lease (it was claimed and then abandoned);
- the owner is on this host and its process is dead, or its pid now belongs to another process;
- on any host, its heartbeat is older than the lease timeout (``$SOLCI_LEASE_TIMEOUT``, default 120 s).

A runner whose GPU slot runs a job with a live owner waits for it (``claim_next`` returns None). Claims also
recover the jobs of other owners that are gone, so a dead host's job goes to another host after its lease
runs out, and a job of this very process that no runner holds (its outcome could not be recorded) once its
heartbeat is older than the lease timeout. Nothing is counted twice: a run is stored under its run_id and
ingest is idempotent by run_id. ``finish`` records an outcome only under the lease that measured the job: a
runner whose lease was taken over gets ``LeaseLostError`` and the new owner's outcome stands.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from storage.db import Database, StorageError

JOB_STATUSES = ("queued", "running", "done", "failed")
OUTCOMES = (
    "passed",
    "improved",
    "not_reproduced",
    "ambiguous",
    "regressed",
    "incorrect",
    "build_failed",
    "crashed",
    "timed_out",
    "rejected",
    "quarantined",
    "infra_error",
    "error",
)
_ACTIVE = ("queued", "running", "done")  # a (repo, commit) in one of these is not queued again

HOSTNAME_ENV = "SOLCI_HOSTNAME"
LEASE_TIMEOUT_ENV = "SOLCI_LEASE_TIMEOUT"
HEARTBEAT_ENV = "SOLCI_HEARTBEAT_INTERVAL"
GPU_MODEL_ENV = "SOLCI_GPU_MODEL"
DEFAULT_LEASE_TIMEOUT_S = 120.0
DEFAULT_HEARTBEAT_S = 5.0
CPU_MODEL = "cpu-interpreter"


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
    lease_owner: str | None = None
    heartbeat_at: datetime | None = None
    gpu_model: str | None = None


JOB_FIELDS = tuple(f.name for f in fields(Job))
_COLUMNS = ", ".join(f'"{f}"' for f in JOB_FIELDS)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _job(row: tuple) -> Job:
    return Job(*row)


def _is_lake(db: Any) -> bool:
    return getattr(db, "backend", "file") == "lake"


def _float_env(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name) or default)
    except ValueError:
        raise ValueError(f"${name}: expected seconds, got {os.environ.get(name)!r}") from None
    return value if value > 0 else default


def lease_timeout_s() -> float:
    return _float_env(LEASE_TIMEOUT_ENV, DEFAULT_LEASE_TIMEOUT_S)


def heartbeat_interval_s() -> float:
    return min(_float_env(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S), lease_timeout_s() / 3)


# ------------------------------------------------------------------------------------------------ owners
def this_host() -> str:
    return os.environ.get(HOSTNAME_ENV) or socket.gethostname()


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (/proc/PID/stat field 22); None if gone."""
    try:
        text = open(f"/proc/{pid}/stat", encoding="ascii", errors="replace").read()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": state is field 3, starttime field 22
    if len(rest) < 20 or rest[0] in ("Z", "X"):  # a zombie or dead process is gone
        return None
    return rest[19]


def owner_id(pid: int | None = None) -> str:
    """``host:pid:start`` of this process (or of ``pid`` on this host)."""
    pid = os.getpid() if pid is None else pid
    return f"{this_host()}:{pid}:{process_start(pid) or '0'}"


def parse_owner(owner: str | None) -> tuple[str, int, str] | None:
    if not owner:
        return None
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


# Leases this process holds now: (db key, job id) -> owner. A job claimed by this process that is not in here
# has no runner processing it.
_HELD: dict[tuple[str, int], str] = {}
_HELD_GUARD = threading.Lock()


def _held(db: Any, job_id: int) -> bool:
    with _HELD_GUARD:
        return (db._key, int(job_id)) in _HELD


def owner_gone(
    owner: str | None,
    heartbeat_at: datetime | None,
    started_at: datetime | None,
    now: datetime,
    *,
    lease_timeout: float,
    held: bool = False,
    include_own: bool = True,
) -> bool:
    """Whether a running job's owner is gone (see the module's docstring). ``held``: this process holds its
    lease; ``include_own=False``: never count a job of this process as gone (what claims use)."""
    if held:
        return False
    parsed = parse_owner(owner)
    if parsed is None:  # claimed by a solci without leases: only its start time tells
        return include_own
    host, pid, start = parsed
    last = heartbeat_at or started_at
    if host == this_host() and pid == os.getpid() and start == (process_start(pid) or "0"):
        # ours, and no runner of this process holds it: a claim leaves it alone until its heartbeat is older
        # than the lease timeout (a runner whose outcome could not be recorded gets its slot back then)
        if include_own:
            return True
        return last is not None and now - last > timedelta(seconds=lease_timeout)
    if last is not None and now - last > timedelta(seconds=lease_timeout):
        return True
    if host == this_host():
        return process_start(pid) != start
    return False


class Lease:
    """The lease of one running job while a runner processes it: a thread renews its heartbeat. ``lost`` is set
    when the job is no longer ours (another runner recovered it after our heartbeats stopped). The holder calls
    ``closing()`` before it records the job's outcome itself, so that a beat after that record (the job is no
    longer running) is not taken for another runner's takeover."""

    def __init__(self, db: Any, job_id: int, owner: str, interval: float, echo: Callable[[str], None] | None) -> None:
        self.db, self.job_id, self.owner, self.interval = db, int(job_id), owner, interval
        self.echo = echo or (lambda _m: None)
        self.lost = threading.Event()
        self._closing = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"solci-lease-{job_id}", daemon=True)

    def _beat(self) -> None:
        failures = 0
        while not self._stop.wait(self.interval):
            try:
                if not heartbeat(self.db, self.job_id, self.owner):
                    if self._closing.is_set():  # we finished it ourselves: nothing was lost
                        return
                    self.lost.set()
                    self.echo(f"job {self.job_id}: lease lost (another runner took the job over)")
                    return
                failures = 0
            except Exception as exc:  # a locked file or an unreachable catalog: try again next beat
                failures += 1
                if failures in (1, 10):
                    self.echo(f"job {self.job_id}: heartbeat failed ({exc.__class__.__name__}: {exc})")

    def closing(self) -> None:
        """The holder is about to record the job's outcome: from now on a job no longer running is ours done."""
        self._closing.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval + 35)


@contextmanager
def hold(db: Any, job: Job, *, echo: Callable[[str], None] | None = None) -> Iterator[Lease]:
    """Hold ``job``'s lease while the body processes it (heartbeats from a thread); released on exit."""
    owner = job.lease_owner or owner_id()
    lease = Lease(db, job.id, owner, heartbeat_interval_s(), echo)
    key = (db._key, int(job.id))
    with _HELD_GUARD:
        _HELD[key] = owner
    lease._thread.start()
    try:
        yield lease
    finally:
        lease.stop()
        with _HELD_GUARD:
            _HELD.pop(key, None)


# ------------------------------------------------------------------------------------------------ the queue
def enqueue(
    db: Database,
    repo: str,
    commit: str,
    *,
    branch: str | None = None,
    trigger: str = "manual",
    force: bool = False,
    gpu_model: str | None = None,
) -> tuple[int, bool]:
    """Queue (repo, commit); returns (job id, created). An existing queued/running/done job for the same
    (repo, commit) is returned instead (created False) unless ``force``; a failed one is queued again.

    On a lake, one job per GPU model (``storage.lake_queue.enqueue``); the id returned is this host's model's."""
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.enqueue(db, repo, commit, branch=branch, trigger=trigger, force=force, gpu_model=gpu_model)
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
            """INSERT INTO jobs (repo, "commit", branch, "trigger", status, attempts, enqueued_at, gpu_model)
               VALUES (?, ?, ?, ?, 'queued', 0, ?, ?) RETURNING id""",
            [repo, commit, branch, trigger, _now(), gpu_model],
        ).fetchone()
        return int(row[0]), True


def _stale_ids(db: Any, rows: list[tuple], now: datetime, *, include_own: bool) -> list[int]:
    """Of (id, lease_owner, heartbeat_at, started_at) rows of running jobs, those whose owner is gone."""
    timeout = lease_timeout_s()
    return [
        int(r[0])
        for r in rows
        if owner_gone(r[1], r[2], r[3], now, lease_timeout=timeout, held=_held(db, r[0]), include_own=include_own)
    ]


def _recover_note() -> str:
    return f"[{_now().isoformat(timespec='seconds')}] recovered: its runner stopped mid-job\n"


def _requeue_file(conn: Any, ids: list[int]) -> None:
    if ids:
        conn.execute(
            f"""UPDATE jobs SET status = 'queued', started_at = NULL, worker = NULL, gpu = NULL, lease_owner = NULL,
                    heartbeat_at = NULL, log = coalesce(log, '') || ? WHERE id IN ({", ".join(["?"] * len(ids))})""",
            [_recover_note(), *ids],
        )


def queued_commits(db: Database, repo: str) -> set[str]:
    """Every commit that has a job for ``repo`` (any status, any GPU model): where a walk back from a pushed
    head whose old end is unknown stops (``ci.triggers.commits_between``)."""
    if _is_lake(db):
        with db.pg() as pg:
            rows = pg.execute('SELECT DISTINCT "commit" FROM solci.jobs WHERE repo = %s', (repo,)).fetchall()
    else:
        with db.read() as conn:
            rows = conn.execute('SELECT DISTINCT "commit" FROM jobs WHERE repo = ?', [repo]).fetchall()
    return {r[0] for r in rows}


def claim_next(
    db: Database,
    worker: str,
    gpu: str = "gpu0",
    *,
    job_id: int | None = None,
    gpu_model: str | None = None,
    owner: str | None = None,
) -> Job | None:
    """Atomically move the oldest queued job (or, with ``job_id``, that job: what ``solci run`` needs) to
    running on ``gpu``, leased to ``owner`` (default: this process); None when there is none queued or the
    gpu already runs a job of a live owner (one running job per gpu slot). On a lake, only jobs of
    ``gpu_model`` (default: this host's model: ``$SOLCI_GPU_MODEL``, else the one it registered last) or of no
    model yet are taken; with no model known at all it raises StorageError (a job is measured once per model)."""
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.claim_next(db, worker, gpu, job_id=job_id, gpu_model=gpu_model, owner=owner)
    owner = owner or owner_id()
    with db.transaction() as conn:
        now = _now()
        running = conn.execute(
            "SELECT id, lease_owner, heartbeat_at, started_at FROM jobs WHERE status = 'running'"
        ).fetchall()
        _requeue_file(conn, _stale_ids(db, running, now, include_own=False))
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
                WHERE id = ? AND status = 'queued' RETURNING {_COLUMNS}""",
            [now, worker, gpu, owner, now, gpu_model, job_id],
        ).fetchone()
        return _job(row) if row else None


def heartbeat(db: Database, job_id: int, owner: str) -> bool:
    """Renew the lease of a running job; False when the job is no longer running under ``owner``."""
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.heartbeat(db, job_id, owner)
    with db.transaction() as conn:
        row = conn.execute(
            "UPDATE jobs SET heartbeat_at = ? WHERE id = ? AND status = 'running' AND lease_owner = ? RETURNING id",
            [_now(), job_id, owner],
        ).fetchone()
    return row is not None


class LeaseLostError(StorageError):
    """The job is no longer running under the lease that measured it (another runner took it over): the
    outcome was not recorded, so the new owner's stands."""


def finish(
    db: Database,
    job_id: int,
    *,
    status: str,
    outcome: str,
    log: str,
    run_id: str | None = None,
    owner: str | None = None,
) -> None:
    """Close a job: status 'done' or 'failed', an outcome from OUTCOMES, the log (tail), the run it stored.

    ``owner``: the lease that measured it; the job is closed only while it is still running under that lease,
    else ``LeaseLostError`` and nothing changes (a runner whose lease was taken over never overwrites the
    outcome of the runner that took it)."""
    if status not in ("done", "failed"):
        raise ValueError(f"finish: status must be 'done' or 'failed', got {status!r}")
    if outcome not in OUTCOMES:
        raise ValueError(f"finish: outcome must be one of {OUTCOMES}, got {outcome!r}")
    if _is_lake(db):
        from storage import lake_queue

        lake_queue.finish(db, job_id, status=status, outcome=outcome, log=log, run_id=run_id, owner=owner)
        return
    guard, params = ("", []) if owner is None else (" AND status = 'running' AND lease_owner = ?", [owner])
    with db.transaction() as conn:
        row = conn.execute(
            f"""UPDATE jobs SET status = ?, outcome = ?, log = ?, run_id = coalesce(?, run_id), finished_at = ?
               WHERE id = ?{guard} RETURNING id""",
            [status, outcome, log, run_id, _now(), job_id, *params],
        ).fetchone()
        if row is None:
            current = conn.execute("SELECT status, lease_owner FROM jobs WHERE id = ?", [job_id]).fetchone()
    if row is None:
        if current is None:
            raise StorageError(f"{db.path}: no job with id {job_id}")
        raise LeaseLostError(lease_lost_message(job_id, owner, *current))


def lease_lost_message(job_id: int, owner: str | None, status: str, holder: str | None) -> str:
    """Why a runner's outcome of ``job_id`` was not recorded (its lease ``owner`` is no longer the job's)."""
    return (
        f"job {job_id}: its outcome was not recorded: the job is {status} under lease {holder or 'none'}, "
        f"not {owner} (another runner took it over after this one's heartbeats stopped); that runner's "
        "outcome stands"
    )


def recover_stale(db: Database, *, gpu: str | None = None) -> list[int]:
    """Put running jobs (of ``gpu``, or all) whose owner is gone back to queued; returns their ids. A runner
    calls it when it starts; a job of a live owner (another runner measuring on this slot) is left alone."""
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.recover_stale(db, gpu=gpu)
    with db.transaction() as conn:
        where, params = ("status = 'running'", []) if gpu is None else ("status = 'running' AND gpu = ?", [gpu])
        rows = conn.execute(
            f"SELECT id, lease_owner, heartbeat_at, started_at FROM jobs WHERE {where}", params
        ).fetchall()
        ids = _stale_ids(db, rows, _now(), include_own=True)
        _requeue_file(conn, ids)
    return sorted(ids)


def slot_owner(db: Database, gpu: str) -> Job | None:
    """The running job of a live owner on this host's ``gpu`` slot, if any (what a starting runner must neither
    recover nor clean up after)."""
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.slot_owner(db, gpu)
    now = _now()
    for job in list_jobs(db, status="running", limit=1000):
        row = (job.id, job.lease_owner, job.heartbeat_at, job.started_at)
        if job.gpu == gpu and not _stale_ids(db, [row], now, include_own=True):
            return job
    return None


def link_run(db: Database, job_id: int, run_id: str) -> None:
    """Record ``run_id`` as the job's run (ingest does it on the file; a lake's queue is elsewhere)."""
    if _is_lake(db):
        from storage import lake_queue

        lake_queue.link_run(db, job_id, run_id)
        return
    with db.transaction() as conn:
        conn.execute("UPDATE jobs SET run_id = ? WHERE id = ? AND run_id IS NULL", [run_id, job_id])


def requeue_for_judging(db: Database, job_id: int, run_id: str | None, note: str) -> bool:
    """Queue a failed job again, or a running one whose owner is gone, so a runner judges its stored run
    (``run_id``) without measuring it again; True when it was queued. A done job is left alone."""
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.requeue_for_judging(db, job_id, run_id, note)
    with db.transaction() as conn:
        row = conn.execute(
            "SELECT status, lease_owner, heartbeat_at, started_at FROM jobs WHERE id = ?", [job_id]
        ).fetchone()
        if row is None or row[0] in ("done", "queued"):
            return False
        if row[0] == "running" and not _stale_ids(db, [(job_id, *row[1:])], _now(), include_own=True):
            return False
        conn.execute(
            """UPDATE jobs SET status = 'queued', run_id = coalesce(?, run_id), started_at = NULL, worker = NULL,
                   gpu = NULL, lease_owner = NULL, heartbeat_at = NULL, log = coalesce(log, '') || ? WHERE id = ?""",
            [run_id, f"[{_now().isoformat(timespec='seconds')}] {note}\n", job_id],
        )
    return True


def get_job(db: Database, job_id: int) -> Job | None:
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.get_job(db, job_id)
    with db.read() as conn:
        row = conn.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", [job_id]).fetchone()
    return _job(row) if row else None


def list_jobs(db: Database, *, status: str | None = None, limit: int = 100) -> list[Job]:
    """Jobs, newest first (optionally of one status)."""
    if status is not None and status not in JOB_STATUSES:
        raise ValueError(f"list_jobs: status must be one of {JOB_STATUSES}, got {status!r}")
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.list_jobs(db, status=status, limit=limit)
    where, params = ("WHERE status = ?", [status]) if status else ("", [])
    with db.read() as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM jobs {where} ORDER BY id DESC LIMIT ?", [*params, int(limit)]
        ).fetchall()
    return [_job(r) for r in rows]


# ------------------------------------------------------------------------------------------------ gpu models
def local_gpu_model() -> str | None:
    """This host's GPU model for the lake's queue when the caller gave none: ``$SOLCI_GPU_MODEL``, else None (a
    job without a model, which the first runner to claim it adopts). Storage detects no hardware: the runner
    (``ci.fleet.detect_gpu_model``) passes its model."""
    return os.environ.get(GPU_MODEL_ENV) or None


# ------------------------------------------------------------------------------------------------ watch state
def watch_last_seen(db: Database, repo: str, branch: str) -> str | None:
    """The last commit ``solci watch`` recorded for (repo, branch); None before the first poll."""
    if _is_lake(db):
        from storage import lake_queue

        return lake_queue.watch_last_seen(db, repo, branch)
    with db.read() as conn:
        row = conn.execute(
            "SELECT last_commit FROM watch_state WHERE repo = ? AND branch = ?", [repo, branch]
        ).fetchone()
    return row[0] if row else None


def set_watch_last_seen(db: Database, repo: str, branch: str, commit: str) -> None:
    if _is_lake(db):
        from storage import lake_queue

        lake_queue.set_watch_last_seen(db, repo, branch, commit)
        return
    with db.write() as conn:
        conn.execute("INSERT OR REPLACE INTO watch_state VALUES (?, ?, ?, ?)", [repo, branch, commit, _now()])
