"""No pushed commit is skipped or lost: rewritten or missing history, new branches, two spellings of one
repository, and a hook whose queueing failed (audit defects 1-4)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ci.gitutil import canonical_repo
from ci.triggers import poll
from storage.db import Database
from tests.repo_factory import PROJECT, git, git_env, small_repo
from tests.test_triggers import clone_and_remote, queued, solci

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


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(tmp_path / "history.duckdb", lock_timeout=20)


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
    Database(path).schema_version()
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
