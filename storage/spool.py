"""The spool: a finished result is on local disk before it is ingested, so nothing measured is ever lost.

A runner writes each result document it is about to ingest into this host's spool folder (``$SOLCI_SPOOL``, else
``~/.cache/solci/spool/<hash of the database's spec>/``), atomically: a temporary file, fsync, rename, fsync of
the folder. After a successful ingest the file is removed. When the ingest fails (the history file locked, the
disk full, the lake's catalog unreachable) the file stays, the job's outcome is ``infra_error`` (exit 4), and
the next ``flush`` (the runner calls it when it starts and before each job; ``solci spool flush`` by hand)
ingests it: idempotent, since ingest is keyed by run_id, so a file ingested twice stores one run. A flushed
measurement is linked to its job and the job is queued again (``storage.jobs.requeue_for_judging``), so a
runner judges the stored run instead of measuring the commit again.

``store`` is the one way a result goes in, for the runner (its measurement and each confirmation run) and for
``flush``: spool, ingest, link the run to its job, unspool; a document that fails validation is stored as a
rejected run instead (never an exception) and its file set aside in ``rejected/``.

A reader never makes the runner give up at once: when the history is locked (a long ``solci sql`` read, which its
``--timeout`` bounds), the runner's ``store`` keeps the file in the spool and tries again from it, with backoff,
for up to its patience (``patiently``; ``$SOLCI_STORE_PATIENCE``, 300 s), before the job ends ``infra_error``.
The runner waits out its judging and the record of the job's outcome the same way.

A file holds ``{"format": 1, "spooled_at", "job_id", "purpose", "parent", "ingest": {...}, "doc": {...}}``
(``ingest``: further keyword arguments of ``storage.ingest.ingest_result``). A document that fails validation
can never be ingested: it is stored as a rejected run and the file moves to ``rejected/`` (the newest
KEEP_REJECTED are kept there).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from storage import jobs
from storage.backend import DatabaseLockedError, StorageError
from storage.ingest import ingest_result, reject
from storage.result import SchemaError

SPOOL_ENV = "SOLCI_SPOOL"
FORMAT = 1
KEEP_REJECTED = 32  # files of rejected documents kept in rejected/ (a hostile commit can forge many)


# What a write waits out: another process holds the history (a reader of the file, a lake's lock). An unreachable
# catalog is not waited for here: the job ends infra_error and the next look at the queue stores the result.
WAIT_ERRORS: tuple[type[Exception], ...] = (DatabaseLockedError,)
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 10.0  # the backoff of ``patiently``: the first pause, doubling up to the last
_T = TypeVar("_T")


def history_key(db: Any) -> str:
    """A short name of the history ``db`` is (a hash of the lake's spec, or of the file's resolved path): what
    keys this host's folders of one history (the spool, a runner's work folders), so that two checkouts or two
    histories on one host never share one."""
    url = db.url if getattr(db, "backend", "file") == "lake" else str(Path(db.path).expanduser().resolve())
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def spool_dir(db: Any) -> Path:
    """This host's spool folder for ``db`` ($SOLCI_SPOOL, else one folder per database under ~/.cache)."""
    env = os.environ.get(SPOOL_ENV)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/solci/spool").expanduser() / history_key(db)


def patiently(
    action: Callable[[], _T],
    *,
    patience_s: float,
    on_wait: Callable[[BaseException], None] | None = None,
) -> _T:
    """``action()``; while it raises one of ``WAIT_ERRORS`` (the history locked by another process), try again
    with backoff (``RETRY_FIRST_S`` doubling up to ``RETRY_MAX_S``) for up to ``patience_s`` seconds from the
    first failure, then raise the last error. ``on_wait`` is called once, at the first failure, when there is
    patience to spend. Any other error is raised at once, and so is one an inner ``patiently`` already waited
    out (a confirmation run's store inside judging is not waited for twice)."""
    deadline: float | None = None
    delay = RETRY_FIRST_S
    while True:
        try:
            return action()
        except WAIT_ERRORS as exc:
            if getattr(exc, "patience_spent", False):
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + max(0.0, patience_s)
                if patience_s > 0 and on_wait is not None:
                    on_wait(exc)
            if now >= deadline:
                exc.patience_spent = True  # type: ignore[attr-defined]
                raise
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, RETRY_MAX_S)


@dataclass
class Spooled:
    path: Path
    doc: dict
    job_id: int | None
    purpose: str
    parent: str | None
    spooled_at: str
    ingest: dict = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return str(self.doc.get("run_id"))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save(
    db: Any,
    doc: dict,
    *,
    job_id: int | None = None,
    purpose: str = "measure",
    parent: str | None = None,
    **ingest: Any,
) -> Path:
    """Write ``doc`` (and how to ingest it) into the spool, durably; returns its file. Raises OSError (e.g.
    ENOSPC) when it cannot: the caller must then treat the result as not kept."""
    folder = spool_dir(db)
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "format": FORMAT,
        "spooled_at": datetime.now(UTC).isoformat(timespec="microseconds"),
        "job_id": job_id,
        "purpose": purpose,
        "parent": parent,
        "ingest": ingest,
        "doc": doc,
    }
    name = f"{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{_safe(str(doc.get('run_id', 'run')))}.json"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, default=str)
            f.flush()
            os.fsync(f.fileno())
        final = folder / name
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(folder)
    return final


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:64] or "run"


def remove(path: Path) -> None:
    try:
        Path(path).unlink()
    except FileNotFoundError:
        pass
    _fsync_dir(Path(path).parent)


