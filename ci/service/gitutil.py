"""Small git helpers for the runner, the executors and the triggers (plain ``git`` subprocesses)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

ZERO_SHA = "0" * 40
WALK_CAP = 200  # at most this many commits when a range's old end is unknown (walk_back)
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


def git(
    *args: str, cwd: str | Path | None = None, check: bool = True, timeout: float = 300, input: str | None = None
) -> str:
    """Run ``git ARGS`` (in ``cwd``, ``input`` on its stdin) and return its stdout stripped; GitError with stderr
    on failure."""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env=git_env(), input=input, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError:
        if cwd is not None and not Path(cwd).is_dir():  # subprocess says the same for a missing cwd
            raise GitError(f"git {' '.join(args)}: no such folder {cwd}") from None
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


def file_url_path(url: str) -> str | None:
    """The local path a ``file://`` URL names (``file:///srv/r.git``, ``file://localhost/srv/r.git``); None for
    any other URL (a ``file://`` URL of another host included)."""
    if not url.lower().startswith("file://"):
        return None
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost") or not parts.path:
        return None
    return unquote(parts.path)


def canonical_repo(repo: str | Path) -> str:
    """The one spelling of a repository stored with jobs: an absolute path (a ``file://`` URL becomes its path,
    so both spellings are one repository), or a remote URL (https, ssh, ``git@host:``) as given."""
    text = str(repo)
    if is_url(text):
        path = file_url_path(text)
        if path is None:
            return text.rstrip("/")
        text = path
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


def merge_base(repo: str | Path, a: str, b: str) -> str:
    """The best common ancestor of commits ``a`` and ``b`` (``git merge-base``); GitError when they share none."""
    out = git("merge-base", a, b, cwd=repo, check=False)
    if not out:
        raise GitError(f"{a[:12]} and {b[:12]} have no common ancestor in {repo}")
    return out.split()[0]


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


@dataclass
class CommitWalk:
    """Commits to queue, oldest first, and what a capped walk left out (never silently: see ``note``)."""

    commits: list[str]
    left_out: int = 0  # older commits of the walk beyond the cap, not in ``commits``
    newest_left_out: str | None = None
    cap: int | None = None

    def note(self, repo: str) -> str | None:
        """One line saying what was left out and how to queue it; None when nothing was."""
        if not self.left_out:
            return None
        return (
            f"{self.left_out} older commit(s) of {repo} not queued: walking back from the new head found more "
            f"than {self.cap} commits not queued yet; the newest left out is {self.newest_left_out} "
            f"(`solci enqueue {repo} {self.newest_left_out}` queues it, a range OLD..{self.newest_left_out} more)"
        )


def old_end_known(repo: str | Path, old: str | None) -> bool:
    """Whether ``old`` is a commit of ``repo`` a range can start from (not None, not the zero sha of a new
    branch, not missing after a rewrite and gc)."""
    return bool(old) and old != ZERO_SHA and commit_exists(repo, old)


def walk_back(repo: str | Path, new: str, *, stop: Iterable[str] = (), cap: int | None = WALK_CAP) -> CommitWalk:
    """``new`` and its ancestors, oldest first (``git rev-list --topo-order --reverse``), stopping at the
    commits in ``stop`` (left out with their ancestors; those not in ``repo`` are ignored): what to queue when
    a range's old end is unknown. At most ``cap`` commits, the newest; the rest is counted in ``left_out``."""
    args = ["rev-list", "--topo-order", "--ignore-missing", "--stdin", new]
    stdin = "".join(f"^{sha}\n" for sha in stop)
    if cap is None:
        return CommitWalk(git(*args, "--reverse", cwd=repo, input=stdin).split())
    newest_first = git(*args, f"--max-count={int(cap) + 1}", cwd=repo, input=stdin).split()
    if len(newest_first) <= cap:
        return CommitWalk(newest_first[::-1], cap=cap)
    total = int(git(*args, "--count", cwd=repo, input=stdin) or 0)
    return CommitWalk(newest_first[:cap][::-1], total - cap, newest_first[cap], cap)


def new_commits(
    repo: str | Path, old: str | None, new: str, *, stop: Iterable[str] = (), cap: int | None = WALK_CAP
) -> CommitWalk:
    """Commits reachable from ``new`` but not from ``old``, oldest first. When ``old`` is unknown (a new
    branch, rewritten or missing history: ``old_end_known``), ``walk_back`` from ``new`` to the commits in
    ``stop`` (those already queued), at most ``cap``."""
    if not old_end_known(repo, old):
        return walk_back(repo, new, stop=stop, cap=cap)
    out = git("rev-list", "--reverse", "--topo-order", new, "--not", old, cwd=repo)
    return CommitWalk(out.split())


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
