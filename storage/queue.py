"""The job queue's interface and what its two implementations share: jobs, owners, leases.

``Queue`` is what a history's queue does (``Database.queue``): ``storage.file_queue.FileQueue`` keeps it in the
history file's ``jobs`` table, ``storage.lake_queue.PgQueue`` in PostgreSQL tables next to a lake's catalog.
Callers use the functions of ``storage.jobs``, which check their arguments and hand over to ``db.queue``; the
semantics (statuses, outcomes, leases, recovery of jobs whose owner is gone) are described there.

Shared here: the ``Job`` record, the statuses and outcomes, the owner of a lease (``host:pid:start``) and
whether it is gone (``owner_gone``, ``stale_ids``), the leases this process holds now, ``LeaseLostError``.
"""

from __future__ import annotations

import os
import socket
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from storage.backend import StorageError

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
ACTIVE = ("queued", "running", "done")  # a (repo, commit) in one of these is not queued again

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
    base: str | None = None  # a pull request's or branch's job: the merge-base it is judged against (else main's line)


JOB_FIELDS = tuple(f.name for f in fields(Job))
JOB_COLUMNS = ", ".join(f'"{f}"' for f in JOB_FIELDS)  # the SELECT list of a Job, in its fields' order


def job_of(row: tuple | None) -> Job | None:
    """The Job of a row of ``JOB_COLUMNS`` (None for None)."""
    return Job(*row) if row else None


class LeaseLostError(StorageError):
    """The job is no longer running under the lease that measured it (another runner took it over): the
    outcome was not recorded, so the new owner's stands."""


def lease_lost_message(job_id: int, owner: str | None, status: str, holder: str | None) -> str:
    """Why a runner's outcome of ``job_id`` was not recorded (its lease ``owner`` is no longer the job's)."""
    return (
        f"job {job_id}: its outcome was not recorded: the job is {status} under lease {holder or 'none'}, "
        f"not {owner} (another runner took it over after this one's heartbeats stopped); that runner's "
        "outcome stands"
    )


def note_line(now: datetime, text: str) -> str:
    """A line appended to a job's log: ``[time] text``."""
    return f"[{now.isoformat(timespec='seconds')}] {text}\n"


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


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


def local_gpu_model() -> str | None:
    """This host's GPU model for the lake's queue when the caller gave none: ``$SOLCI_GPU_MODEL``, else None (a
    job without a model, which the first runner to claim it adopts). Storage detects no hardware: the runner
    (``ci.service.fleet.detect_gpu_model``) passes its model."""
    return os.environ.get(GPU_MODEL_ENV) or None


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
    """Whether a running job's owner is gone (see ``storage.jobs``). ``held``: this process holds its lease;
    ``include_own=False``: never count a job of this process as gone (what claims use)."""
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


# Leases this process holds now: (history key, job id) -> owner. A job claimed by this process that is not in
# here has no runner processing it.
_HELD: dict[tuple[str, int], str] = {}
_HELD_GUARD = threading.Lock()


def hold_lease(db: Any, job_id: int, owner: str) -> None:
    """Record that a runner of this process now processes ``job_id`` under ``owner`` (``storage.jobs.hold``)."""
    with _HELD_GUARD:
        _HELD[(db._key, int(job_id))] = owner


def release_lease(db: Any, job_id: int) -> None:
    with _HELD_GUARD:
        _HELD.pop((db._key, int(job_id)), None)


def lease_held(db: Any, job_id: int) -> bool:
    """Whether a runner of this process holds the lease of ``job_id`` now."""
    with _HELD_GUARD:
        return (db._key, int(job_id)) in _HELD


def stale_ids(db: Any, rows: list[tuple], now: datetime, *, include_own: bool) -> list[int]:
    """Of (id, lease_owner, heartbeat_at, started_at) rows of running jobs, those whose owner is gone."""
    timeout = lease_timeout_s()
    return [
        int(r[0])
        for r in rows
        if owner_gone(r[1], r[2], r[3], now, lease_timeout=timeout, held=lease_held(db, r[0]), include_own=include_own)
    ]


# ------------------------------------------------------------------------------------------------ the interface
class Queue(ABC):
    """A history's job queue. The arguments are checked by ``storage.jobs``, whose functions document them."""

    def __init__(self, db: Any) -> None:
        self.db = db

    @abstractmethod
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
        """Queue (repo, commit, base): (job id, created)."""

    @abstractmethod
    def queued_commits(self, repo: str) -> set[str]:
        """Every commit that has a job for ``repo``."""

    @abstractmethod
    def claim_next(
        self, worker: str, gpu: str, *, job_id: int | None, gpu_model: str | None, owner: str | None
    ) -> Job | None:
        """Move the oldest queued job (or ``job_id``) to running on ``gpu``, leased to ``owner``."""

    @abstractmethod
    def heartbeat(self, job_id: int, owner: str) -> bool:
        """Renew a running job's lease; False when it no longer runs under ``owner``."""

    @abstractmethod
    def finish(
        self, job_id: int, *, status: str, outcome: str, log: str, run_id: str | None, owner: str | None
    ) -> None:
        """Close a job (only under ``owner``'s lease when given, else ``LeaseLostError``)."""

    @abstractmethod
    def recover_stale(self, *, gpu: str | None) -> list[int]:
        """Put running jobs whose owner is gone back to queued; their ids."""

    @abstractmethod
    def slot_owner(self, gpu: str) -> Job | None:
        """The running job of a live owner on this host's ``gpu`` slot."""

    @abstractmethod
    def link_run(self, job_id: int, run_id: str) -> None:
        """Record ``run_id`` as the job's run (when it has none)."""

    @abstractmethod
    def requeue_for_judging(self, job_id: int, run_id: str | None, note: str) -> bool:
        """Queue a failed job (or one whose owner is gone) again to judge its stored run."""

    @abstractmethod
    def get_job(self, job_id: int) -> Job | None:
        """One job."""

    @abstractmethod
    def list_jobs(self, *, status: str | None, limit: int) -> list[Job]:
        """Jobs, newest first."""

    @abstractmethod
    def watch_last_seen(self, repo: str, branch: str) -> str | None:
        """The last commit ``solci watch`` recorded for (repo, branch)."""

    @abstractmethod
    def set_watch_last_seen(self, repo: str, branch: str, commit: str) -> None:
        """Record the last commit ``solci watch`` saw for (repo, branch)."""
