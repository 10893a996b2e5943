"""The runner's subcommands of ``solci``.

    solci run --repo R --commit SHA       measure one commit now (queued, then run inline); exit 0 passed,
                                          3 regressed, 1 broken (build_failed, crashed, timed_out, incorrect)
    solci watch REPO [--branch main]      poll a branch, queue every new commit (oldest first) and run them;
                                          --once: one poll (exit code as for run), --queue-only: no running
    solci worker                          process the queue (one job at a time for one GPU slot)
    solci enqueue REPO REV...             queue commits (REV may be a range OLD..NEW); what hooks call
    solci hooks install|uninstall REPO    git hook that queues each commit/push instantly
    solci history | flags | records | jobs | sql "SELECT ..."   read the history (tables)

Errors of usage (unknown commit, not a repository, locked or corrupt database) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import pandas as pd

from ci.executors import EXECUTOR_KINDS, ExecutorUnavailable, MeasureOptions
from ci.gitutil import GitError
from ci.runner import EXIT_USAGE, JobReport, Runner, RunnerConfig, claim_job, exit_code_for

Handler = Callable[[argparse.Namespace], int]


# ------------------------------------------------------------------------------------------------ helpers
LOCK_TIMEOUT_ENV = "SOLCI_LOCK_TIMEOUT"


def _db(args: argparse.Namespace) -> Any:
    """The database of ``--db`` (else $SOLCI_DB / the default); ``$SOLCI_LOCK_TIMEOUT`` seconds of waiting
    for a file another process holds (default 30)."""
    from storage.db import Database

    try:
        lock_timeout = float(os.environ.get(LOCK_TIMEOUT_ENV) or 30.0)
    except ValueError:
        raise ValueError(f"${LOCK_TIMEOUT_ENV}: expected seconds, got {os.environ[LOCK_TIMEOUT_ENV]!r}") from None
    return Database(getattr(args, "db", None) or None, lock_timeout=lock_timeout)


def _err(msg: str) -> None:
    print(f"solci: error: {msg}", file=sys.stderr)


def _echo(msg: str) -> None:
    print(f"solci: {msg}", file=sys.stderr, flush=True)


def handles_errors(func: Handler) -> Handler:
    """Turn expected failures (storage, git, executor, bad values) into one line on stderr and exit 2."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        from storage.db import StorageError

        try:
            return func(args)
        except (StorageError, GitError, ExecutorUnavailable, FileExistsError, ValueError) as exc:
            _err(str(exc))
            return EXIT_USAGE

    return wrapper


def print_table(df: pd.DataFrame, *, empty: str = "(no rows)", max_colwidth: int = 60) -> None:
    if df is None or df.empty:
        print(empty)
        return
    with pd.option_context("display.width", 250, "display.max_columns", None, "display.max_rows", None):
        print(df.to_string(index=False, max_colwidth=max_colwidth))


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="history database file (default: $SOLCI_DB, else ./.solci/history.duckdb)")


def _add_runner_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("runner")
    g.add_argument("--executor", choices=EXECUTOR_KINDS, default=None,
                   help="where to build and measure (default: $SOLCI_EXECUTOR, else auto: docker when an "
                        "engine answers and the base image exists, else local)")  # fmt: skip
    g.add_argument("--gpu", default="gpu0", help="GPU slot of this runner: one job at a time per slot "
                   "(gpuN also selects CUDA device N; default gpu0)")  # fmt: skip
    g.add_argument("--base-image", help="docker executor: image with the dependencies (default solci-deps:latest)")
    g.add_argument("--timeout", type=float, default=3600.0, help="seconds for one measurement (default 3600)")
    m = p.add_argument_group("measurement (passed to `solci measure`)")
    m.add_argument("--cases", help="cases, e.g. '1,7' or '4,128;8,256', 'smoke' or 'all' (default: measure's)")
    m.add_argument("--rounds", type=int, help="correctness rounds")
    m.add_argument("--warmup", type=int, help="warm-up iterations")
    m.add_argument("--iters", type=int, help="timed iterations")
    m.add_argument("--case-timeout", type=float, help="seconds per case")
    m.add_argument("--impl", help="the kernel as MODULE:FUNCTION")
    m.add_argument("--measure-arg", action="append", default=[], metavar="ARG",
                   help="another `solci measure` argument (repeatable), e.g. --measure-arg=--no-cupti")  # fmt: skip
    j = p.add_argument_group("judging")
    j.add_argument("--min-effect", type=float, default=0.03, help="smallest relative change flagged (0.03)")
    j.add_argument("--alpha", type=float, default=0.01, help="significance level of Mann-Whitney U (0.01)")
    j.add_argument("--baseline-runs", type=int, default=5, help="passing runs the baseline pools (5)")


