"""Triggers: `solci watch` (local path and remote URL), git hooks, `solci enqueue`, and the CLI's errors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ci.service.gitutil import GitError, canonical_repo, first_parent_ancestry
from ci.service.triggers import poll
from storage.db import Database, open_database
from storage.ingest import ingest_result
from storage.jobs import list_jobs, watch_last_seen
from tests.support import PROJECT
from tests.support.factories import make_result
from tests.support.repo_factory import git, git_env, make_bare, small_repo

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = git_env()
    e.update(
        SOLCI_DB=str(tmp_path / "history.duckdb"),
        SOLCI_CACHE=str(tmp_path / "cache"),
        PYTHONPATH=str(PROJECT),
        SOLCI_LOCK_TIMEOUT="20",
    )
    return e


def solci(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ci.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def queued(db: Database) -> list[tuple[str, str | None, str]]:
    """(commit, branch, trigger) of every job, oldest first."""
    return [(j.commit, j.branch, j.trigger) for j in sorted(list_jobs(db, limit=1000), key=lambda j: j.id)]


def clone_and_remote(tmp_path: Path) -> tuple[Path, object]:
    remote = make_bare(tmp_path / "remote.git")
    work = small_repo(tmp_path / "work", n_commits=1)
    git(work.path, "remote", "add", "origin", str(remote))
    git(work.path, "push", "-q", "origin", "main")
    return remote, work


# ------------------------------------------------------------------------------------------------ watch
@pytest.mark.parametrize("as_url", [False, True], ids=["path", "file-url"])
def test_watch_once_queues_every_pushed_commit_in_order(tmp_path: Path, env: dict, db: Database, as_url: bool) -> None:
    remote, work = clone_and_remote(tmp_path)
    target = f"file://{remote}" if as_url else str(remote)
    first = solci(["watch", target, "--once", "--queue-only"], env, tmp_path)
    assert first.returncode == 0, first.stderr
    base = work.head()
    assert [c for c, _, _ in queued(db)] == [base]  # first sight: the head only

    pushed = [work.commit_file("notes.txt", f"more {i}\n", f"more {i}") for i in range(3)]
    git(work.path, "push", "-q", "origin", "main")
    second = solci(["watch", target, "--once", "--queue-only"], env, tmp_path)
    assert second.returncode == 0, second.stderr
    assert queued(db) == [(base, "main", "watch")] + [(sha, "main", "watch") for sha in pushed]
    assert watch_last_seen(db, canonical_repo(target), "main") == pushed[-1]

    third = solci(["watch", target, "--once", "--queue-only"], env, tmp_path)
    assert third.returncode == 0 and "no new commit" in third.stderr
    assert len(queued(db)) == 4


def test_poll_follows_a_force_push_and_backfills(tmp_path: Path, db: Database) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=4)
    res = poll(db, str(repo.path), "main", backfill=3)
    assert [q.commit for q in res.queued] == git(repo.path, "rev-list", "--reverse", "--max-count=3", "HEAD").split()
    git(repo.path, "reset", "-q", "--hard", "HEAD~2")
    new = [repo.commit_file("other.txt", f"{i}\n", f"rewrite {i}") for i in range(2)]
    res = poll(db, str(repo.path), "main")
    assert [q.commit for q in res.queued] == new
    assert poll(db, str(repo.path), "main").queued == []


def test_poll_errors(tmp_path: Path, db: Database) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    with pytest.raises(GitError, match="no branch 'nope'"):
        poll(db, str(repo.path), "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(GitError, match="not a git repository"):
        poll(db, str(tmp_path / "plain"), "main")


# ------------------------------------------------------------------------------------------------ hooks
def test_a_missing_repository_folder_is_named_not_called_a_missing_git(tmp_path: Path) -> None:
    """A repository path that does not exist made subprocess raise what a missing git raises: the error said "git
    is not installed" for a mistyped path."""
    with pytest.raises(GitError, match=r"no such folder .*nope") as err:
        first_parent_ancestry(tmp_path / "nope", "HEAD")
    assert "not installed" not in str(err.value)


