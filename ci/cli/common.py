"""Helpers shared by the ``solci`` commands (one public module, as pipx keeps ``commands/common.py``).

Every command module (``ci.cli.commands``, ``ci.cli.read``, ``ci.cli.up``, ...) takes its database
handle, argument groups, error handling, table printing and "run this commit now" from here.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from ci.harness.args import EXIT_INTERRUPTED, bounded
from ci.harness.terminal import visible
from ci.service.executors.base import EXECUTOR_KINDS, ExecutorUnavailable, MeasureOptions
from ci.service.fleet import detect_gpu_model
from ci.service.gitutil import GitError
from ci.service.runner import EXIT_INFRA, EXIT_USAGE, JobReport, JobRunner, JobRunnerConfig, exit_code_for
from ci.service.triggers import enqueue_commits, guess_branch, pull_request_bases, resolve_revisions
from ci.verdict.rules import JudgeConfig
from storage.db import CatalogUnreachableError, DatabaseLockedError, StorageError, open_database
from storage.jobs import get_job
from storage.queries import step_cases, verdict

if TYPE_CHECKING:  # the heavy modules (pandas, the runner, the judge) load inside the functions that use them
    import pandas as pd

    from ci.service.runner import JobReport, JobRunner, JobRunnerConfig

Handler = Callable[[argparse.Namespace], int]


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make a (sub)parser end a bad option or value in one line on stderr (exit 2), no usage block."""

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")

    parser.error = error  # type: ignore[method-assign]
    return parser


LOCK_TIMEOUT_ENV = "SOLCI_LOCK_TIMEOUT"


def open_db(args: argparse.Namespace, *, create: bool = True) -> Any:
    """The database of ``--db`` (else $SOLCI_DB / the default); ``$SOLCI_LOCK_TIMEOUT`` seconds of waiting
    for a file another process holds (default 30). Readers pass ``create=False``: a missing file is then an
    error (exit 2), never a new empty history."""

    try:
        lock_timeout = float(os.environ.get(LOCK_TIMEOUT_ENV) or 30.0)
    except ValueError:
        raise ValueError(f"${LOCK_TIMEOUT_ENV}: expected seconds, got {os.environ[LOCK_TIMEOUT_ENV]!r}") from None
    data_path = getattr(args, "data_path", None)
    if data_path:  # child processes (the dashboard's server, hooks) open the same lake
        os.environ["SOLCI_DATA_PATH"] = str(data_path)
    return open_database(getattr(args, "db", None) or None, data_path, lock_timeout=lock_timeout, create=create)


def error(msg: str) -> None:
    print(f"solci: error: {visible(msg)}", file=sys.stderr)


def echo(msg: str) -> None:
    print(f"solci: {visible(msg)}", file=sys.stderr, flush=True)


def handles_errors(func: Handler) -> Handler:
    """Turn expected failures into one line on stderr and a distinct exit code: 4 for the infrastructure
    (the database stayed locked, the lake's catalog is unreachable, the disk is full), 2 for everything else
    (bad values, unknown commit or run, not a repository, corrupt or newer database)."""

    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:

        try:
            return func(args)
        except (DatabaseLockedError, CatalogUnreachableError) as exc:
            error(str(exc))
            return EXIT_INFRA
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                error(f"the disk is full: {exc}")
                return EXIT_INFRA
            error(str(exc))
            return EXIT_USAGE
        except (StorageError, GitError, ExecutorUnavailable, ValueError) as exc:
            error(str(exc))
            return EXIT_USAGE

    return wrapper


def print_table(df: pd.DataFrame, *, empty: str = "(no rows)", max_colwidth: int = 60) -> None:
    import pandas as pd

    if df is None or df.empty:
        print(empty)
        return
    text = df.map(lambda v: visible(v) if isinstance(v, str) else v)  # cells may hold a commit's text
    with pd.option_context("display.width", 250, "display.max_columns", None, "display.max_rows", None):
        print(text.to_string(index=False, max_colwidth=max_colwidth))


def add_db_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        help="history: a DuckDB file, or ducklake:postgres:<libpq connection string> for a lake several hosts "
        "share (default: $SOLCI_DB, else ./.solci/history.duckdb)",
    )
    p.add_argument("--data-path", help="a lake's data folder (default: $SOLCI_DATA_PATH; needed to create a lake)")