def runner_config(args: argparse.Namespace) -> RunnerConfig:
    cases = args.cases.replace(";", " ").split() if args.cases else None
    extra = list(args.measure_arg)
    if cases and len(cases) > 1:  # measure takes several case tokens after one --cases
        extra = ["--cases", *cases, *extra]
        cases = None
    measure = MeasureOptions(
        cases=cases[0] if cases else None, rounds=args.rounds, warmup=args.warmup, iters=args.iters,
        case_timeout=args.case_timeout, impl=args.impl, extra_args=extra, timeout=args.timeout,
    )  # fmt: skip
    executor_options = {"base_image": args.base_image} if args.base_image else {}
    return RunnerConfig(
        gpu=args.gpu, executor=args.executor, executor_options=executor_options, measure=measure,
        judge={"min_effect": args.min_effect, "alpha": args.alpha, "baseline_runs": args.baseline_runs},
    )  # fmt: skip


def print_report(db: Any, report: JobReport, *, show_log: bool = False) -> None:
    from storage.queries import flags

    print(f"{report.commit}  {report.outcome.upper()}  (job {report.job_id}, run {report.run_id or '-'}, "
          f"{report.wall_s:.0f} s)")  # fmt: skip
    if report.run_id:
        df = flags(db, run_id=report.run_id)
        if not df.empty:
            print_table(df[["case", "kind", "magnitude", "p_value", "message"]], max_colwidth=110)
    if show_log or report.outcome not in ("passed", "regressed"):
        tail = report.log.strip().splitlines()[-40:]
        print(f"--- log (tail; full log: solci jobs --log {report.job_id}) ---")
        print("\n".join(tail))


def _install_sigterm() -> threading.Event:
    """SIGTERM/SIGINT stop the loop between jobs (a second one stops at once)."""
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        _echo(f"got {signal.Signals(signum).name}: stopping after the current job")
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
    return stop


# ------------------------------------------------------------------------------------------------ run
def wait_for_jobs(db: Any, job_ids: list[int], runner: Runner, *, stop: threading.Event) -> dict[int, Any]:
    """Run these jobs (claiming each; ones another runner took are waited for); their final Job rows."""
    from storage.jobs import get_job

    pending = list(job_ids)
    done: dict[int, Any] = {}
    announced: set[int] = set()
    while pending and not stop.is_set():
        progressed = False
        for jid in list(pending):
            job = get_job(db, jid)
            if job is None:
                raise ValueError(f"job {jid} vanished from {db.path}")
            if job.status in ("done", "failed"):
                done[jid] = job
                pending.remove(jid)
                progressed = True
                continue
            if job.status == "queued":
                claimed = claim_job(db, jid, runner.config.worker, runner.config.gpu)
                if claimed is not None:
                    runner.process(claimed)
                    progressed = True
                    continue
            if jid not in announced:
                announced.add(jid)
                where = "running elsewhere" if job.status == "running" else f"waiting for {runner.config.gpu}"
                _echo(f"job {jid} is {where}; waiting")
        if pending and not progressed:
            stop.wait(2.0)
    return done


@handles_errors
def cmd_run(args: argparse.Namespace) -> int:
    from ci.triggers import guess_branch, resolve_revisions
    from storage.jobs import enqueue

    db = _db(args)
    repo, source, shas = resolve_revisions(args.repo, [args.commit])
    sha = shas[-1]
    branch = args.branch or guess_branch(source, sha)
    job_id, _ = enqueue(db, repo, sha, branch=branch, trigger="manual", force=True)
    runner = Runner(db, runner_config(args), echo=_echo)
    _echo(f"job {job_id}: {sha[:12]} of {repo} with the {runner.executor.name} executor")
    runner.start()
    stop = _install_sigterm()
    job = wait_for_jobs(db, [job_id], runner, stop=stop).get(job_id)
    if job is None:
        return 130
    report = JobReport(job.id, job.repo, job.commit, job.branch, job.outcome or "error", job.status,
                       job.run_id, log=job.log or "")  # fmt: skip
    if job.started_at and job.finished_at:
        report.wall_s = (job.finished_at - job.started_at).total_seconds()
    print_report(db, report, show_log=args.verbose)
    return exit_code_for([report.outcome])


# ------------------------------------------------------------------------------------------------ watch
@handles_errors
def cmd_watch(args: argparse.Namespace) -> int:
    from ci.triggers import PollResult, poll, watch

    db = _db(args)
    runner = None if args.queue_only else Runner(db, runner_config(args), echo=_echo)
    stop = _install_sigterm()
    options = {"backfill": args.backfill, "max_commits": args.max_commits}

    def report_poll(result: PollResult) -> None:
        if result.skipped:
            _echo(f"{result.skipped} older new commit(s) of {result.branch} left out (--max-commits)")
        for q in result.queued:
            _echo(f"queued {q.commit[:12]} ({result.branch}) as job {q.job_id}"
                  + ("" if q.created else " (already queued or measured)"))  # fmt: skip

    if args.once:
        result = poll(db, args.repo, args.branch, **options)
        report_poll(result)
        if not result.queued:
            _echo(f"no new commit on {result.branch} of {result.repo} (head {str(result.head)[:12]})")
        if runner is None:
            return 0
        runner.start()
        jobs = wait_for_jobs(db, [q.job_id for q in result.queued], runner, stop=stop)
        for job in jobs.values():
            print(f"{job.commit}  {(job.outcome or job.status).upper()}  (job {job.id})")
        return exit_code_for([j.outcome or "error" for j in jobs.values()])

    if runner is not None:
        runner.start()

    def on_poll(result: PollResult) -> None:
        report_poll(result)
        if runner is not None:
            runner.run(once=True, stop=stop)

    _echo(f"watching {args.branch} of {args.repo} every {args.interval:g} s (Ctrl-C to stop)")
    watch(db, args.repo, args.branch, interval=args.interval, stop=stop, on_poll=on_poll,
          on_error=lambda exc: _echo(f"poll failed: {exc}"), **options)  # fmt: skip
    return 0


# ------------------------------------------------------------------------------------------------ worker
@handles_errors
def cmd_worker(args: argparse.Namespace) -> int:
    db = _db(args)
    config = runner_config(args)
    config.poll_interval = args.interval
    runner = Runner(db, config, echo=_echo)
    _echo(f"worker {config.worker} on {config.gpu}, {runner.executor.name} executor, db {db.path}")
    stop = _install_sigterm()
    reports = runner.run(once=args.once, max_jobs=args.max_jobs, stop=stop)
    return exit_code_for([r.outcome for r in reports]) if args.once else 0


# ------------------------------------------------------------------------------------------------ enqueue
@handles_errors
def cmd_enqueue(args: argparse.Namespace) -> int:
    from ci.triggers import enqueue_commits, guess_branch, resolve_revisions

    db = _db(args)
    repo, source, shas = resolve_revisions(args.repo, args.revisions)
    if not shas:
        _echo("nothing to queue (empty range)")
        return 0
    branch = args.branch or guess_branch(source, shas[-1])
    for q in enqueue_commits(db, repo, shas, branch=branch, trigger=args.trigger, force=args.force):
        state = "queued" if q.created else "already queued or measured"
        print(f"solci: {q.commit[:12]} ({branch or 'no branch'}) {state}: job {q.job_id}")
    return 0


# ------------------------------------------------------------------------------------------------ hooks
@handles_errors
def cmd_hooks(args: argparse.Namespace) -> int:
    from ci import hooks

    db = _db(args)
    if args.action == "install":
        path = hooks.install(args.repo, db.path, python=args.python)
        print(f"solci: installed {path} (queues into {db.path.resolve()})")
    else:
        path = hooks.uninstall(args.repo)
        print(f"solci: removed {path}" if path else "solci: no solci hook installed there")
    return 0


# ------------------------------------------------------------------------------------------------ reading
@handles_errors
def cmd_history(args: argparse.Namespace) -> int:
    from storage.queries import history

    limit = args.limit if args.limit and args.limit > 0 else None
    df = history(_db(args), case=args.case, hardware=args.hardware, protocol=args.protocol, limit=limit)
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

    df = flags(_db(args), run_id=args.run, commit=args.commit, limit=args.limit)
    if not df.empty:
        df = df.assign(commit=df["commit"].str[:12], run_id=df["run_id"].str[:8])
        df = df[["started_at", "commit", "run_id", "case", "kind", "magnitude", "p_value", "message"]]
    print_table(df, empty="(no flags)", max_colwidth=110)
    return 0


@handles_errors
def cmd_records(args: argparse.Namespace) -> int:
    from storage.queries import records

    print_table(records(_db(args)))
    return 0


@handles_errors
def cmd_sql(args: argparse.Namespace) -> int:
    from storage.queries import run_sql

    print_table(run_sql(_db(args), args.query), max_colwidth=args.max_colwidth)
    return 0


@handles_errors
def cmd_jobs(args: argparse.Namespace) -> int:
    from storage.jobs import get_job, list_jobs

    db = _db(args)
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


# ------------------------------------------------------------------------------------------------ register
def register(subparsers: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter

    p = subparsers.add_parser("run", help="measure one commit now and judge it (exit 3 regressed, 1 broken)",
                              formatter_class=fmt)  # fmt: skip
    p.add_argument("--repo", default=".", help="repository: a path or a URL (default: .)")
    p.add_argument("--commit", default="HEAD", help="commit or revision (default HEAD)")
    p.add_argument("--branch", help="branch label (default: a branch holding the commit)")
    p.add_argument("-v", "--verbose", action="store_true", help="print the log tail even when it passed")
    _add_db(p)
    _add_runner_options(p)
    p.set_defaults(func=cmd_run)

    p = subparsers.add_parser("watch", help="poll a branch; queue and run every new commit, oldest first")
    p.add_argument("repo", help="repository: a path or a URL")
    p.add_argument("--branch", default="main", help="branch to follow (default main)")
    p.add_argument("--once", action="store_true", help="one poll, run what it queued, exit (0/1/3 as run)")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between polls (default 60)")
    p.add_argument("--queue-only", action="store_true", help="only queue; a `solci worker` runs the jobs")
    p.add_argument(
        "--backfill",
        type=int,
        default=0,
        help="first poll of a branch: queue this many commits up to its head (default: head only)",
    )
    p.add_argument("--max-commits", type=int, default=None,
                   help="queue at most the N newest new commits per poll, leaving older ones out "
                        "(default: no cap, every commit is queued)")  # fmt: skip
    _add_db(p)
    _add_runner_options(p)
    p.set_defaults(func=cmd_watch)

    p = subparsers.add_parser("worker", help="process the job queue (one job at a time for one GPU slot)")
    p.add_argument("--once", action="store_true", help="exit when the queue is empty")
    p.add_argument("--max-jobs", type=int, help="exit after this many jobs")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between looks at an empty queue (5)")
    _add_db(p)
    _add_runner_options(p)
    p.set_defaults(func=cmd_worker)

    p = subparsers.add_parser("enqueue", help="queue commits of a repository (what the git hooks call)")
    p.add_argument("repo", help="repository: a path or a URL")
    p.add_argument("revisions", nargs="+", metavar="REV", help="commits, or ranges OLD..NEW (oldest first)")
    p.add_argument("--branch", help="branch label (default: a branch holding the commit)")
    p.add_argument("--trigger", default="manual", help="what queued it (manual, hook, watch; default manual)")
    p.add_argument("--force", action="store_true", help="queue again even if already queued or measured")
    _add_db(p)
    p.set_defaults(func=cmd_enqueue)

    p = subparsers.add_parser("hooks", help="install/uninstall the git hook that queues each commit or push")
    p.add_argument("action", choices=("install", "uninstall"))
    p.add_argument("repo", help="repository path (bare: post-receive; working: post-commit)")
    p.add_argument("--python", help="Python the hook runs (default: this one)")
    _add_db(p)
    p.set_defaults(func=cmd_hooks)

    p = subparsers.add_parser("history", help="per-case results of the stored runs, oldest first")
    p.add_argument("--case", help="one case, e.g. 4,128 or B4_S128 (__suite__: the geometric mean)")
    p.add_argument("--hardware", help="hardware label or GPU model, e.g. H200")
    p.add_argument("--protocol", help="protocol hash or name")
    p.add_argument("--limit", type=int, default=20,
                   help="only the most recent N runs (default 20; 0: all, which can be long)")  # fmt: skip
    _add_db(p)
    p.set_defaults(func=cmd_history)

    p = subparsers.add_parser("flags", help="regressions, improvements, records, incorrect runs; newest first")
    p.add_argument("--run", help="one run id")
    p.add_argument("--commit", help="one commit (or its prefix)")
    p.add_argument("--limit", type=int, default=50, help="at most N flags (default 50)")
    _add_db(p)
    p.set_defaults(func=cmd_flags)

    p = subparsers.add_parser("records", help="best-known figures: published leaderboard and project bests")
    _add_db(p)
    p.set_defaults(func=cmd_records)

    p = subparsers.add_parser("sql", help="a read-only SQL query on the history database")
    p.add_argument("query", help='e.g. "SELECT commit, geomean_us FROM runs ORDER BY started_at"')
    p.add_argument("--max-colwidth", type=int, default=80)
    _add_db(p)
    p.set_defaults(func=cmd_sql)

    p = subparsers.add_parser("jobs", help="the job queue, newest first (--log ID: one job's log)")
    p.add_argument("--status", choices=("queued", "running", "done", "failed"))
    p.add_argument("--limit", type=int, default=30)
    p.add_argument("--log", type=int, metavar="ID", help="print the log of job ID")
    _add_db(p)
    p.set_defaults(func=cmd_jobs)
