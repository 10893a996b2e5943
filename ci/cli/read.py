"""The reading subcommands of ``solci``: history, flags, records, jobs, sql, report.

solci history | flags | records | jobs | sql "SELECT ..."   read the history (tables)
solci report COMMIT|A..B [--format markdown|json|text]     each commit's verdict as a reviewer wants it

Readers never create a history: a missing ``--db`` path is an error (exit 2). A filter that names something
the history does not hold says what it does hold (exit 2); numbers print plainly (microseconds with fixed
decimals, changes and scores as percentages, p-values with two significant digits, never 1.5e+06).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ci.cli import report
from ci.cli.common import (
    add_db_argument,
    bounded,
    format_changes,
    handles_errors,
    one_line_errors,
    open_db,
    print_table,
)
from ci.harness.terminal import visible
from ci.service.gitutil import GitError, git, resolve_commit
from ci.service.triggers import pull_request_bases
from problem.workload import Case
from storage.jobs import get_job, list_jobs
from storage.queries import (
    SQL_MAX_ROWS,
    SQL_TIMEOUT_S,
    changes,
    commit_report,
    history,
    levels,
    records,
    run_sql,
    step_cases,
    stored_values,
)
from storage.schema import STEP_STATUSES

# Column names -> how their numbers print (format_numbers).
CHANGE_COLUMNS = frozenset(
    {
        "change",
        "lo",
        "hi",
        "magnitude",
        "gap",
        "score_gap",
        "suite_change",
        "suite_lo",
        "suite_hi",
        "worst_change",
        "tested_change",
        "threshold",
        "control_change",
        "clock_change",
        "confirmed_change",
        "confirmed_lo",
        "confirmed_hi",
    }
)
P_COLUMNS = frozenset({"p_value", "q_value", "p", "q"})
PERCENT_COLUMNS = frozenset({"pct_sol"})  # already in percent
FRACTION_COLUMNS = frozenset({"score"})  # 0..1, printed as a percentage


# ------------------------------------------------------------------------------------------------ helpers
def given_filters(**filters: object) -> str:
    """The filters a command was given, as the user typed them ('--case 4,128 --hardware H200'), for a message
    saying that nothing matched them."""
    return " ".join(f"--{k} {v}" for k, v in filters.items() if v is not None)


def plain_number(v: float) -> str:
    """A float without an exponent: 1521941.0 -> '1521941', 0.62143219 -> '0.621432'."""
    return np.format_float_positional(float(v), precision=6, unique=True, trim="-")


def p_text(v: float) -> str:
    return "<0.0001" if v < 1e-4 else f"{v:.2g}"


def _is_missing(v: Any) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def format_numbers(df: pd.DataFrame, *, raw: bool = False) -> pd.DataFrame:
    """Numbers as plain text, by column name: ``*_us`` with 2 decimals, p/q-values with 2 significant digits,
    changes as signed percentages, scores (0..1) and pct_sol as percentages, other floats plainly; times to the
    second; anything missing as '-'. ``raw`` (``solci sql``): only microseconds, p-values and plain floats, no
    rescaling."""
    out = df.copy()
    for col in out.columns:
        s = out[col]
        if pd.api.types.is_datetime64_any_dtype(s):
            out[col] = s.dt.strftime("%Y-%m-%d %H:%M:%S")
            continue
        if not (pd.api.types.is_float_dtype(s) or (s.dtype == object and s.map(lambda v: isinstance(v, float)).any())):
            continue
        name = str(col).lower()
        if name.endswith("_us"):
            f = lambda v: f"{float(v):.2f}"
        elif name in P_COLUMNS:
            f = lambda v: p_text(float(v))
        elif not raw and name in CHANGE_COLUMNS:
            f = lambda v: f"{float(v):+.1%}"
        elif not raw and name in FRACTION_COLUMNS:
            f = lambda v: f"{float(v):.1%}"
        elif not raw and name in PERCENT_COLUMNS:
            f = lambda v: f"{float(v):.1f}%"
        else:
            f = plain_number
        out[col] = s.map(
            lambda v, f=f: "-" if _is_missing(v) else (f(v) if isinstance(v, (float, np.floating)) else str(v))
        )
    return out.astype(object).where(out.notna(), "-")  # missing text, ids, times: '-' (not NaN, <NA>, NaT)


def _listing(values: Iterable[str], most: int = 20) -> str:
    vals = [str(v) for v in values]
    if not vals:
        return "(none)"
    more = f", ... ({len(vals) - most} more)" if len(vals) > most else ""
    return ", ".join(vals[:most]) + more


def check_filters(
    db: Any,
    *,
    case: str | None = None,
    hardware: str | None = None,
    protocol: str | None = None,
    branch: str | None = None,
) -> dict[str, list[str]]:
    """ValueError (exit 2) naming what the history holds when a filter names something it does not hold;
    returns the stored values (storage.queries.stored_values)."""

    vals = stored_values(db)
    problems = []
    if case is not None and case != "__suite__":
        try:
            name = Case.parse(case).name
        except ValueError as exc:
            raise ValueError(f"{exc}; cases stored: {_listing(vals['case'])}") from None
        if name not in vals["case"]:
            problems.append(f"no runs of case {name}; cases stored: {_listing(vals['case'])}")
    if hardware is not None and hardware not in vals["hardware"] and hardware not in vals["gpu_model"]:
        problems.append(
            f"no runs on hardware {hardware}; hardware stored: {_listing(vals['hardware'])}"
            + (f" (GPU models: {_listing(vals['gpu_model'])})" if vals["gpu_model"] else "")
        )
    if protocol is not None and protocol not in vals["protocol"] and protocol not in vals["protocol_name"]:
        problems.append(
            f"no runs with protocol {protocol}; protocols stored: {_listing(vals['protocol_name'])} "
            f"(hashes: {_listing(vals['protocol'])})"
        )
    if branch is not None and branch not in vals["branch"]:
        problems.append(f"no runs on branch {branch}; branches stored: {_listing(vals['branch'])}")
    if problems:
        raise ValueError("; ".join(problems))
    return vals


# ------------------------------------------------------------------------------------------------ commands
@handles_errors
def cmd_history(args: argparse.Namespace) -> int:

    db = open_db(args, create=False)
    limit = args.limit if args.limit and args.limit > 0 else None
    df = history(db, case=args.case, hardware=args.hardware, protocol=args.protocol, limit=limit)
    if df.empty:
        vals = check_filters(db, case=args.case, hardware=args.hardware, protocol=args.protocol)
        if not vals["hardware"]:
            print(f"(no runs yet in {db.path})")
        else:
            given = given_filters(case=args.case, hardware=args.hardware, protocol=args.protocol)
            print(f"(no runs match {given} together; hardware stored: {_listing(vals['hardware'])})")
        return 0
    n_runs = df["run_id"].nunique()
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
    df = df.assign(score=df["score"].where(df["status"] == "pass"))  # a failed case has no score, not 0 %
    print_table(format_numbers(df))
    if limit is not None and n_runs >= limit:
        print(f"(the newest {limit} runs; --limit N for more, --limit 0 for all)")
    return 0


@handles_errors
def cmd_flags(args: argparse.Namespace) -> int:
    """Each detected change of level once (newest first); ``--cases``: the cases each one moved."""

    db = open_db(args, create=False)
    prs = args.pull_requests
    df = changes(
        db, hardware=args.hardware, status=args.status, commit=args.commit, limit=args.limit + 1, pull_requests=prs
    )
    more = len(df) > args.limit
    df = df.head(args.limit)
    if df.empty:
        if args.hardware is not None:
            check_filters(db, hardware=args.hardware)
        which = given_filters(commit=args.commit, hardware=args.hardware, status=args.status)
        whose = " in pull requests" if prs else ""
        print(f"(no changes detected{whose}{' for ' + which if which else ''})")
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
        created_at=df["created_at"].dt.strftime("%Y-%m-%d %H:%M"),
        merge_base=df["base"].str[:12],
    )
    cols = ["created_at", "commit", "status", "direction", "detected_by", "moved", "suite", "worst", "hardware"]
    if prs:  # each against its own merge-base, on the pull request's branch
        cols[2:2] = ["branch", "merge_base"]
    if not args.cases:
        print_table(view[cols], max_colwidth=60)
    else:
        for row, full in zip(view.itertuples(index=False), df.itertuples(index=False), strict=True):
            against = f"  against merge-base {row.merge_base}" if prs else ""
            print(
                f"{row.created_at}  {row.commit}  {row.status}  {row.direction}  suite {row.suite}  ({row.hardware})"
                f"{against}"
            )
            print(f"  {visible(full.message)}")
            if isinstance(full.ack_reason, str) and full.ack_reason:
                print(f"  acknowledged: {visible(full.ack_reason)}")
            cases = step_cases(db, full.step_id)
            if not cases.empty:
                print_table(format_numbers(cases), max_colwidth=40)
    if more:
        print(f"(showing the newest {args.limit}; older changes exist: --limit N to see more)")
    return 0


@handles_errors
def cmd_records(args: argparse.Namespace) -> int:

    db = open_db(args, create=False)
    recs = records(db)
    print_table(format_numbers(recs.drop(columns=["source", "observed_at", "step_id"])))
    current = levels(db)
    print()
    if current.empty:
        print("(no judged GPU level yet: records are made from confirmed levels, never from one run)")
        return 0
    published = recs[recs["kind"] == "published"]
    top = published.sort_values("pct_sol", ascending=False).head(1)
    view = current.assign(
        since=current["since"].map(lambda c: "-" if _is_missing(c) else str(c)[:12]),
        record_commit=current["record_commit"].map(lambda c: "-" if _is_missing(c) else str(c)[:12]),
    )
    cols = ["hardware", "protocol", "case", "level_us", "lo_us", "hi_us", "n_runs", "since", "record_us"]
    cols += ["record_commit", "gap", "standing", "pct_sol"]
    if not top.empty:
        name, best = str(top["implementation"].iloc[0]), float(top["pct_sol"].iloc[0])
        view[f"vs B200 #1 ({name[:20]})"] = [
            f"{p - best:+.1f} pts" if c == "__suite__" and not _is_missing(p) else "-"
            for c, p in zip(view["case"], view["pct_sol"], strict=True)
        ]
        cols.append(f"vs B200 #1 ({name[:20]})")
    print(
        "Current levels (the commits since the newest confirmed step) against the project records; the B200 "
        "leaderboard through the suite's SOL score:"
    )
    print_table(format_numbers(view[cols]))
    return 0


@handles_errors
def cmd_sql(args: argparse.Namespace) -> int:

    df = run_sql(open_db(args, create=False), args.query, timeout_s=args.timeout, max_rows=args.max_rows)
    print_table(format_numbers(df, raw=True), max_colwidth=args.max_colwidth)
    if df.attrs.get("truncated"):
        print(f"(the first {args.max_rows} rows; --max-rows N for more)")
    return 0


@handles_errors
def cmd_jobs(args: argparse.Namespace) -> int:

    db = open_db(args, create=False)
    if args.log is not None:
        job = get_job(db, args.log)
        if job is None:
            raise ValueError(f"no job {args.log} in {db.path}")
        print(visible(f"job {job.id}: {job.commit} {job.status} {job.outcome or ''}".rstrip()))
        print(visible(job.log or "(no log)"))
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
    print_table(format_numbers(pd.DataFrame(rows)), empty="(no jobs)")
    return 0


def report_commits(
    db: Any, spec: str, repo: str, base: str | None = None
) -> tuple[list[tuple[str, dict | None]], dict]:
    """(commit, its stored report rows or None) for ``spec``: a range ``A..B`` (the first-parent commits of B
    not reachable from A, in ``repo``, oldest first) or one commit (a stored sha or prefix, else a revision of
    ``repo``), and {commit: merge-base} for those off ``base``'s line (``--base REF``: their runs judged
    against that merge-base are reported). ValueError (exit 2) for a commit neither the history nor the
    repository knows, or a base the repository does not know."""
    if ".." in spec:
        try:
            shas = git("rev-list", "--first-parent", "--reverse", spec, "--", cwd=repo).split()
        except GitError as exc:
            raise ValueError(f"report: cannot resolve the range {spec!r} in {repo}: {exc}") from None
    elif base is None and (rows := commit_report(db, spec)) is not None:
        return [(str(rows["run"]["commit"]), rows)], {}
    else:
        try:
            shas = [resolve_commit(repo, spec)]
        except (GitError, OSError):
            if base is not None:
                raise ValueError(f"report: unknown commit {spec!r}: --base needs it in {repo}") from None
            raise ValueError(f"report: unknown commit {spec!r}: not in the history, not a revision of {repo}") from None
    merge_bases: dict[str, str] = {}
    if base is not None:
        try:
            merge_bases = pull_request_bases(Path(repo), shas, base)
        except GitError as exc:
            raise ValueError(f"report: --base {base!r}: {exc}") from None
    return [(sha, commit_report(db, sha, base=merge_bases.get(sha))) for sha in shas], merge_bases


@handles_errors
def cmd_report(args: argparse.Namespace) -> int:
    """Each commit's verdict (a commit or the first-parent commits of a range, oldest first); exit 0, 3 when a
    reported commit is regressed with its step open, 1 when one is broken (as ``solci run``)."""
    db = open_db(args, create=False)
    url = args.dashboard_url or os.environ.get(report.DASHBOARD_URL_ENV) or report.DEFAULT_DASHBOARD_URL
    rows, merge_bases = report_commits(db, args.target, args.repo, args.base)
    rep = report.build_report(rows, dashboard_url=url, base=args.base, merge_bases=merge_bases)
    if not rep.commits:
        raise ValueError(f"report: the range {args.target!r} holds no commit")
    sys.stdout.write(report.render(rep, args.format))
    return rep.exit_code


def register(subparsers: Any) -> None:
    p = one_line_errors(
        subparsers.add_parser(
            "report",
            help="each commit's verdict as a reviewer wants it (cases moved, intervals, step, record, error, link); "
            "exit 0, 3 regressed with its step open, 1 broken",
        )
    )
    p.add_argument("target", metavar="COMMIT|RANGE", help="a commit (sha, prefix or revision) or a range A..B")
    p.add_argument("--format", choices=report.FORMATS, default="markdown", help="markdown (default), json or text")
    p.add_argument(
        "--base",
        metavar="REF",
        help="a pull request's base (e.g. origin/main): report each commit off its line as judged against its "
        "merge-base with REF (solci run --base REF)",
    )
    p.add_argument("--repo", default=".", help="the repository that resolves revisions and ranges (default: .)")
    p.add_argument(
        "--dashboard-url",
        help=f"the dashboard's address for the links (default ${report.DASHBOARD_URL_ENV}, else "
        f"{report.DEFAULT_DASHBOARD_URL})",
    )
    add_db_argument(p)
    p.set_defaults(func=cmd_report)

    p = one_line_errors(subparsers.add_parser("history", help="per-case results of the stored runs, oldest first"))
    p.add_argument("--case", help="one case, e.g. 4,128 or B4_S128 (__suite__: the geometric mean)")
    p.add_argument("--hardware", help="hardware label or GPU model, e.g. H200")
    p.add_argument("--protocol", help="protocol hash or name")
    p.add_argument(
        "--limit",
        type=bounded(int, 0),
        default=20,
        help="only the most recent N runs (default 20; 0: all, which can be long)",
    )
    add_db_argument(p)
    p.set_defaults(func=cmd_history)

    p = one_line_errors(
        subparsers.add_parser(
            "flags", help="each detected change of level once: culprit, status, cases moved, interval; newest first"
        )
    )
    p.add_argument("--commit", help="one commit (or its prefix)")
    p.add_argument("--hardware", help="hardware label or GPU model, e.g. H200")
    p.add_argument("--status", choices=STEP_STATUSES, help="only steps of this status")
    p.add_argument("--cases", action="store_true", help="every change with the cases it moved")
    p.add_argument(
        "--pull-requests",
        action="store_true",
        help="the steps of pull requests' runs (each judged against its merge-base) instead of main's",
    )
    p.add_argument("--limit", type=bounded(int, 1), default=50, help="at most N changes (default 50)")
    add_db_argument(p)
    p.set_defaults(func=cmd_flags)

    p = one_line_errors(
        subparsers.add_parser(
            "records",
            help="best-known figures: the published leaderboard, the project's records (best confirmed levels) and "
            "each case's current level against them",
        )
    )
    add_db_argument(p)
    p.set_defaults(func=cmd_records)

    p = one_line_errors(subparsers.add_parser("sql", help="a read-only SQL query on the history database"))
    p.add_argument("query", help='e.g. "SELECT commit, geomean_us FROM runs ORDER BY started_at"')
    p.add_argument("--max-colwidth", type=bounded(int, 4), default=80)
    p.add_argument(
        "--timeout",
        type=bounded(float, 0, strict=True),
        default=SQL_TIMEOUT_S,
        help=f"seconds the query may run before it is stopped (default {SQL_TIMEOUT_S:g}): a read holds the history",
    )
    p.add_argument(
        "--max-rows", type=bounded(int, 1), default=SQL_MAX_ROWS, help=f"rows printed at most (default {SQL_MAX_ROWS})"
    )
    add_db_argument(p)
    p.set_defaults(func=cmd_sql)

    p = one_line_errors(subparsers.add_parser("jobs", help="the job queue, newest first (--log ID: one job's log)"))
    p.add_argument("--status", choices=("queued", "running", "done", "failed"))
    p.add_argument("--limit", type=bounded(int, 1), default=30)
    p.add_argument("--log", type=int, metavar="ID", help="print the log of job ID")
    add_db_argument(p)
    p.set_defaults(func=cmd_jobs)