def add_runner_options(p: argparse.ArgumentParser) -> None:
    """The runner's, the measurement's and the judging's options; a bad value (``--iters 0``) is refused here
    (exit 2), before anything is queued, never measured as the commit's failure."""

    g = p.add_argument_group("runner")
    g.add_argument(
        "--executor",
        choices=EXECUTOR_KINDS,
        default=None,
        help="where to build and measure (default: $SOLCI_EXECUTOR, else auto: docker when an "
        "engine answers and the base image exists, else local)",
    )
    g.add_argument(
        "--gpu",
        default="gpu0",
        help="GPU slot of this runner: one job at a time per slot (gpuN also selects CUDA device N; default gpu0)",
    )
    g.add_argument("--base-image", help="docker executor: image with the dependencies (default solci-deps:latest)")
    g.add_argument(
        "--trusted",
        action="store_true",
        help="local executor: run the commit's kernel WITHOUT the bubblewrap sandbox (it can then read "
        "and write whatever this user can); only for commits you trust",
    )
    g.add_argument(
        "--notify",
        metavar="URL",
        default=None,
        help="POST a JSON message (Slack-compatible text plus the verdict's summary) to URL when a step opens, "
        "is fixed, or a commit breaks; retried with backoff, never failing a job (default: $SOLCI_NOTIFY)",
    )
    g.add_argument(
        "--timeout",
        type=bounded(float, 0.0, strict=True),
        default=3600.0,
        help="seconds for one measurement (default 3600)",
    )
    m = p.add_argument_group("measurement (passed to `solci measure`)")
    m.add_argument("--cases", help="cases, e.g. '1,7' or '4,128;8,256', 'smoke' or 'all' (default: measure's)")
    m.add_argument("--rounds", type=bounded(int, 1), help="correctness rounds (at least 1)")
    m.add_argument("--warmup", type=bounded(int, 0), help="warm-up iterations (0 or more)")
    m.add_argument("--iters", type=bounded(int, 1), help="timed iterations (at least 1)")
    m.add_argument("--case-timeout", type=bounded(float, 0.0, strict=True), help="seconds per case")
    m.add_argument("--impl", help="the kernel as MODULE:FUNCTION")
    m.add_argument(
        "--measure-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="another `solci measure` argument (repeatable), e.g. --measure-arg=--no-cupti",
    )
    j = p.add_argument_group("judging (docs/verdicts.md)")
    j.add_argument(
        "--min-effect",
        type=bounded(float, 0.0, strict=True),
        default=JudgeConfig.min_effect,
        help=f"smallest relative change reported (default {JudgeConfig.min_effect:g})",
    )
    j.add_argument(
        "--k",
        type=bounded(float, 0.0, strict=True),
        default=JudgeConfig.k,
        help=f"screening: a change must exceed k standard errors too (default {JudgeConfig.k:g})",
    )
    j.add_argument(
        "--confirm-pairs",
        type=bounded(int, 1),
        default=JudgeConfig.pairs,
        help=f"interleaved pairs that confirm a change (default {JudgeConfig.pairs})",
    )
    j.add_argument(
        "--no-confirm",
        action="store_true",
        help="decide on the screening alone (no re-measurement; drift or clocks make it ambiguous)",
    )


def runner_config(args: argparse.Namespace) -> JobRunnerConfig:

    cases = args.cases.replace(";", " ").split() if args.cases else None
    measure = MeasureOptions(
        cases=";".join(cases) if cases else None,
        rounds=args.rounds,
        warmup=args.warmup,
        iters=args.iters,
        case_timeout=args.case_timeout,
        impl=args.impl,
        extra_args=list(args.measure_arg),
        timeout=args.timeout,
    )
    executor_options: dict[str, Any] = {"base_image": args.base_image} if args.base_image else {}
    if getattr(args, "trusted", False):
        executor_options["sandbox"] = "none"
    notify_url = getattr(args, "notify", None)
    if notify_url and not notify_url.startswith(("http://", "https://")):
        raise ValueError(f"--notify: expected an http:// or https:// URL, got {notify_url!r}")
    config = JobRunnerConfig(
        gpu=args.gpu,
        executor=args.executor,
        executor_options=executor_options,
        measure=measure,
        judge={"min_effect": args.min_effect, "k": args.k, "pairs": args.confirm_pairs},
        confirm=not args.no_confirm,
    )
    if notify_url:
        config.notify = notify_url
    return config


def print_report(db: Any, report: JobReport, *, show_log: bool = False) -> None:
    """One job's outcome: the verdict and its message, the step's cases, and the log tail when it failed."""

    print(
        f"{report.commit}  {report.outcome.upper()}  (job {report.job_id}, run {report.run_id or '-'}, "
        f"{report.wall_s:.0f} s)"
    )
    if not report.recorded:
        print(f"  NOT RECORDED: {visible(report.message)}")
    v = verdict(db, report.run_id) if report.run_id else None
    if v is not None:
        print(f"  {visible(v['message'])}")
        if v.get("step_id"):
            cases = step_cases(db, v["step_id"])
            if not cases.empty:
                print_table(format_changes(cases, ("change", "lo", "hi")), max_colwidth=40)
    if show_log or report.outcome not in ("passed", "regressed", "improved", "not_reproduced", "ambiguous"):
        tail = report.log.strip().splitlines()[-40:]
        print(f"--- log (tail; full log: solci jobs --log {report.job_id}) ---")
        print(visible("\n".join(tail)))


