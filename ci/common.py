"""Helpers shared by the ``solci`` commands (one public module, as pipx keeps ``commands/common.py``).

Every command module (``ci.commands``, ``ci.read_commands``, ``dashboard.commands``, ...) takes its database
handle, argument groups, error handling, table printing and "run this commit now" from here.
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
from ci.runner import EXIT_USAGE, JobReport, Runner, RunnerConfig, claim_job

Handler = Callable[[argparse.Namespace], int]

Handler = Callable[[argparse.Namespace], int]
LOCK_TIMEOUT_ENV = "SOLCI_LOCK_TIMEOUT"


def open_db(args: argparse.Namespace) -> Any:
    """The database of ``--db`` (else $SOLCI_DB / the default); ``$SOLCI_LOCK_TIMEOUT`` seconds of waiting
    for a file another process holds (default 30)."""
    from storage.db import Database

    try:
        lock_timeout = float(os.environ.get(LOCK_TIMEOUT_ENV) or 30.0)
    except ValueError:
        raise ValueError(f"${LOCK_TIMEOUT_ENV}: expected seconds, got {os.environ[LOCK_TIMEOUT_ENV]!r}") from None
    return Database(getattr(args, "db", None) or None, lock_timeout=lock_timeout)


def error(msg: str) -> None:
    print(f"solci: error: {msg}", file=sys.stderr)


def echo(msg: str) -> None:
    print(f"solci: {msg}", file=sys.stderr, flush=True)


def handles_errors(func: Handler) -> Handler:
    """Turn expected failures (storage, git, executor, bad values) into one line on stderr and exit 2."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        from storage.db import StorageError

        try:
            return func(args)
        except (StorageError, GitError, ExecutorUnavailable, FileExistsError, ValueError) as exc:
            error(str(exc))
            return EXIT_USAGE

    return wrapper


def print_table(df: pd.DataFrame, *, empty: str = "(no rows)", max_colwidth: int = 60) -> None:
    if df is None or df.empty:
        print(empty)
        return
    with pd.option_context("display.width", 250, "display.max_columns", None, "display.max_rows", None):
        print(df.to_string(index=False, max_colwidth=max_colwidth))


def add_db_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="history database file (default: $SOLCI_DB, else ./.solci/history.duckdb)")


def add_runner_options(p: argparse.ArgumentParser) -> None:
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


def install_stop_signals() -> threading.Event:
    """SIGTERM/SIGINT stop the loop between jobs (a second one stops at once)."""
    stop = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        echo(f"got {signal.Signals(signum).name}: stopping after the current job")
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
                echo(f"job {jid} is {where}; waiting")
        if pending and not progressed:
            stop.wait(2.0)
    return done


def run_commit_now(
    db: Any, args: argparse.Namespace, repo: str, commit: str, *, branch: str | None = None
) -> JobReport | None:
    """Queue one commit (again, even when it was measured before) and run its job here, now: what ``solci run``
    and ``solci up`` do. Returns the finished job's report, or None when interrupted first."""
    from ci.triggers import guess_branch, resolve_revisions
    from storage.jobs import enqueue

    canon, source, shas = resolve_revisions(repo, [commit])
    sha = shas[-1]
    branch = branch or guess_branch(source, sha)
    job_id, _ = enqueue(db, canon, sha, branch=branch, trigger="manual", force=True)
    runner = Runner(db, runner_config(args), echo=echo)
    echo(f"job {job_id}: {sha[:12]} of {canon} with the {runner.executor.name} executor into {db.path}")
    runner.start()
    job = wait_for_jobs(db, [job_id], runner, stop=install_stop_signals()).get(job_id)
    if job is None:
        return None
    report = JobReport(job.id, job.repo, job.commit, job.branch, job.outcome or "error", job.status, job.run_id,
                       log=job.log or "")  # fmt: skip
    if job.started_at and job.finished_at:
        report.wall_s = (job.finished_at - job.started_at).total_seconds()
    return report