def test_post_receive_hook_queues_each_push(tmp_path: Path, env: dict, db: Database) -> None:
    remote, work = clone_and_remote(tmp_path)
    res = solci(["hooks", "install", str(remote)], env, tmp_path)
    assert res.returncode == 0, res.stderr
    hook = remote / "hooks" / "post-receive"
    assert hook.exists() and os.access(hook, os.X_OK)
    assert sys.executable in hook.read_text()

    two = [work.commit_file("notes.txt", f"push1 {i}\n", f"push1 {i}") for i in range(2)]
    push = subprocess.run(
        ["git", "push", "origin", "main"], cwd=work.path, env=git_env(), capture_output=True, text=True
    )
    assert push.returncode == 0, push.stderr
    assert queued(db) == [(sha, "main", "hook") for sha in two]
    one = work.commit_file("notes.txt", "push2\n", "push2")
    git(work.path, "push", "-q", "origin", "main")
    git(work.path, "push", "-q", "origin", "main:feature")  # a new branch, every commit already queued
    assert queued(db) == [(sha, "main", "hook") for sha in [*two, one]]


def test_post_commit_hook_queues_each_commit(tmp_path: Path, env: dict, db: Database) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    hooks_dir = repo.path / ".git" / "hooks"
    hooks_dir.mkdir(exist_ok=True)
    marker = tmp_path / "foreign-hook-ran"
    (hooks_dir / "post-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (hooks_dir / "post-commit").chmod(0o755)
    for _ in range(2):  # installing twice replaces our hook, keeps the foreign one once
        res = solci(["hooks", "install", str(repo.path)], env, tmp_path)
        assert res.returncode == 0, res.stderr
    assert (hooks_dir / "post-commit.pre-solci").read_text().endswith(f"touch {marker}\n")

    sha = repo.commit_file("notes.txt", "hooked\n", "hooked")
    assert queued(db) == [(sha, "main", "hook")]
    assert marker.exists()

    res = solci(["hooks", "uninstall", str(repo.path)], env, tmp_path)
    assert res.returncode == 0
    assert (hooks_dir / "post-commit").read_text().endswith(f"touch {marker}\n")
    repo.commit_file("notes.txt", "not hooked\n", "not hooked")
    assert len(queued(db)) == 1


def test_hooks_install_prints_the_absolute_history_the_hook_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, item 6: `solci hooks install` printed a relative history path while the hook pins an absolute
    one; it prints the path the hook pins."""
    from ci.cli.main import main

    repo = small_repo(tmp_path / "repo", n_commits=1)
    monkeypatch.chdir(tmp_path)
    assert main(["hooks", "install", str(repo.path), "--db", "rel/history.duckdb"]) == 0
    out = capsys.readouterr().out
    pinned = (tmp_path / "rel" / "history.duckdb").resolve()
    assert out.rstrip().endswith(f"(queues into {pinned})"), out
    assert str(pinned) in (repo.path / ".git" / "hooks" / "post-commit").read_text()


def test_working_repository_hooks_queue_pulls_merges_and_rebases(tmp_path: Path, env: dict, db: Database) -> None:
    """Audit (stop 16): git runs no post-commit for a pull (fast-forward or not) or a clean merge, and a rebase's
    commits are made on a detached HEAD: pulled and merged commits were never queued, rebased ones had no branch.
    post-merge and post-rewrite queue them, with their branch."""
    up = small_repo(tmp_path / "up", n_commits=1)
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(up.path), str(work)], env=git_env(), check=True)
    res = solci(["hooks", "install", str(work)], env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert {p.name for p in (work / ".git" / "hooks").iterdir() if p.name.startswith("post-")} >= {
        "post-commit",
        "post-merge",
        "post-rewrite",
    }
    pulled = [up.commit_file("notes.txt", f"up {i}\n", f"up {i}") for i in range(2)]
    git(work, "pull", "-q", "--ff-only")
    assert queued(db) == [(sha, "main", "hook") for sha in pulled]
    git(work, "checkout", "-q", "-b", "side", "HEAD~1")
    (work / "side.txt").write_text("side\n")
    git(work, "add", "side.txt")
    git(work, "commit", "-q", "-m", "side")
    git(work, "rebase", "-q", "main")
    rebased = git(work, "rev-parse", "HEAD").strip()
    git(work, "checkout", "-q", "main")
    git(work, "merge", "-q", "--no-ff", "--no-edit", "side")
    merge = git(work, "rev-parse", "HEAD").strip()
    jobs = queued(db)
    assert (rebased, "side", "hook") in jobs and (merge, "main", "hook") in jobs
    assert all(branch is not None for _sha, branch, _t in jobs), jobs


# ------------------------------------------------------------------------------------------------ enqueue
def test_enqueue_ranges_and_dedup(tmp_path: Path, env: dict, db: Database) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=4)
    shas = git(repo.path, "rev-list", "--reverse", "HEAD").split()
    res = solci(["enqueue", str(repo.path), f"{shas[0]}..HEAD"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert [c for c, _, _ in queued(db)] == shas[1:]
    res = solci(["enqueue", str(repo.path), "HEAD", "--branch", "main"], env, tmp_path)
    assert "already queued" in res.stdout and len(queued(db)) == 3
    res = solci(["enqueue", str(repo.path), "HEAD", "--force"], env, tmp_path)
    assert len(queued(db)) == 4


# ------------------------------------------------------------------------------------------------ errors
def test_clear_errors(tmp_path: Path, env: dict) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    res = solci(["run", "--repo", str(repo.path), "--commit", "deadbeef", "--executor", "local"], env, tmp_path)
    assert res.returncode == 2 and "commit 'deadbeef' not found" in res.stderr
    (tmp_path / "plain").mkdir()
    res = solci(["enqueue", str(tmp_path / "plain"), "HEAD"], env, tmp_path)
    assert res.returncode == 2 and "not a git repository" in res.stderr
    res = solci(["hooks", "install", str(tmp_path / "missing")], env, tmp_path)
    assert res.returncode == 2 and "no such directory" in res.stderr
    res = solci(["sql", "DROP TABLE runs"], env, tmp_path)
    assert res.returncode == 2 and "read-only" in res.stderr

    bad = tmp_path / "corrupt.duckdb"
    bad.write_bytes(b"not a database" * 100)
    before = bad.read_bytes()
    res = solci(["jobs", "--db", str(bad)], env, tmp_path)
    assert res.returncode == 2 and "not a readable DuckDB database" in res.stderr
    assert bad.read_bytes() == before


def test_locked_database_is_reported(tmp_path: Path, env: dict) -> None:
    path = tmp_path / "locked.duckdb"
    with open_database(path).write():
        pass
    with held(path):
        res = solci(["jobs", "--db", str(path)], {**env, "SOLCI_LOCK_TIMEOUT": "1"}, tmp_path)
        assert res.returncode == 4 and "another process holds" in res.stderr, res.stderr  # infrastructure, not usage


def test_read_commands_print_tables(tmp_path: Path, env: dict, db: Database) -> None:
    ingest_result(db, make_result(commit="a" * 40, cases=["1,256"]))
    for args, expect in (
        (["history"], "B1_S256"),
        (["history", "--case", "1,256", "--limit", "5"], "aaaaaaaaaaaa"),
        (["flags"], "no changes detected"),
        (["records"], "published"),
        (["jobs"], "no jobs"),
        (["sql", "SELECT count(*) AS n FROM runs"], "n"),
    ):
        res = solci(args, env, tmp_path)
        assert res.returncode == 0, res.stderr
        assert expect in res.stdout, (args, res.stdout)


# ------------------------------------------------------------------------------------------------ nothing lost
# No pushed commit is skipped or lost: rewritten or missing history, new branches, two spellings of one
# repository, and a hook whose queueing failed (audit, stop 16).
def push(work_path: Path, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["git", "push", "origin", *args],
        cwd=work_path,
        env={**git_env(), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


@contextmanager
def held(path: Path) -> Iterator[None]:
    """Another process holds the DuckDB file (a long read or write of another solci process)."""
    open_database(path).schema_version()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------------------------------------ defect 1
def test_poll_after_force_push_and_gc_queues_every_rewritten_commit(tmp_path: Path, db: Database) -> None:
    remote, work = clone_and_remote(tmp_path)
    base = work.head()
    assert [q.commit for q in poll(db, str(remote), "main").queued] == [base]
    [work.commit_file("n.txt", f"{i}\n", f"old {i}") for i in range(2)]
    git(work.path, "push", "-q", "origin", "main")
    assert len(poll(db, str(remote), "main").queued) == 2
    git(work.path, "reset", "-q", "--hard", base)
    new = [work.commit_file("m.txt", f"{i}\n", f"new {i}") for i in range(3)]
    git(work.path, "push", "-q", "-f", "origin", "main")
    git(remote, "gc", "-q", "--prune=now")  # the last-seen head is gone, as on a server
    res = poll(db, str(remote), "main")
    assert [q.commit for q in res.queued] == new  # walked back to base, which was queued
    assert res.skipped == 0 and res.notes == []


def test_walk_back_cap_says_what_it_left_out(tmp_path: Path, db: Database) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    poll(db, str(repo.path), "main")
    git(repo.path, "commit", "-q", "--allow-empty", "-m", "gone")
    poll(db, str(repo.path), "main")
    git(repo.path, "reset", "-q", "--hard", "HEAD~1")
    git(repo.path, "reflog", "expire", "--expire=now", "--all")
    git(repo.path, "gc", "-q", "--prune=now")
    new = [repo.commit_file("m.txt", f"{i}\n", f"new {i}") for i in range(5)]
    res = poll(db, str(repo.path), "main", walk_cap=2)
    assert [q.commit for q in res.queued] == new[-2:]
    assert res.skipped == 3
    assert len(res.notes) == 1 and "3 older commit(s)" in res.notes[0] and new[2] in res.notes[0], res.notes


# ------------------------------------------------------------------------------------------------ defect 2
def test_post_receive_new_branch_queues_all_its_commits(tmp_path: Path, env: dict, db: Database) -> None:
    remote, work = clone_and_remote(tmp_path)
    assert solci(["hooks", "install", str(remote)], env, tmp_path).returncode == 0
    main = work.commit_file("notes.txt", "main\n", "main 1")
    push(work.path, "main")
    git(work.path, "checkout", "-q", "-b", "feature/x")
    feature = [work.commit_file("f.txt", f"{i}\n", f"f{i}") for i in range(1, 4)]
    push(work.path, "feature/x")
    assert queued(db) == [(main, "main", "hook")] + [(sha, "feature/x", "hook") for sha in feature]
    push(work.path, "feature/x:other")  # a new branch whose commits are all queued: nothing new
    assert len(queued(db)) == 4


# ------------------------------------------------------------------------------------------------ defect 3
def test_file_url_and_path_are_one_repository(tmp_path: Path, env: dict, db: Database) -> None:
    remote, work = clone_and_remote(tmp_path)
    base = work.head()
    assert canonical_repo(f"file://{remote}") == canonical_repo(str(remote)) == str(remote.resolve())
    assert canonical_repo(f"file://{remote}/") == str(remote.resolve())
    for url in ("https://github.com/o/r.git", "ssh://git@host/o/r.git", "git@github.com:o/r.git"):
        assert canonical_repo(url + "/") == url
    first = solci(["watch", f"file://{remote}", "--once", "--queue-only"], env, tmp_path)
    assert first.returncode == 0, first.stderr
    assert solci(["hooks", "install", str(remote)], env, tmp_path).returncode == 0
    c1 = work.commit_file("notes.txt", "c1\n", "c1")
    push(work.path, "main")
    second = solci(["watch", f"file://{remote}", "--once", "--queue-only"], env, tmp_path)
    assert second.returncode == 0, second.stderr
    assert "already queued" in second.stderr, second.stderr
    assert queued(db) == [(base, "main", "watch"), (c1, "main", "hook")]  # one job per commit


# ------------------------------------------------------------------------------------------------ defect 4
def test_post_receive_records_a_failed_range_and_the_next_push_queues_it(
    tmp_path: Path, env: dict, db: Database
) -> None:
    remote, work = clone_and_remote(tmp_path)
    assert solci(["hooks", "install", str(remote)], env, tmp_path).returncode == 0
    pending = remote / "solci-pending"
    with held(Path(env["SOLCI_DB"])):
        c1 = work.commit_file("notes.txt", "c1\n", "c1")
        res = push(work.path, "main", extra_env={"SOLCI_LOCK_TIMEOUT": "1"})
    assert "could not queue" in res.stderr and str(pending) in res.stderr, res.stderr
    assert pending.exists() and c1 in pending.read_text()
    assert queued(db) == []
    c2 = work.commit_file("notes.txt", "c2\n", "c2")
    push(work.path, "main")
    assert queued(db) == [(c1, "main", "hook"), (c2, "main", "hook")]
    assert not pending.exists()


def test_hook_whose_python_fails_still_records_the_range(tmp_path: Path, env: dict, db: Database) -> None:
    remote, work = clone_and_remote(tmp_path)
    assert solci(["hooks", "install", str(remote)], env, tmp_path).returncode == 0
    main = work.commit_file("notes.txt", "main\n", "main 1")
    push(work.path, "main")
    assert solci(["hooks", "install", str(remote), "--python", "/bin/false"], env, tmp_path).returncode == 0
    git(work.path, "checkout", "-q", "-b", "feature")
    lost = [work.commit_file("f.txt", f"{i}\n", f"f{i}") for i in range(2)]
    res = push(work.path, "feature")
    assert "could not queue" in res.stderr and "recorded in" in res.stderr, res.stderr
    assert (remote / "solci-pending").exists()
    assert solci(["hooks", "install", str(remote)], env, tmp_path).returncode == 0
    res = poll(db, str(remote), "main")  # `solci watch` of the repository retries what the hook recorded first
    assert [(q.commit, q.created) for q in res.queued] == [(lost[0], True), (lost[1], True), (main, False)]
    assert queued(db) == [(main, "main", "hook")] + [(sha, "feature", "hook") for sha in lost]
    assert not (remote / "solci-pending").exists()


def test_post_commit_records_a_failed_commit_and_the_next_commit_queues_it(
    tmp_path: Path, env: dict, db: Database
) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    assert solci(["hooks", "install", str(repo.path)], env, tmp_path).returncode == 0
    pending = repo.path / ".git" / "solci-pending"
    with held(Path(env["SOLCI_DB"])):
        proc = subprocess.run(
            ["git", "commit", "-q", "--allow-empty", "-m", "c1"],
            cwd=repo.path,
            env={**git_env(), **env, "SOLCI_LOCK_TIMEOUT": "1"},
            capture_output=True,
            text=True,
        )
    assert proc.returncode == 0 and "could not queue" in proc.stderr, proc.stderr
    c1 = repo.head()
    assert pending.exists() and c1 in pending.read_text()
    c2 = repo.commit_file("notes.txt", "c2\n", "c2")
    assert queued(db) == [(c1, "main", "hook"), (c2, "main", "hook")]
    assert not pending.exists()
