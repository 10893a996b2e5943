"""The job queue: queued -> running -> done | failed, with leases. One interface, two backends.

These functions are what the rest of solci calls; each checks its arguments and hands over to the history's
queue, ``db.queue`` (``storage.queue.Queue``), which its backend chose once:

- **file backend** (``storage.file_queue``): the queue is the ``jobs`` table of the history file; every state
  change is one transaction under DuckDB's file lock, so two runner processes racing for ``claim_next`` never
  get the same job.
- **lake backend** (``storage.lake_queue``): the queue is a PostgreSQL table next to the lake's catalog
  (``SELECT ... FOR UPDATE SKIP LOCKED``); a job is (repo, commit, GPU model) and every host of that model may
  take it, exactly one does.

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

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from storage.backend import Database
from storage.queue import (
    CPU_MODEL,
    DEFAULT_HEARTBEAT_S,
    DEFAULT_LEASE_TIMEOUT_S,
    GPU_MODEL_ENV,
    HEARTBEAT_ENV,
    HOSTNAME_ENV,
    JOB_FIELDS,
    JOB_STATUSES,
    LEASE_TIMEOUT_ENV,
    OUTCOMES,
    Job,
    LeaseLostError,
    heartbeat_interval_s,
    hold_lease,
    lease_lost_message,
    lease_timeout_s,
    local_gpu_model,
    owner_gone,
    owner_id,
    parse_owner,
    process_start,
    release_lease,
    this_host,
)

__all__ = [
    "CPU_MODEL",
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_LEASE_TIMEOUT_S",
    "GPU_MODEL_ENV",
    "HEARTBEAT_ENV",
    "HOSTNAME_ENV",
    "JOB_FIELDS",
    "JOB_STATUSES",
    "LEASE_TIMEOUT_ENV",
    "OUTCOMES",
    "Job",
    "Lease",
    "LeaseLostError",
    "claim_next",
    "enqueue",
    "finish",
    "get_job",
    "heartbeat",
    "heartbeat_interval_s",
    "hold",
    "lease_lost_message",
    "lease_timeout_s",
    "link_run",
    "list_jobs",
    "local_gpu_model",
    "owner_gone",
    "owner_id",
    "parse_owner",
    "process_start",
    "queued_commits",
    "recover_stale",
    "requeue_for_judging",
    "set_watch_last_seen",
    "slot_owner",
    "this_host",
    "watch_last_seen",
]


# ------------------------------------------------------------------------------------------------ leases
class Lease:
    """The lease of one running job while a runner processes it: a thread renews its heartbeat. ``lost`` is set
    when the job is no longer ours (another runner recovered it after our heartbeats stopped). The holder calls
    ``closing()`` before it records the job's outcome itself, so that a beat after that record (the job is no
    longer running) is not taken for another runner's takeover."""

    def __init__(
        self, db: Database, job_id: int, owner: str, interval: float, echo: Callable[[str], None] | None
    ) -> None:
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
def hold(db: Database, job: Job, *, echo: Callable[[str], None] | None = None) -> Iterator[Lease]:
    """Hold ``job``'s lease while the body processes it (heartbeats from a thread); released on exit."""
    owner = job.lease_owner or owner_id()
    lease = Lease(db, job.id, owner, heartbeat_interval_s(), echo)
    hold_lease(db, job.id, owner)
    lease._thread.start()
    try:
        yield lease
    finally:
        lease.stop()
        release_lease(db, job.id)


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
    base: str | None = None,
) -> tuple[int, bool]:
    """Queue (repo, commit); returns (job id, created). An existing queued/running/done job for the same
    (repo, commit, base) is returned instead (created False) unless ``force``; a failed one is queued again.
    ``base``: a pull request's or branch's merge-base with its base branch; the job's commit is then judged
    against that commit's level, in a series of its own (``ci.verdict.apply.judge_run``), not along its own line.

    On a lake, one job per GPU model (``storage.lake_queue``); the id returned is this host's model's."""
    return db.queue.enqueue(repo, commit, branch=branch, trigger=trigger, force=force, gpu_model=gpu_model, base=base)


def queued_commits(db: Database, repo: str) -> set[str]:
    """Every commit that has a job for ``repo`` (any status, any GPU model): where a walk back from a pushed
    head whose old end is unknown stops (``ci.service.triggers.commits_between``)."""
    return db.queue.queued_commits(repo)


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
    return db.queue.claim_next(worker, gpu, job_id=job_id, gpu_model=gpu_model, owner=owner)


def heartbeat(db: Database, job_id: int, owner: str) -> bool:
    """Renew the lease of a running job; False when the job is no longer running under ``owner``."""
    return db.queue.heartbeat(job_id, owner)


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
    db.queue.finish(job_id, status=status, outcome=outcome, log=log, run_id=run_id, owner=owner)


def recover_stale(db: Database, *, gpu: str | None = None) -> list[int]:
    """Put running jobs (of ``gpu``, or all) whose owner is gone back to queued; returns their ids. A runner
    calls it when it starts; a job of a live owner (another runner measuring on this slot) is left alone."""
    return db.queue.recover_stale(gpu=gpu)


def slot_owner(db: Database, gpu: str) -> Job | None:
    """The running job of a live owner on this host's ``gpu`` slot, if any (what a starting runner must neither
    recover nor clean up after)."""
    return db.queue.slot_owner(gpu)


def link_run(db: Database, job_id: int, run_id: str) -> None:
    """Record ``run_id`` as the job's run (ingest does it on the file; a lake's queue is elsewhere)."""
    db.queue.link_run(job_id, run_id)


def requeue_for_judging(db: Database, job_id: int, run_id: str | None, note: str) -> bool:
    """Queue a failed job again, or a running one whose owner is gone, so a runner judges its stored run
    (``run_id``) without measuring it again; True when it was queued. A done job is left alone."""
    return db.queue.requeue_for_judging(job_id, run_id, note)


def get_job(db: Database, job_id: int) -> Job | None:
    return db.queue.get_job(job_id)


def list_jobs(db: Database, *, status: str | None = None, limit: int = 100) -> list[Job]:
    """Jobs, newest first (optionally of one status)."""
    if status is not None and status not in JOB_STATUSES:
        raise ValueError(f"list_jobs: status must be one of {JOB_STATUSES}, got {status!r}")
    return db.queue.list_jobs(status=status, limit=limit)


# ------------------------------------------------------------------------------------------------ watch state
def watch_last_seen(db: Database, repo: str, branch: str) -> str | None:
    """The last commit ``solci watch`` recorded for (repo, branch); None before the first poll."""
    return db.queue.watch_last_seen(repo, branch)


def set_watch_last_seen(db: Database, repo: str, branch: str, commit: str) -> None:
    db.queue.set_watch_last_seen(repo, branch, commit)
