"""Git hooks that queue commits the moment they arrive (``solci hooks install REPO``).

- a bare repository gets ``post-receive``: every pushed branch update ``OLD..NEW`` is queued, oldest first
  (a new branch: its head);
- a working repository gets ``post-commit``: the new HEAD is queued.

The hook calls this installation's Python by absolute path (``python -P -m ci.cli enqueue``, with
``PYTHONPATH`` set to this checkout and ``SOLCI_DB`` to the database's absolute path, for that call only),
so it works from any shell and never imports the hooked repository's own code. A hook that was already there is kept as
``<hook>.pre-solci`` and still runs after ours. Hooks are marked, so installing again replaces ours only.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

from ci.gitutil import git, is_bare, local_repo

MARKER = "# solci-hook"
CHAINED_SUFFIX = ".pre-solci"
ZERO = "0" * 40

_HEADER = """#!/bin/sh
{marker}: queues commits for measurement (installed by `solci hooks install`; undo: `solci hooks uninstall`).
SOLCI_PYTHON={python}
SOLCI_REPO={repo}
SOLCI_DB_FILE={db}
SOLCI_PYTHONPATH={pythonpath}
solci_enqueue() {{
  SOLCI_DB="$SOLCI_DB_FILE" PYTHONPATH="$SOLCI_PYTHONPATH" "$SOLCI_PYTHON" -P -m ci.cli enqueue --trigger hook "$@"
}}
"""

_POST_RECEIVE = """input=$(cat)
printf '%s\\n' "$input" | while read -r old new ref; do
  case "$ref" in refs/heads/*) ;; *) continue ;; esac
  [ "$new" = {zero} ] && continue
  if [ "$old" = {zero} ]; then range="$new"; else range="$old..$new"; fi
  solci_enqueue --branch "${{ref#refs/heads/}}" "$SOLCI_REPO" "$range" \\
    || echo "solci: could not queue $range (the push itself went through)" >&2
done
if [ -x "$0{chained}" ]; then printf '%s\\n' "$input" | "$0{chained}" "$@"; fi
exit 0
"""

_POST_COMMIT = """sha=$(git rev-parse HEAD)
branch=$(git symbolic-ref --quiet --short HEAD || true)
if [ -n "$branch" ]; then
  solci_enqueue --branch "$branch" "$SOLCI_REPO" "$sha"
else
  solci_enqueue "$SOLCI_REPO" "$sha"
fi || echo "solci: could not queue $sha (the commit itself is made)" >&2
if [ -x "$0{chained}" ]; then "$0{chained}" "$@"; fi
exit 0
"""


def hooks_dir(repo: Path) -> Path:
    path = Path(git("rev-parse", "--git-path", "hooks", cwd=repo))
    return path if path.is_absolute() else (repo / path).resolve()


def hook_name(repo: Path) -> str:
    return "post-receive" if is_bare(repo) else "post-commit"


def render(kind: str, repo: Path, db: Path | str, python: str | None = None) -> str:
    pythonpath = str(Path(__file__).resolve().parents[1])  # the folder holding this `ci` package
    header = _HEADER.format(
        marker=MARKER,
        python=shlex.quote(python or sys.executable),
        repo=shlex.quote(str(repo)),
        db=shlex.quote(str(db)),
        pythonpath=shlex.quote(pythonpath),
    )
    body = _POST_RECEIVE if kind == "post-receive" else _POST_COMMIT
    return header + body.format(zero=ZERO, chained=CHAINED_SUFFIX)


def install(repo_path: str | Path, db_path: str | Path, *, python: str | None = None) -> Path:
    """Install the hook into a repository; returns the hook's path. A foreign hook is kept and chained."""
    repo = local_repo(repo_path)
    kind = hook_name(repo)
    directory = hooks_dir(repo)
    directory.mkdir(parents=True, exist_ok=True)
    hook = directory / kind
    if hook.exists() and MARKER not in hook.read_text(errors="replace"):
        chained = hook.with_name(kind + CHAINED_SUFFIX)
        if chained.exists():
            raise FileExistsError(f"{hook} is not a solci hook and {chained} exists too; merge them by hand")
        hook.rename(chained)
    spec = str(db_path)
    db = spec if spec.startswith("ducklake:") else Path(spec).expanduser().resolve()  # a lake is named as given
    hook.write_text(render(kind, repo, db, python))
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return hook


def uninstall(repo_path: str | Path) -> Path | None:
    """Remove solci's hook (restoring a chained one); the removed path, or None when none was installed."""
    repo = local_repo(repo_path)
    kind = hook_name(repo)
    hook = hooks_dir(repo) / kind
    if not hook.exists() or MARKER not in hook.read_text(errors="replace"):
        return None
    hook.unlink()
    chained = hook.with_name(kind + CHAINED_SUFFIX)
    if chained.exists():
        os.replace(chained, hook)
    return hook
