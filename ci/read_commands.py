"""The reading subcommands of ``solci``: history, flags, records, jobs, sql.

    solci history | flags | records | jobs | sql "SELECT ..."   read the history (tables)
"""

from __future__ import annotations

import argparse
from typing import Any

import pandas as pd

from ci.common import add_db_argument, handles_errors, open_db, print_table


@handles_errors
def cmd_history(args: argparse.Namespace) -> int:
    from storage.queries import history

    limit = args.limit if args.limit and args.limit > 0 else None
    df = history(open_db(args), case=args.case, hardware=args.hardware, protocol=args.protocol, limit=limit)
    if not df.empty:
        df = df.assign(commit=df["commit"].str[:12], run_id=df["run_id"].str[:8])
        cols = ["started_at", "commit", "branch", "run_id", "hardware", "case", "status", "median_us",
                "eager_us", "cublas_us", "score"]  # fmt: skip
        df = df[[c for c in cols if c in df.columns]]
    print_table(df, empty="(no runs yet)")
    return 0


@handles_errors
def cmd_flags(args: argparse.Namespace) -> int:
    from storage.queries import flags

    df = flags(open_db(args), run_id=args.run, commit=args.commit, limit=args.limit)
    if not df.empty:
        df = df.assign(commit=df["commit"].str[:12], run_id=df["run_id"].str[:8])
        df = df[["started_at", "commit", "run_id", "case", "kind", "magnitude", "p_value", "message"]]
    print_table(df, empty="(no flags)", max_colwidth=110)
    return 0


@handles_errors
def cmd_records(args: argparse.Namespace) -> int:
    from storage.queries import records

    print_table(records(open_db(args)))
    return 0


@handles_errors
def cmd_sql(args: argparse.Namespace) -> int:
    from storage.queries import run_sql

    print_table(run_sql(open_db(args), args.query), max_colwidth=args.max_colwidth)
    return 0


@handles_errors
def cmd_jobs(args: argparse.Namespace) -> int:
    from storage.jobs import get_job, list_jobs

    db = open_db(args)
    if args.log is not None:
        job = get_job(db, args.log)
        if job is None:
            raise ValueError(f"no job {args.log} in {db.path}")
        print(f"job {job.id}: {job.commit} {job.status} {job.outcome or ''}".rstrip())
        print(job.log or "(no log)")
        return 0
    rows = [
        {"id": j.id, "commit": j.commit[:12], "branch": j.branch, "trigger": j.trigger, "status": j.status,
         "outcome": j.outcome, "attempts": j.attempts, "enqueued_at": j.enqueued_at, "gpu": j.gpu,
         "run_id": (j.run_id or "")[:8], "repo": j.repo}
        for j in list_jobs(db, status=args.status, limit=args.limit)
    ]  # fmt: skip
    print_table(pd.DataFrame(rows), empty="(no jobs)")
    return 0




def register(subparsers: Any) -> None:
    p = subparsers.add_parser("history", help="per-case results of the stored runs, oldest first")
    p.add_argument("--case", help="one case, e.g. 4,128 or B4_S128 (__suite__: the geometric mean)")
    p.add_argument("--hardware", help="hardware label or GPU model, e.g. H200")
    p.add_argument("--protocol", help="protocol hash or name")
    p.add_argument("--limit", type=int, default=20,
                   help="only the most recent N runs (default 20; 0: all, which can be long)")  # fmt: skip
    add_db_argument(p)
    p.set_defaults(func=cmd_history)

    p = subparsers.add_parser("flags", help="regressions, improvements, records, incorrect runs; newest first")
    p.add_argument("--run", help="one run id")
    p.add_argument("--commit", help="one commit (or its prefix)")
    p.add_argument("--limit", type=int, default=50, help="at most N flags (default 50)")
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
