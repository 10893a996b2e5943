"""Small git helpers for the runner, the executors and the triggers (plain ``git`` subprocesses)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

ZERO_SHA = "0" * 40
# Variables git sets inside hooks that would point a nested git call at the wrong repository.
_REPO_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_PREFIX",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_QUARANTINE_PATH",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)
_URL_RE = re.compile(r"^([a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)


class GitError(RuntimeError):
    """A git command failed, or a repository / commit could not be found; the message says which."""


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    return env


def git(*args: str, cwd: str | Path | None = None, check: bool = True, timeout: float = 300) -> str:
    """Run ``git ARGS`` (in ``cwd``) and return its stdout stripped; GitError with stderr on failure."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, env=git_env(), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise GitError("git is not installed (no `git` on PATH)") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args)}: no answer after {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitError(f"git {' '.join(args)}: {msg[-1] if msg else f'exit {proc.returncode}'}")
    return proc.stdout.strip()


def is_url(repo: str) -> bool:
    return bool(_URL_RE.match(repo)) and not Path(repo).exists()


def local_repo(path: str | Path) -> Path:
    """The git directory's owner: the top level of a working repository or a bare repository's own folder.

    GitError when ``path`` does not exist or is not a git repository.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise GitError(f"{p}: no such directory")
    if not p.is_dir():
        raise GitError(f"{p}: not a directory, so not a git repository")
    try:
        bare = git("rev-parse", "--is-bare-repository", cwd=p)
    except GitError:
        raise GitError(f"{p.resolve()}: not a git repository") from None
    if bare == "true":
        return Path(git("rev-parse", "--absolute-git-dir", cwd=p)).resolve()
    top = git("rev-parse", "--show-toplevel", cwd=p, check=False)
    if not top:
        raise GitError(f"{p.resolve()}: inside a .git folder, not a repository's working tree")
    return Path(top).resolve()


def canonical_repo(repo: str | Path) -> str:
    """The one spelling of a repository stored with jobs: an absolute path, or a URL as given."""
    text = str(repo)
    if is_url(text):
        return text.rstrip("/")
    return str(local_repo(text))


def is_bare(repo: str | Path) -> bool:
    return git("rev-parse", "--is-bare-repository", cwd=repo) == "true"


def cache_dir() -> Path:
    base = os.environ.get("SOLCI_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "solci"
    )
    return Path(base)


def mirror_of(url: str, *, fetch: bool = True) -> Path:
    """A bare mirror of a remote repository in the cache (cloned on first use, fetched when ``fetch``)."""
    dest = cache_dir() / "repos" / hashlib.sha256(url.encode()).hexdigest()[:16]
    if not (dest / "HEAD").exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        git("clone", "--mirror", "--quiet", url, str(dest), timeout=1800)
    elif fetch:
        git("fetch", "--quiet", "--prune", "origin", cwd=dest, timeout=1800)
    return dest


def checkout_source(repo: str, *, fetch: bool = False) -> Path:
    """A local repository holding ``repo``'s objects: the path itself, or the cache mirror of a URL."""
    return mirror_of(repo, fetch=fetch) if is_url(repo) else local_repo(repo)


def resolve_commit(repo: str | Path, rev: str) -> str:
    """The full sha of commit ``rev`` in the local repository ``repo``; GitError naming both if unknown."""
    out = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo, check=False)
    if not out:
        raise GitError(f"commit {rev!r} not found in {repo}")
    return out


def commit_exists(repo: str | Path, sha: str) -> bool:
    try:
        return (
            subprocess.run(
                ["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo, env=git_env(), capture_output=True
            ).returncode
            == 0
        )
    except OSError:
        return False


def branch_head(repo: str | Path, branch: str) -> str | None:
    """The commit ``refs/heads/BRANCH`` points at in a local repository (None when the branch is missing)."""
    out = git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", cwd=repo, check=False)
    return out or None


def remote_head(url: str, branch: str) -> str | None:
    """The commit ``branch`` points at on a remote (``git ls-remote``), None when it has no such branch."""
    out = git("ls-remote", "--heads", url, f"refs/heads/{branch}", timeout=120)
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        if ref == f"refs/heads/{branch}":
            return sha
    return None


def new_commits(repo: str | Path, old: str | None, new: str) -> list[str]:
    """Commits reachable from ``new`` but not from ``old``, oldest first; just ``[new]`` without ``old``."""
    if not old or old == ZERO_SHA or not commit_exists(repo, old):
        return [new]
    out = git("rev-list", "--reverse", "--topo-order", new, "--not", old, cwd=repo)
    return out.split()


def current_branch(repo: str | Path) -> str | None:
    out = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repo, check=False)
    return out or None


def branches_containing(repo: str | Path, sha: str) -> list[str]:
    out = git("for-each-ref", "--format=%(refname:short)", "--contains", sha, "refs/heads", cwd=repo, check=False)
    return out.split()


def first_parent_ancestry(repo: str | Path, sha: str, limit: int = 1000) -> list[str]:
    """``sha`` and its first-parent ancestors, newest first, at most ``limit`` (the series a commit is judged
    in follows this chain); [] when git cannot walk it."""
    out = git("rev-list", "--first-parent", f"--max-count={int(limit)}", sha, cwd=repo, check=False)
    return out.split()


def archive(source: str | Path, commit: str, *, prefix: str = "", timeout: float = 600) -> bytes:
    """The commit's tracked files as a tar (``git archive``, each name under ``prefix``): what both executors
    measure (a plain tree: no ``.git``, nothing that points back at the source repository); GitError when git
    cannot."""
    cmd = ["git", "archive", "--format=tar", *([f"--prefix={prefix}"] if prefix else []), commit]
    proc = subprocess.run(cmd, cwd=source, env=git_env(), capture_output=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise GitError(f"git archive {commit}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout
