"""Git hooks that queue commits the moment they arrive (``solci hooks install REPO``).

- a bare repository gets ``post-receive``: every pushed branch update ``OLD..NEW`` is queued, oldest first
  (a new branch: its commits, walking back from its head to the commits already queued, see
  ``ci.service.triggers.commits_between``);
- a working repository gets ``post-commit`` (the new HEAD is queued; not during a rebase, whose detached HEAD
  has no branch), ``post-merge`` (a merge or a pull, fast-forward included: ``ORIG_HEAD..HEAD``) and
  ``post-rewrite`` (a rebase or an amend: the walk back from HEAD to the commits already queued).

The hook hands its ``OLD NEW REF`` lines to this installation's Python by absolute path (``python -P -m
ci.hooks REPO``, with ``PYTHONPATH`` set to this checkout and ``SOLCI_DB`` to the database's absolute path,
for that call only), so it works from any shell and never imports the hooked repository's own code. An
update it could not queue (database locked, lake unreachable, even Python failing) is recorded in the
repository's git dir (``solci-pending``) and said; the next hook run and ``solci watch`` of the repository
retry it first (``ci.service.triggers.queue_updates``). A hook that was already there is kept as ``<hook>.pre-solci``
and still runs after ours. Hooks are marked, so installing again replaces ours only.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

from ci.service.gitutil import git, is_bare, local_repo
from ci.service.triggers import pending_file

MARKER = "# solci-hook"
CHAINED_SUFFIX = ".pre-solci"
ZERO = "0" * 40

_HEADER = """#!/bin/sh
{marker}: queues commits for measurement (installed by `solci hooks install`; undo: `solci hooks uninstall`).
SOLCI_PYTHON={python}
SOLCI_REPO={repo}
SOLCI_DB_FILE={db}
SOLCI_PYTHONPATH={pythonpath}
SOLCI_PENDING={pending}
# queue the OLD NEW REF lines on stdin; what fails is recorded in $SOLCI_PENDING (exit 0 then)
solci_queue() {{
  SOLCI_DB="$SOLCI_DB_FILE" PYTHONPATH="$SOLCI_PYTHONPATH" "$SOLCI_PYTHON" -P -m ci.hooks "$SOLCI_REPO"
}}
# queue the one update OLD NEW REF of a working repository, recording it when that fails
solci_update() {{
  printf '%s %s %s\\n' "$1" "$2" "$3" | solci_queue || solci_record "$1 $2 $3"
}}
# the checked-out branch's ref, or HEAD when detached
solci_ref() {{
  git symbolic-ref --quiet HEAD 2>/dev/null || echo HEAD
}}
# when solci itself failed: keep the lines for the next run
solci_record() {{
  if printf '%s\\n' "$1" >> "$SOLCI_PENDING"; then
    echo "solci: could not queue $1; recorded in $SOLCI_PENDING, retried on the next run" >&2
  else
    echo "solci: could not queue $1, nor record it in $SOLCI_PENDING" >&2
  fi
}}
"""

_POST_RECEIVE = """input=$(cat)
printf '%s\\n' "$input" | solci_queue || solci_record "$input"
if [ -x "$0{chained}" ]; then printf '%s\\n' "$input" | "$0{chained}" "$@"; fi
exit 0
"""

_POST_COMMIT = """old=$(git rev-parse --quiet --verify HEAD^ 2>/dev/null) || old={zero}
# during a rebase HEAD is detached: post-rewrite queues the rebased commits, with their branch, once it ends
if [ ! -d "$(git rev-parse --git-path rebase-merge)" ] && [ ! -d "$(git rev-parse --git-path rebase-apply)" ]; then
  solci_update "$old" "$(git rev-parse HEAD)" "$(solci_ref)"
fi
if [ -x "$0{chained}" ]; then "$0{chained}" "$@"; fi
exit 0
"""

_POST_MERGE = """old=$(git rev-parse --quiet --verify ORIG_HEAD 2>/dev/null) || old={zero}
solci_update "$old" "$(git rev-parse HEAD)" "$(solci_ref)"
if [ -x "$0{chained}" ]; then "$0{chained}" "$@"; fi
exit 0
"""

_POST_REWRITE = """rewritten=$(cat)
# the old end is unknown on purpose: the walk back from HEAD stops at the commits already queued
solci_update {zero} "$(git rev-parse HEAD)" "$(solci_ref)"
if [ -x "$0{chained}" ]; then printf '%s\\n' "$rewritten" | "$0{chained}" "$@"; fi
exit 0
"""
_BODIES = {
    "post-receive": _POST_RECEIVE,
    "post-commit": _POST_COMMIT,
    "post-merge": _POST_MERGE,
    "post-rewrite": _POST_REWRITE,
}


def hooks_dir(repo: Path) -> Path:
    path = Path(git("rev-parse", "--git-path", "hooks", cwd=repo))
    return path if path.is_absolute() else (repo / path).resolve()


def hook_names(repo: Path) -> tuple[str, ...]:
    return ("post-receive",) if is_bare(repo) else ("post-commit", "post-merge", "post-rewrite")


def render(kind: str, repo: Path, db: Path | str, python: str | None = None) -> str:

    pythonpath = str(Path(__file__).resolve().parents[2])  # the folder holding this `ci` package
    header = _HEADER.format(
        marker=MARKER,
        python=shlex.quote(python or sys.executable),
        repo=shlex.quote(str(repo)),
        db=shlex.quote(str(db)),
        pythonpath=shlex.quote(pythonpath),
        pending=shlex.quote(str(pending_file(repo))),
    )
    return header + _BODIES[kind].format(zero=ZERO, chained=CHAINED_SUFFIX)


def pinned_history(db_path: str | Path) -> str | Path:
    """The history an installed hook queues into: a file's absolute path (the hook runs from the repository's
    folder, not from where ``solci hooks install`` ran), a lake's spec as given."""
    spec = str(db_path)
    return spec if spec.startswith("ducklake:") else Path(spec).expanduser().resolve()


def install(repo_path: str | Path, db_path: str | Path, *, python: str | None = None) -> list[Path]:
    """Install the hooks into a repository; returns their paths. A foreign hook is kept and chained."""
    repo = local_repo(repo_path)
    directory = hooks_dir(repo)
    directory.mkdir(parents=True, exist_ok=True)
    db = pinned_history(db_path)
    kinds = hook_names(repo)
    for kind in kinds:  # refuse before changing anything
        hook, chained = directory / kind, directory / (kind + CHAINED_SUFFIX)
        if hook.exists() and MARKER not in hook.read_text(errors="replace") and chained.exists():
            raise FileExistsError(f"{hook} is not a solci hook and {chained} exists too; merge them by hand")
    out = []
    for kind in kinds:
        hook = directory / kind
        if hook.exists() and MARKER not in hook.read_text(errors="replace"):
            hook.rename(hook.with_name(kind + CHAINED_SUFFIX))
        hook.write_text(render(kind, repo, db, python))
        hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        out.append(hook)
    return out


def uninstall(repo_path: str | Path) -> list[Path]:
    """Remove solci's hooks (restoring chained ones); the removed paths (empty when none was installed)."""
    repo = local_repo(repo_path)
    out = []
    for kind in hook_names(repo):
        hook = hooks_dir(repo) / kind
        if not hook.exists() or MARKER not in hook.read_text(errors="replace"):
            continue
        hook.unlink()
        chained = hook.with_name(kind + CHAINED_SUFFIX)
        if chained.exists():
            os.replace(chained, hook)
        out.append(hook)
    return out