def pending(db: Any) -> list[Spooled]:
    """The spooled results not yet ingested, oldest first (unreadable files are skipped)."""
    folder = spool_dir(db)
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
            out.append(
                Spooled(
                    path=path,
                    doc=rec["doc"],
                    job_id=rec.get("job_id"),
                    purpose=rec.get("purpose") or "measure",
                    parent=rec.get("parent"),
                    spooled_at=rec.get("spooled_at") or "",
                    ingest=dict(rec.get("ingest") or {}),
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


@dataclass
class Stored:
    """What ``store`` did with a document: stored now (``new``), stored before, or rejected (``rejected``:
    why validation refused it; it is then a rejected run, never figures)."""

    run_id: str
    new: bool = False
    rejected: str | None = None
    requeued: bool = False  # a flushed measurement's job, queued again to judge its run


def store(
    db: Any,
    doc: dict,
    *,
    job_id: int | None = None,
    purpose: str = "measure",
    parent: str | None = None,
    spooled: Path | None = None,
    patience_s: float = 0.0,
    on_wait: Callable[[BaseException], None] | None = None,
    **ingest: Any,
) -> Stored:
    """Spool ``doc`` (unless it is already, at ``spooled``), ingest it, link its run to ``job_id`` (a
    ``measure`` run; one from the spool also queues its job again, to be judged), remove the spool file. A
    document that fails validation (``SchemaError``, including a
    ``RejectedResult``) is stored as a rejected run and its file set aside: returned with the reason, never
    raised. While the history is locked by another process, the spooled file is stored again with backoff for up to
    ``patience_s`` seconds (``patiently``; ``on_wait`` says so once), never spooled or measured again. Raises
    what the history raised (locked, full, unreachable: ``StorageError``, ``OSError``); the spool file then
    stays for ``flush``."""
    path = spooled or save(db, doc, job_id=job_id, purpose=purpose, parent=parent, **ingest)
    return patiently(
        lambda: _store_spooled(
            db, doc, path, job_id=job_id, purpose=purpose, parent=parent, flushed=spooled is not None, **ingest
        ),
        patience_s=patience_s,
        on_wait=on_wait,
    )


def _store_spooled(
    db: Any,
    doc: dict,
    path: Path,
    *,
    job_id: int | None,
    purpose: str,
    parent: str | None,
    flushed: bool,
    **ingest: Any,
) -> Stored:
    """One attempt of ``store`` at the spooled file ``path`` (``flushed``: an earlier attempt's file)."""
    run_id = str(doc.get("run_id")) if isinstance(doc, dict) else "?"
    try:
        new = ingest_result(db, doc, job_id=job_id, purpose=purpose, parent=parent, **ingest)
    except SchemaError as exc:  # never storable: nothing to retry
        reject(db, doc, str(exc), job_id=job_id)
        _set_aside(path)
        return Stored(run_id, rejected=str(exc))
    requeued = False
    if job_id is not None and purpose == "measure":
        jobs.link_run(db, job_id, run_id)  # ingest links a new run on the file; a lake's queue is elsewhere
        if flushed:  # an earlier attempt's result: its job is judged, not measured again
            note = f"spool: run {run_id} uploaded from the spool; to be judged"
            requeued = jobs.requeue_for_judging(db, job_id, run_id, note)
    remove(path)
    return Stored(run_id, new=new, requeued=requeued)


def _set_aside(path: Path) -> None:
    """Move a spool file whose document can never be stored into ``rejected/`` (the newest KEEP_REJECTED)."""
    target = path.parent / "rejected"
    target.mkdir(exist_ok=True)
    os.replace(path, target / path.name)
    _fsync_dir(path.parent)
    for old in sorted(target.glob("*.json"))[:-KEEP_REJECTED]:  # names start with the time they were spooled
        with contextlib.suppress(OSError):
            old.unlink()


@dataclass
class FlushReport:
    ingested: list[str] = field(default_factory=list)  # run ids stored now
    already: list[str] = field(default_factory=list)  # run ids that were stored before (files removed)
    requeued: list[int] = field(default_factory=list)  # jobs queued again to judge their stored run
    rejected: list[str] = field(default_factory=list)  # documents that can never be ingested
    left: int = 0  # files still waiting (the history could not be written)
    error: str | None = None

    @property
    def did_something(self) -> bool:
        return bool(self.ingested or self.already or self.requeued or self.rejected)


def flush(db: Any, *, echo: Callable[[str], None] | None = None) -> FlushReport:
    """Ingest every pending spooled result, oldest first (``store``); stop at the first failure of the history
    (locked, full, unreachable), leaving that file and the later ones for the next flush."""
    say = echo or (lambda _m: None)
    report = FlushReport()
    items = pending(db)
    for i, item in enumerate(items):
        try:
            kept = store(
                db,
                item.doc,
                job_id=item.job_id,
                purpose=item.purpose,
                parent=item.parent,
                spooled=item.path,
                **item.ingest,
            )
            if kept.rejected is not None:
                report.rejected.append(item.run_id)
                say(f"spool: {item.path.name} can never be stored ({kept.rejected}); moved to rejected/")
                continue
            (report.ingested if kept.new else report.already).append(item.run_id)
            if kept.requeued:
                report.requeued.append(item.job_id)
            say(f"spool: uploaded run {item.run_id}" + (f" of job {item.job_id}" if item.job_id else ""))
        except (StorageError, OSError) as exc:
            report.left = len(items) - i
            report.error = f"{exc.__class__.__name__}: {exc}"
            say(f"spool: {report.left} result(s) kept for later: {report.error[:300]}")
            break
    return report
