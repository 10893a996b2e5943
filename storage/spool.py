"""The spool: a finished result is on local disk before it is ingested, so nothing measured is ever lost.

A runner writes each result document it is about to ingest into this host's spool folder (``$SOLCI_SPOOL``, else
``~/.cache/solci/spool/<hash of the database's spec>/``), atomically: a temporary file, fsync, rename, fsync of
the folder. After a successful ingest the file is removed. When the ingest fails (the history file locked, the
disk full, the lake's catalog unreachable) the file stays, the job's outcome is ``infra_error`` (exit 4), and
the next ``flush`` (the runner calls it when it starts and before each job; ``solci spool flush`` by hand)
ingests it: idempotent, since ingest is keyed by run_id, so a file ingested twice stores one run. A flushed
measurement is linked to its job and the job is queued again (``storage.jobs.requeue_for_judging``), so a
runner judges the stored run instead of measuring the commit again.

A file holds ``{"format": 1, "spooled_at", "job_id", "purpose", "parent", "ingest": {...}, "doc": {...}}``
(``ingest``: further keyword arguments of ``storage.ingest.ingest_result``). A document that fails validation
can never be ingested: ``flush`` stores it as a rejected run and moves the file to ``rejected/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SPOOL_ENV = "SOLCI_SPOOL"
FORMAT = 1


def spool_dir(db: Any) -> Path:
    """This host's spool folder for ``db`` ($SOLCI_SPOOL, else one folder per database under ~/.cache)."""
    env = os.environ.get(SPOOL_ENV)
    if env:
        return Path(env).expanduser()
    url = db.url if getattr(db, "backend", "file") == "lake" else str(Path(db.path).expanduser().resolve())
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return Path("~/.cache/solci/spool").expanduser() / digest


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
    """Ingest every pending spooled result, oldest first; stop at the first failure of the history (locked,
    full, unreachable), leaving that file and the later ones for the next flush."""
    from storage import jobs
    from storage.db import StorageError
    from storage.ingest import ingest_result
    from storage.result import SchemaError

    say = echo or (lambda _m: None)
    report = FlushReport()
    items = pending(db)
    for i, item in enumerate(items):
        try:
            try:
                stored = ingest_result(
                    db, item.doc, job_id=item.job_id, purpose=item.purpose, parent=item.parent, **item.ingest
                )
            except SchemaError as exc:
                _reject(db, item, str(exc))
                report.rejected.append(item.run_id)
                say(f"spool: {item.path.name} can never be stored ({exc}); moved to rejected/")
                continue
            (report.ingested if stored else report.already).append(item.run_id)
            if item.job_id is not None and item.purpose == "measure":
                jobs.link_run(db, item.job_id, item.run_id)
                if jobs.requeue_for_judging(
                    db, item.job_id, item.run_id, f"spool: run {item.run_id} uploaded from the spool; to be judged"
                ):
                    report.requeued.append(item.job_id)
            remove(item.path)
            say(f"spool: uploaded run {item.run_id}" + (f" of job {item.job_id}" if item.job_id else ""))
        except (StorageError, OSError) as exc:
            report.left = len(items) - i
            report.error = f"{exc.__class__.__name__}: {exc}"
            say(f"spool: {report.left} result(s) kept for later: {report.error[:300]}")
            break
    return report


def _reject(db: Any, item: Spooled, reason: str) -> None:
    from storage.ingest import reject

    reject(db, item.doc, reason, job_id=item.job_id)
    target = item.path.parent / "rejected"
    target.mkdir(exist_ok=True)
    os.replace(item.path, target / item.path.name)