def format_changes(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """Relative changes as signed percentages ("+3.1%"), for tables printed to a terminal."""
    import pandas as pd

    out = df.copy()
    for c in columns:
        if c in out.columns:
            out[c] = out[c].map(lambda v: "-" if v is None or pd.isna(v) else f"{v:+.1%}")
    return out


def install_stop_signals() -> threading.Event:
    """SIGTERM stops the loop between jobs (a second one stops at once); SIGINT (Ctrl-C) stops at once
    (``dispatch``: exit 130). Returns the event a SIGTERM sets."""
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
def wait_for_jobs(db: Any, job_ids: list[int], runner: JobRunner, *, stop: threading.Event) -> dict[int, Any]:
    """Run these jobs (each claimed with ``JobRunner.claim``; ones another runner took are waited for) until all
    are finished or ``stop`` is set: the final Job rows of those that finished (``unfinished`` names the rest)."""

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
            if stop.is_set():  # a stop signal came while a job ran: the rest stay queued
                continue
            if job.status == "queued":
                claimed = runner.claim(job_id=jid)
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
    for jid in pending:  # a stop signal ends the loop above: the job it let finish is done, not left
        job = get_job(db, jid)
        if job is not None and job.status in ("done", "failed"):
            done[jid] = job
    return done


def unfinished(job_ids: list[int], done: dict[int, Any]) -> list[int]:
    """The jobs a stop signal left unfinished (said on stderr): what makes ``solci run``, ``solci up`` and
    ``solci watch --once`` exit 130 (EXIT_INTERRUPTED), whatever the finished ones' outcomes."""
    left = list(dict.fromkeys(j for j in job_ids if j not in done))
    if left:
        echo(f"stopped before job(s) {', '.join(map(str, left))} finished (still queued for a worker)")
    return left


def jobs_exit_code(job_ids: list[int], done: dict[int, Any]) -> int:
    """The exit code of jobs a command queued and ran (``wait_for_jobs``): 130 when a stop signal left one
    unfinished (``unfinished``), else the worst of their outcomes (``ci.service.runner.exit_code_for``)."""

    if unfinished(job_ids, done):
        return EXIT_INTERRUPTED
    return exit_code_for([done[j].outcome or "error" for j in job_ids])


def run_commit_now(
    db: Any, args: argparse.Namespace, repo: str, commit: str, *, branch: str | None = None, base: str | None = None
) -> JobReport | None:
    """Queue one commit (again, even when it was measured before) and run its job here, now: what ``solci run``
    and ``solci up`` do. With ``base`` (a pull request's base branch, e.g. origin/main) the commit is judged
    against the level of its merge-base with it, measured first (as main's commit) when it never was. Returns
    the finished job's report, or None when a stop signal came first (exit 130)."""

    canon, source, shas = resolve_revisions(repo, [commit])
    sha = shas[-1]
    branch = branch or guess_branch(source, sha)
    config = runner_config(args)
    config.gpu_model = config.gpu_model or detect_gpu_model(config.gpu)
    bases = pull_request_bases(source, [sha], base) if base else None
    queued = enqueue_commits(
        db, canon, [sha], branch=branch, trigger="manual", force=True, bases=bases, gpu_model=config.gpu_model
    )
    for q in queued[:-1]:  # the merge-base, queued first as main's commit
        echo(f"job {q.job_id}: {q.label(branch, base)}")
    ids = [q.job_id for q in queued]
    job_id, merge = queued[-1].job_id, queued[-1].base
    runner = JobRunner(db, config, echo=echo)
    against = f", judged against the level of {merge[:12]}" if merge else ""
    echo(f"job {job_id}: {sha[:12]} of {canon}{against} with the {runner.executor.name} executor into {db.path}")
    runner.start()
    done = wait_for_jobs(db, ids, runner, stop=install_stop_signals())
    if unfinished(ids, done):
        return None
    job = done[job_id]
    report = JobReport(
        job.id, job.repo, job.commit, job.branch, job.outcome or "error", job.status, job.run_id, log=job.log or ""
    )
    if job.started_at and job.finished_at:
        report.wall_s = (job.finished_at - job.started_at).total_seconds()
    return report
