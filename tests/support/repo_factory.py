"""Real git repositories for the runner / trigger / executor tests, made from this project's source.

``make_project_repo(path)`` copies kernel/, ci/, storage/, dashboard/, pyproject.toml, Dockerfile and docker/
into a fresh repository (branch main) and commits them. ``ProjectRepo`` then makes commits that change the
kernel's behaviour by appending a wrapper to the launcher module (so they work whatever the kernel's
internals): ``slow`` runs the kernel twice, ``wrong`` scales grad_weight by 1.5, ``broken`` is a syntax
error, ``neutral`` only adds a comment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support import PROJECT

SOURCES = ("kernel", "ci", "storage", "dashboard", "pyproject.toml", "Dockerfile", ".dockerignore", "docker")
LAUNCHER = "kernel/backward.py"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "solci test",
    "GIT_AUTHOR_EMAIL": "test@solci.invalid",
    "GIT_COMMITTER_NAME": "solci test",
    "GIT_COMMITTER_EMAIL": "test@solci.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}

SLOW = """

# --- test mutation: every call runs the kernel twice (about 2x slower) ---
_solci_test_orig = attn_output_proj_backward


def attn_output_proj_backward(*args, **kwargs):
    _solci_test_orig(*args, **kwargs)
    return _solci_test_orig(*args, **kwargs)
"""

WRONG = """

# --- test mutation: grad_weight scaled by 1.5 (fails the correctness check) ---
_solci_test_orig = attn_output_proj_backward


def attn_output_proj_backward(*args, **kwargs):
    ga, gw = _solci_test_orig(*args, **kwargs)
    gw.mul_(1.5)
    return ga, gw
"""

BROKEN = """

# --- test mutation: a syntax error (the module does not import) ---
def attn_output_proj_backward(:
"""


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    return env


def git(cwd: Path | str, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=git_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd}: {proc.stderr.strip()}")
    return proc.stdout.strip()


@dataclass
class ProjectRepo:
    path: Path

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def commit_file(self, rel: str, text: str, message: str, *, append: bool = True) -> str:
        f = self.path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text((f.read_text() if append and f.exists() else "") + text)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", message)
        return self.head()

    def neutral(self, n: int) -> str:
        return self.commit_file(LAUNCHER, f"\n# neutral change {n}\n", f"neutral {n}")

    def slow(self) -> str:
        return self.commit_file(LAUNCHER, SLOW, "slow: the kernel runs twice")

    def wrong(self) -> str:
        return self.commit_file(LAUNCHER, WRONG, "wrong: grad_weight x 1.5")

    def broken(self) -> str:
        return self.commit_file(LAUNCHER, BROKEN, "broken: syntax error")

    def mutate_from(self, base: str, text: str, message: str) -> str:
        """One commit whose tree is ``base``'s with ``text`` appended to the launcher (on top of HEAD)."""
        git(self.path, "read-tree", "-u", "--reset", base)
        return self.commit_file(LAUNCHER, text, message)

    def revert_to(self, sha: str, message: str) -> str:
        """A new commit whose tree is ``sha``'s (undo the mutations since)."""
        git(self.path, "read-tree", "-u", "--reset", sha)
        git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        return self.head()


def _ignore(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("__pycache__", ".pytest_cache") or n.endswith(".pyc")}


def make_project_repo(path: Path) -> ProjectRepo:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name in SOURCES:
        src = PROJECT / name
        if src.is_dir():
            shutil.copytree(src, path / name, ignore=_ignore)
        elif src.exists():
            shutil.copy2(src, path / name)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base: the project as it is")
    return ProjectRepo(path)


def make_bare(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "--bare", "-b", "main")
    return path


def small_repo(path: Path, n_commits: int = 1) -> ProjectRepo:
    """A tiny repository (one text file) for trigger tests that never measure."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    repo = ProjectRepo(path)
    for i in range(n_commits):
        repo.commit_file("notes.txt", f"line {i}\n", f"commit {i}")
    return repo
