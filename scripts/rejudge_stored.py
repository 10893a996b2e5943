"""Judge a stored pull-request run again with this checkout's rules, on a copy of its history: the same stored
screening run, the same stored confirmation runs in their order (A the merge-base, B the head), nothing measured.

How a change of the rules reads on runs already measured on the GPU (docs/h200/issue20_run2_*: the PR judged
ambiguous by the single-baseline control, judged again after the shared-shift control).

Usage: python scripts/rejudge_stored.py HISTORY.duckdb REPO.git RUN_ID  (then `solci report --db HISTORY ...`)
"""

from __future__ import annotations

import argparse
import sys

from ci.service.gitutil import GitError, first_parent_ancestry
from ci.verdict.apply import judge_run
from storage.db import StorageError, open_database


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("history", help="a copy of the history (DuckDB file): the judgement is stored into it")
    ap.add_argument("repo", help="the repository of the run's commits (its merge-base's first-parent line)")
    ap.add_argument("run_id", help="the pull request's stored run")
    args = ap.parse_args(argv)
    path, repo, run_id = args.history, args.repo, args.run_id
    db = open_database(path, create=False)
    try:
        with db.read() as conn:
            row = conn.execute('SELECT "commit", base, branch FROM runs WHERE run_id = ?', [run_id]).fetchone()
            stored = conn.execute(
                """SELECT run_id, "commit" FROM runs WHERE purpose = 'confirm' AND branch = ?
                   AND "commit" IN (?, ?) ORDER BY started_at""",
                [row[2], row[0], row[1]] if row else [None, None, None],
            ).fetchall()
    except StorageError as exc:
        print(f"rejudge_stored: {exc}", file=sys.stderr)
        return 2
    if row is None or row[1] is None:
        print(f"rejudge_stored: {run_id} is not a pull request's run in {path}", file=sys.stderr)
        return 2
    commit, base, _ = row
    pairs = [("A" if c == base else "B", r) for r, c in stored]
    try:
        line = first_parent_ancestry(repo, base)  # the merge-base's line, as the runner judges a PR's job
    except GitError as exc:
        line, why = [], str(exc)
    else:
        why = f"{base[:12]} is not a commit of {repo}"
    if not line:
        print(f"rejudge_stored: {why}", file=sys.stderr)
        return 2

    def confirm(parent: str, head: str, cases: list[str]) -> list[tuple[str, str]]:
        return pairs

    v = judge_run(db, run_id, ancestry=[commit, *line], confirm=confirm, late=False)
    print(f"{commit[:12]} against {base[:12]}: {v.verdict} ({''.join(x for x, _ in pairs)} stored) | {v.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
