"""What puts commits on the queue: polling a repository (``solci watch``) and explicit enqueueing.

``poll`` looks at one branch of a local repository (its ref, directly) or of a remote (``git ls-remote``,
then ``git fetch`` into a cached mirror when the head moved), and queues every commit that is new since the
last poll, oldest first: all the commits of a push, not only its head. The last seen head per (repo, branch)
is kept in the database (table ``watch_state``, ``storage.jobs.watch_last_seen``). The first poll of a branch
queues its head only (``backfill`` queues that many commits up to the head instead).

When a range's old end is unknown (a new branch pushed to a hooked repository; a last-seen head that a
force-push and gc removed), the commits are found by walking back from the new head to the commits already
queued for the repository (any job, any status), at most ``WALK_CAP`` of them; what a capped walk leaves out
is said (``PollResult.notes``, the hook's output), never dropped silently.

A ref update a hook could not queue (database locked, lake unreachable) is recorded in the repository's git
dir (``solci-pending``, one ``OLD NEW REF`` line each, ``queue_updates``); the next hook run and every
``poll`` of that repository retry those first and remove each one once queued.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.service.gitutil import (
    WALK_CAP,
    ZERO_SHA,
    CommitWalk,
    GitError,
    branch_head,
    branches_containing,
    canonical_repo,
    checkout_source,
    commit_exists,
    current_branch,
    git,
    is_url,
    local_repo,
    merge_base,
    mirror_of,
    new_commits,
    old_end_known,
    remote_head,
    resolve_commit,
    walk_back,
)
from storage.db import CatalogUnreachableError, DatabaseLockedError
from storage.jobs import enqueue, queued_commits, set_watch_last_seen, watch_last_seen

DEFAULT_MAX_COMMITS: int | None = None  # no cap: every commit of a push is queued


@dataclass
class Queued:
    job_id: int
    commit: str
    created: bool  # False: this (repo, commit, base) was already queued, running or done
    base: str | None = None  # a pull request's commit: the merge-base it is judged against
    base_of: str | None = None  # a merge-base queued for this pull request's commit

    def label(self, branch: str | None, base_ref: str | None) -> str:
        """How the commands name it: ``SHA (BRANCH)``, a pull request's ``SHA (BRANCH, judged against its
        merge-base MB)``, or its merge-base ``MB (the merge-base of SHA with REF, main's line)``."""
        if self.base_of:
            return f"{self.commit[:12]} (the merge-base of {self.base_of[:12]} with {base_ref}, main's line)"
        against = f", judged against its merge-base {self.base[:12]}" if self.base else ""
        return f"{self.commit[:12]} ({branch or 'no branch'}{against})"


@dataclass
class PollResult:
    repo: str
    branch: str
    head: str | None
    previous: str | None
    queued: list[Queued] = field(default_factory=list)
    skipped: int = 0  # new commits that were not queued (beyond max_commits, or beyond a walk's cap)
    notes: list[str] = field(default_factory=list)  # what was left out, retried or could not be retried

    @property
    def new(self) -> list[Queued]:
        return [q for q in self.queued if q.created]


def enqueue_commits(
    db: Any,
    repo: str,
    commits: list[str],
    *,
    branch: str | None,
    trigger: str,
    force: bool = False,
    bases: dict[str, str] | None = None,
    gpu_model: str | None = None,
) -> list[Queued]:
    """Queue each commit, oldest first. ``bases`` (``pull_request_bases``): a pull request's commits and their
    merge-bases; each merge-base is queued first as main's commit (not again when it was), then the commit is
    queued to be judged against it."""
    out = []
    for sha in commits:
        base = (bases or {}).get(sha)
        if base is not None:
            job_id, created = enqueue(db, repo, base, branch=None, trigger="base", gpu_model=gpu_model)
            out.append(Queued(job_id, base, created, base_of=sha))
        job_id, created = enqueue(
            db, repo, sha, branch=branch, trigger=trigger, force=force, gpu_model=gpu_model, base=base
        )
        out.append(Queued(job_id, sha, created, base=base))
    return out


def pull_request_bases(source: Path, commits: list[str], base_ref: str) -> dict[str, str]:
    """{commit: its merge-base with ``base_ref``} for the commits not on ``base_ref``'s line (a commit the base
    branch already holds is main's and judged along its own line). GitError for an unknown ``base_ref`` or a
    commit sharing no history with it."""
    base_sha = resolve_commit(source, base_ref)
    out = {}
    for sha in commits:
        mb = merge_base(source, sha, base_sha)
        if mb != sha:
            out[sha] = mb
    return out


def commits_between(
    db: Any, repo: str, source: str | Path, old: str | None, new: str, *, cap: int | None = WALK_CAP
) -> CommitWalk:
    """The commits of the update ``old`` -> ``new`` of ``repo`` (checked out at ``source``), oldest first:
    ``old..new``; when ``old`` is unknown (None, the zero sha of a new branch, missing after a rewrite), the walk
    back from ``new`` that stops at the commits already queued for ``repo``, at most ``cap`` (see its note)."""

    if old_end_known(source, old):
        return new_commits(source, old, new)
    return walk_back(source, new, stop=queued_commits(db, repo), cap=cap)


# ------------------------------------------------------------------------------------------------ pending
PENDING_FILE = "solci-pending"


@dataclass(frozen=True)
class RefUpdate:
    """One line of a post-receive hook's input (``OLD NEW REF``), or of the pending file."""

    old: str
    new: str
    ref: str

    @classmethod
    def parse(cls, line: str) -> RefUpdate | None:
        parts = line.split()
        return cls(*parts) if len(parts) == 3 else None

    @property
    def line(self) -> str:
        return f"{self.old} {self.new} {self.ref}"

    @property
    def branch(self) -> str | None:
        return self.ref.removeprefix("refs/heads/") if self.ref.startswith("refs/heads/") else None

    @property
    def wanted(self) -> bool:
        """A branch update that adds commits (tags and deletions are not queued; ``HEAD``: a detached commit)."""
        return self.new != ZERO_SHA and (self.branch is not None or self.ref == "HEAD")

    @property
    def range(self) -> str:
        return self.new if self.old == ZERO_SHA else f"{self.old}..{self.new}"


def pending_file(repo: str | Path) -> Path:
    """Where a hook records the updates of the local repository ``repo`` it could not queue (in its git dir)."""
    common = Path(git("rev-parse", "--git-common-dir", cwd=repo))
    return (common if common.is_absolute() else Path(repo) / common).resolve() / PENDING_FILE


def _read_pending(path: Path) -> list[RefUpdate]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [u for u in map(RefUpdate.parse, text.splitlines()) if u is not None]


@contextmanager
def _pending_lock(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold ``<pending>.lock`` (every writer of the pending file does); yields False when ``wait`` is off and
    another process holds it."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _write_pending(path: Path, updates: list[RefUpdate]) -> None:
    if not updates:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write("".join(u.line + "\n" for u in updates))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def record_pending(repo: str | Path, updates: list[RefUpdate]) -> Path:
    """Append ``updates`` to the repository's pending file (each once); returns the file's path."""
    path = pending_file(repo)
    with _pending_lock(path):
        have = _read_pending(path)
        _write_pending(path, have + [u for u in updates if u not in have])
    return path


def queue_updates(
    db: Any,
    repo: str | Path,
    updates: list[RefUpdate],
    *,
    trigger: str = "hook",
    echo: Callable[[str], None] | None = None,
    wait: bool = True,
) -> list[Queued]:
    """Queue the commits of ref updates of a local repository, first those its pending file holds (oldest
    first each, see ``commits_between``). An update that fails is recorded in the pending file and said, each
    one queued is removed from it; after a locked database or an unreachable lake the rest is recorded without
    trying. ``echo`` (default print) gets a line per commit and per failure. ``wait`` off (a poll): skip the
    pending file while another process works on it."""
    echo = echo or print
    source = local_repo(repo)
    path = pending_file(source)
    updates = [u for u in updates if u.wanted]
    with _pending_lock(path, wait=wait) as held:
        if not held:
            echo(f"{path}: another process is retrying it")
            return []
        pending = _read_pending(path)
        if pending:
            echo(f"retrying {len(pending)} update(s) recorded in {path}")
        todo = pending + [u for u in updates if u not in pending]
        queued, failed = _queue_each(db, str(source), source, todo, trigger, echo)
        _write_pending(path, failed)
        if failed:
            echo(f"{len(failed)} update(s) recorded in {path}: retried on the next push (or `solci watch`)")
    return queued


def _queue_each(
    db: Any,
    canon: str,
    source: Path,
    updates: list[RefUpdate],
    trigger: str,
    echo: Callable[[str], None],
) -> tuple[list[Queued], list[RefUpdate]]:

    queued: list[Queued] = []
    failed: list[RefUpdate] = []
    down: BaseException | None = None
    for u in updates:
        if down is not None:
            failed.append(u)
            echo(f"could not queue {u.range} ({u.ref}): {down}")
            continue
        if not commit_exists(source, u.new):
            echo(f"{u.range} ({u.ref}): commit {u.new} is no longer in {canon}; nothing to queue, dropped")
            continue
        try:
            walk = commits_between(db, canon, source, u.old, u.new)
            branch = u.branch or (guess_branch(source, u.new) if walk.commits else None)
            got = enqueue_commits(db, canon, walk.commits, branch=branch, trigger=trigger)
        except Exception as exc:
            failed.append(u)
            echo(f"could not queue {u.range} ({u.ref}): {exc}")
            if isinstance(exc, (DatabaseLockedError, CatalogUnreachableError)):
                down = exc
            continue
        for q in got:
            state = "queued" if q.created else "already queued or measured"
            echo(f"{q.commit[:12]} ({branch or 'no branch'}) {state}: job {q.job_id}")
        if not got:
            echo(f"{u.range} ({u.ref}): every commit is already queued")
        if walk.left_out:
            echo(walk.note(canon) or "")
        queued += got
    return queued, failed


# ------------------------------------------------------------------------------------------------ poll
def poll(
    db: Any,
    repo: str,
    branch: str = "main",
    *,
    backfill: int = 0,
    max_commits: int | None = DEFAULT_MAX_COMMITS,
    trigger: str = "watch",
    walk_cap: int | None = WALK_CAP,
    base: str | None = None,
) -> PollResult:
    """Queue the commits of ``branch`` that are new since the last poll (oldest first); remember the head.

    A local repository's pending file (updates a hook could not queue) is retried first; those jobs lead
    ``queued``. A last-seen head that is gone (force-push and gc) is walked back from (``commits_between``,
    at most ``walk_cap``; what it left out is in ``notes`` and ``skipped``). ``base`` (a ref of the same
    repository, e.g. main): the branch is a pull request's or a feature branch's, and each of its commits off
    ``base``'s line is judged against its merge-base with ``base`` (``pull_request_bases``), never along the
    branch's own line."""
    canon = canonical_repo(repo)

    retried: list[Queued] = []
    notes: list[str] = []
    if not is_url(canon) and pending_file(canon).exists():
        retried = queue_updates(db, canon, [], trigger="hook", echo=notes.append, wait=False)
    previous = watch_last_seen(db, canon, branch)
    if is_url(canon):
        head = remote_head(canon, branch)
        source = mirror_of(canon, fetch=head is not None and head != previous)
    else:
        source = Path(canon)
        head = branch_head(source, branch)
    if head is None:
        raise GitError(f"{canon}: no branch {branch!r}")
    result = PollResult(canon, branch, head, previous, queued=retried, notes=notes)
    if head == previous:
        return result
    if previous is None:
        count = max(1, backfill)
        commits = git("rev-list", "--reverse", "--first-parent", f"--max-count={count}", head, cwd=source).split()
    else:
        walk = commits_between(db, canon, source, previous, head, cap=walk_cap)
        commits = walk.commits
        if walk.left_out:
            result.skipped += walk.left_out
            result.notes.append(walk.note(canon) or "")
    if max_commits is not None and len(commits) > max_commits:
        result.skipped += len(commits) - max_commits
        result.notes.append(
            f"{len(commits) - max_commits} older new commit(s) of {branch} left out (--max-commits {max_commits}); "
            f"the oldest left out is {commits[0][:12]}"
        )
        commits = commits[-max_commits:]
    bases = pull_request_bases(source, commits, base) if base else None
    result.queued = retried + enqueue_commits(db, canon, commits, branch=branch, trigger=trigger, bases=bases)
    set_watch_last_seen(db, canon, branch, head)
    return result


def watch(
    db: Any,
    repo: str,
    branch: str = "main",
    *,
    interval: float = 60.0,
    stop: threading.Event | None = None,
    on_poll: Callable[[PollResult], None] | None = None,
    on_error: Callable[[Exception], None] | None = None,
    **poll_options: Any,
) -> None:
    """Poll every ``interval`` seconds until ``stop`` is set; ``on_poll`` runs after each poll (e.g. to run
    the queued jobs). Errors of one poll (network, lock) go to ``on_error`` and the loop goes on."""
    stop = stop or threading.Event()
    while not stop.is_set():
        try:
            result = poll(db, repo, branch, **poll_options)
            if on_poll:
                on_poll(result)
        except Exception as exc:
            if on_error is None:
                raise
            on_error(exc)
        stop.wait(interval)


def resolve_revisions(repo: str, revisions: list[str]) -> tuple[str, Path, list[str]]:
    """(canonical repo, local source, full shas) of revisions; ``A..B`` expands to its commits, oldest first.

    GitError naming the repository for an unknown revision or a path that is not a repository."""
    canon = canonical_repo(repo)
    source = checkout_source(canon, fetch=is_url(canon))
    shas: list[str] = []
    for rev in revisions:
        if ".." in rev:
            old, _, new = rev.partition("..")
            new_sha = resolve_commit(source, new or "HEAD")
            if old:
                shas += new_commits(source, resolve_commit(source, old), new_sha).commits
            else:  # ``..NEW``: just NEW
                shas.append(new_sha)
        else:
            shas.append(resolve_commit(source, rev))
    seen: set[str] = set()
    return canon, source, [s for s in shas if not (s in seen or seen.add(s))]


def guess_branch(source: Path, sha: str) -> str | None:
    """The branch to label a commit with: the checked-out branch if it holds the commit, else the first."""
    containing = branches_containing(source, sha)
    current = current_branch(source)
    if current and current in containing:
        return current
    for name in ("main", "master"):
        if name in containing:
            return name
    return containing[0] if containing else None
