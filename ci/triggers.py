"""What puts commits on the queue: polling a repository (``solci watch``) and explicit enqueueing.

``poll`` looks at one branch of a local repository (its ref, directly) or of a remote (``git ls-remote``,
then ``git fetch`` into a cached mirror when the head moved), and queues every commit that is new since the
last poll, oldest first: all the commits of a push, not only its head. The last seen head per (repo, branch)
is kept in the database (table ``watch_state``, ``storage.jobs.watch_last_seen``). The first poll of a branch
queues its head only (``backfill`` queues that many commits up to the head instead).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.gitutil import (
    GitError,
    branch_head,
    branches_containing,
    canonical_repo,
    checkout_source,
    current_branch,
    git,
    is_url,
    mirror_of,
    new_commits,
    remote_head,
    resolve_commit,
)

DEFAULT_MAX_COMMITS: int | None = None  # no cap: every commit of a push is queued


@dataclass
class Queued:
    job_id: int
    commit: str
    created: bool  # False: this (repo, commit) was already queued, running or done


@dataclass
class PollResult:
    repo: str
    branch: str
    head: str | None
    previous: str | None
    queued: list[Queued] = field(default_factory=list)
    skipped: int = 0  # commits beyond max_commits that were not queued

    @property
    def new(self) -> list[Queued]:
        return [q for q in self.queued if q.created]


def enqueue_commits(
    db: Any, repo: str, commits: list[str], *, branch: str | None, trigger: str, force: bool = False
) -> list[Queued]:
    from storage.jobs import enqueue

    out = []
    for sha in commits:
        job_id, created = enqueue(db, repo, sha, branch=branch, trigger=trigger, force=force)
        out.append(Queued(job_id, sha, created))
    return out


def poll(
    db: Any,
    repo: str,
    branch: str = "main",
    *,
    backfill: int = 0,
    max_commits: int | None = DEFAULT_MAX_COMMITS,
    trigger: str = "watch",
) -> PollResult:
    """Queue the commits of ``branch`` that are new since the last poll (oldest first); remember the head."""
    canon = canonical_repo(repo)
    from storage.jobs import set_watch_last_seen, watch_last_seen

    previous = watch_last_seen(db, canon, branch)
    if is_url(canon):
        head = remote_head(canon, branch)
        source = mirror_of(canon, fetch=head is not None and head != previous)
    else:
        source = Path(canon)
        head = branch_head(source, branch)
    if head is None:
        raise GitError(f"{canon}: no branch {branch!r}")
    result = PollResult(canon, branch, head, previous)
    if head == previous:
        return result
    if previous is None:
        count = max(1, backfill)
        commits = git("rev-list", "--reverse", "--first-parent", f"--max-count={count}", head, cwd=source).split()
    else:
        commits = new_commits(source, previous, head)
    if max_commits is not None and len(commits) > max_commits:
        result.skipped = len(commits) - max_commits
        commits = commits[-max_commits:]
    result.queued = enqueue_commits(db, canon, commits, branch=branch, trigger=trigger)
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
            old_sha = resolve_commit(source, old) if old else None
            shas += new_commits(source, old_sha, new_sha)
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
