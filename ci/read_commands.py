"""The reading subcommands of ``solci``: history, flags, records, jobs, sql.

solci history | flags | records | jobs | sql "SELECT ..."   read the history (tables)
"""

from __future__ import annotations

import argparse
from typing import Any

import pandas as pd

from ci.common import add_db_argument, bounded, format_changes, handles_errors, open_db, print_table
from ci.judge import STEP_STATUSES


@handles_errors
def cmd_history(args: argparse.Namespace) -> int:
    from storage.queries import history

    limit = args.limit if args.limit and args.limit > 0 else None
    df = history(
        open_db(args, create=False), case=args.case, hardware=args.hardware, protocol=args.protocol, limit=limit
    )
    if not df.empty:
        df = df.assign(commit=df["commit"].str[:12], run_id=df["run_id"].str[:8])
        cols = [
            "started_at",
            "commit",
            "branch",
            "run_id",
            "hardware",
            "case",
            "status",
            "median_us",
            "eager_us",
            "cublas_us",
            "score",
        ]
        df = df[[c for c in cols if c in df.columns]]
    print_table(df, empty="(no runs yet)")
    return 0


@handles_errors
def cmd_flags(args: argparse.Namespace) -> int:
    """Each detected change of level once (newest first); ``--cases``: the cases each one moved."""
    from storage.queries import changes, step_cases

    db = open_db(args, create=False)
    df = changes(db, hardware=args.hardware, status=args.status, commit=args.commit, limit=args.limit + 1)
    more = len(df) > args.limit
    df = df.head(args.limit)
    if df.empty:
        print("(no changes detected)")
        return 0
    view = format_changes(df, ("suite_change", "suite_lo", "suite_hi", "worst_change"))
    view = view.assign(
        commit=df["commit"].str[:12],
        moved=[
            f"{m}/{n}" if n else str(m)
            for m, n in zip(df["cases_moved"], df["n_cases"].fillna(0).astype(int), strict=True)
        ],
        suite=[
            f"{c} [{lo}, {hi}]"
            for c, lo, hi in zip(view["suite_change"], view["suite_lo"], view["suite_hi"], strict=True)
        ],
        worst=[
            f"{c} {w}" if isinstance(c, str) else "-"
            for c, w in zip(df["worst_case"], view["worst_change"], strict=True)
        ],
    )
    cols = ["created_at", "commit", "status", "direction", "detected_by", "moved", "suite", "worst", "hardware"]
    if not args.cases:
        print_table(view[cols], max_colwidth=60)
    else:
        for row, full in zip(view.itertuples(index=False), df.itertuples(index=False), strict=True):
            print(
                f"{row.created_at:%Y-%m-%d %H:%M}  {row.commit}  {row.status}  {row.direction}  suite {row.suite}"
                f"  ({row.hardware})"
            )
            print(f"  {full.message}")
            cases = step_cases(db, full.step_id)
            if not cases.empty:
                print_table(format_changes(cases, ("change", "lo", "hi")), max_colwidth=40)
    if more:
        print(f"(showing the newest {args.limit}; older changes exist: --limit N to see more)")
    return 0


@handles_errors
def cmd_records(args: argparse.Namespace) -> int:
    from storage.queries import records

    print_table(records(open_db(args, create=False)))
    return 0


@handles_errors
def cmd_sql(args: argparse.Namespace) -> int:
    from storage.queries import run_sql

    print_table(run_sql(open_db(args, create=False), args.query), max_colwidth=args.max_colwidth)
    return 0


@handles_errors
def cmd_jobs(args: argparse.Namespace) -> int:
    from storage.jobs import get_job, list_jobs

    db = open_db(args, create=False)
    if args.log is not None:
        job = get_job(db, args.log)
        if job is None:
            raise ValueError(f"no job {args.log} in {db.path}")
        print(f"job {job.id}: {job.commit} {job.status} {job.outcome or ''}".rstrip())
        print(job.log or "(no log)")
        return 0
    rows = [
        {
            "id": j.id,
            "commit": j.commit[:12],
            "branch": j.branch,
            "trigger": j.trigger,
            "status": j.status,
            "outcome": j.outcome,
            "attempts": j.attempts,
            "enqueued_at": j.enqueued_at,
            "gpu": j.gpu,
            "run_id": (j.run_id or "")[:8],
            "repo": j.repo,
        }
        for j in list_jobs(db, status=args.status, limit=args.limit)
    ]
    print_table(pd.DataFrame(rows), empty="(no jobs)")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("history", help="per-case results of the stored runs, oldest first")
    p.add_argument("--case", help="one case, e.g. 4,128 or B4_S128 (__suite__: the geometric mean)")
    p.add_argument("--hardware", help="hardware label or GPU model, e.g. H200")
    p.add_argument("--protocol", help="protocol hash or name")
    p.add_argument(
        "--limit", type=int, default=20, help="only the most recent N runs (default 20; 0: all, which can be long)"
    )
    add_db_argument(p)
    p.set_defaults(func=cmd_history)

    p = subparsers.add_parser(
        "flags", help="each detected change of level once: culprit, status, cases moved, interval; newest first"
    )
    p.add_argument("--commit", help="one commit (or its prefix)")
    p.add_argument("--hardware", help="hardware label or GPU model, e.g. H200")
    p.add_argument("--status", choices=STEP_STATUSES, help="only steps of this status")
    p.add_argument("--cases", action="store_true", help="every change with the cases it moved")
    p.add_argument("--limit", type=bounded(int, 1), default=50, help="at most N changes (default 50)")
    add_db_argument(p)
    p.set_defaults(func=cmd_flags)

    p = subparsers.add_parser("records", help="best-known figures: published leaderboard and project bests")
    add_db_argument(p)
    p.set_defaults(func=cmd_records)

    p = subparsers.add_parser("sql", help="a read-only SQL query on the history database")
    p.add_argument("query", help='e.g. "SELECT commit, geomean_us FROM runs ORDER BY started_at"')
    p.add_argument("--max-colwidth", type=int, default=80)
    add_db_argument(p)
    p.set_defaults(func=cmd_sql)

    p = subparsers.add_parser("jobs", help="the job queue, newest first (--log ID: one job's log)")
    p.add_argument("--status", choices=("queued", "running", "done", "failed"))
    p.add_argument("--limit", type=int, default=30)
    p.add_argument("--log", type=int, metavar="ID", help="print the log of job ID")
    add_db_argument(p)
    p.set_defaults(func=cmd_jobs)
