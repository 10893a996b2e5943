"""The runner's subcommands of ``solci``.

    solci run --repo R --commit SHA       measure one commit now (queued, then run inline); exit 0 passed,
                                          3 regressed, 1 broken (build_failed, crashed, timed_out, incorrect)
    solci watch REPO [--branch main]      poll a branch, queue every new commit (oldest first) and run them;
                                          --once: one poll (exit code as for run), --queue-only: no running
    solci worker                          process the queue (one job at a time for one GPU slot)
    solci enqueue REPO REV...             queue commits (REV may be a range OLD..NEW)
    solci hooks install|uninstall REPO    git hook that queues each commit/push instantly
    solci ack COMMIT|step:ID --reason R   accept an open step as intended (by its commit or its step id)

Errors of usage (unknown commit, not a repository, locked or corrupt database) print one line and exit 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ci.cli.common import (
    EXIT_INTERRUPTED,
    add_db_argument,
    add_runner_options,
    bounded,
    echo,
    handles_errors,
    install_stop_signals,
    jobs_exit_code,
    one_line_errors,
    open_db,
    print_report,
    run_commit_now,
    runner_config,
    wait_for_jobs,
)
from ci.harness.terminal import visible
from ci.service import hooks
from ci.service.runner import JobRunner, exit_code_for
from ci.service.triggers import (
    PollResult,
    enqueue_commits,
    guess_branch,
    poll,
    pull_request_bases,
    resolve_revisions,
    watch,
)
from storage.verdicts import acknowledge


@handles_errors
def cmd_run(args: argparse.Namespace) -> int:
    db = open_db(args)
    report = run_commit_now(db, args, args.repo, args.commit, branch=args.branch, base=args.base)
    if report is None:  # a stop signal came before the job finished
        return EXIT_INTERRUPTED
    print_report(db, report, show_log=args.verbose)
    return exit_code_for([report.exit_outcome])


@handles_errors
def cmd_ack(args: argparse.Namespace) -> int:
    """Accept the open step(s) at a commit, or one step by its id (``step:ID`` or ``--step ID``, as ``solci
    report`` names it), as intended (a deliberate slowdown): status acknowledged."""

    commit, step = args.commit, args.step
    if commit is not None and commit.startswith("step:") and step is None:
        commit, step = None, commit.removeprefix("step:")
    if (commit is None) == (step is None):
        raise ValueError("ack: name a commit or a step id (step:ID or --step ID), one of the two")
    changed = acknowledge(open_db(args), commit, args.reason, hardware=args.hardware, step_id=step)
    for s in changed:
        print(
            visible(
                f"solci: step {s['step_id']} at {s['commit'][:12]} on {s['hardware']} ({s['previous_status']}) "
                f"acknowledged: {args.reason}"
            )
        )
    return 0


# ------------------------------------------------------------------------------------------------ watch
@handles_errors
def cmd_watch(args: argparse.Namespace) -> int:

    if args.base:  # an unknown base is one line and exit 2 now, not a failed poll every interval
        resolve_revisions(args.repo, [args.base])
    db = open_db(args)
    runner = None if args.queue_only else JobRunner(db, runner_config(args), echo=echo)
    stop = install_stop_signals()
    options = {"backfill": args.backfill, "max_commits": args.max_commits, "base": args.base}

    def report_poll(result: PollResult) -> None:
        for note in result.notes:  # a walk's cap, --max-commits, pending updates retried: each says what and why
            echo(note)
        for q in result.queued:
            state = "" if q.created else " (already queued or measured)"
            echo(f"queued {q.label(result.branch, args.base)} as job {q.job_id}{state}")

    if args.once:
        result = poll(db, args.repo, args.branch, **options)
        report_poll(result)
        if not result.queued:
            echo(f"no new commit on {result.branch} of {result.repo} (head {str(result.head)[:12]})")
        if runner is None:
            return 0
        runner.start()
        job_ids = [q.job_id for q in result.queued]
        jobs = wait_for_jobs(db, job_ids, runner, stop=stop)
        for job in jobs.values():
            print(visible(f"{job.commit}  {(job.outcome or job.status).upper()}  (job {job.id})"))
        return jobs_exit_code(job_ids, jobs)  # 130 when a stop signal left a queued commit unmeasured

    if runner is not None:
        runner.start()

    def on_poll(result: PollResult) -> None:
        report_poll(result)
        if runner is not None:
            runner.run(once=True, stop=stop)

    echo(f"watching {args.branch} of {args.repo} every {args.interval:g} s (Ctrl-C to stop)")
    watch(
        db,
        args.repo,
        args.branch,
        interval=args.interval,
        stop=stop,
        on_poll=on_poll,
        on_error=lambda exc: echo(f"poll failed: {exc}"),
        **options,
    )
    return 0


# ------------------------------------------------------------------------------------------------ worker
@handles_errors
def cmd_worker(args: argparse.Namespace) -> int:
    db = open_db(args)
    config = runner_config(args)
    config.poll_interval = args.interval
    if args.compact_every is not None:
        config.compact_every = args.compact_every
    runner = JobRunner(db, config, echo=echo)
    echo(f"worker {config.worker} on {config.gpu}, {runner.executor.name} executor, db {db.path}")
    stop = install_stop_signals()
    reports = runner.run(once=args.once, max_jobs=args.max_jobs, stop=stop)
    return exit_code_for([r.exit_outcome for r in reports]) if args.once else 0


# ------------------------------------------------------------------------------------------------ enqueue
@handles_errors
def cmd_enqueue(args: argparse.Namespace) -> int:

    db = open_db(args)
    repo, source, shas = resolve_revisions(args.repo, args.revisions)
    if not shas:
        echo("nothing to queue (empty range)")
        return 0
    branch = args.branch or guess_branch(source, shas[-1])
    bases = pull_request_bases(source, shas, args.base) if args.base else None
    for q in enqueue_commits(db, repo, shas, branch=branch, trigger=args.trigger, force=args.force, bases=bases):
        state = "queued" if q.created else "already queued or measured"
        print(f"solci: {q.label(branch, args.base)} {state}: job {q.job_id}")
    return 0


# ------------------------------------------------------------------------------------------------ hooks
@handles_errors
def cmd_hooks(args: argparse.Namespace) -> int:

    db = open_db(args)
    if args.action == "install":
        paths = hooks.install(args.repo, db.path, python=args.python)
        pinned = hooks.pinned_history(db.path)  # what the hooks queue into: a file's absolute path
        where = str(pinned) if isinstance(pinned, Path) else db.describe()  # a lake: without its password
        print(f"solci: installed {', '.join(map(str, paths))} (queues into {where})")
    else:
        paths = hooks.uninstall(args.repo)
        print(f"solci: removed {', '.join(map(str, paths))}" if paths else "solci: no solci hook installed there")
    return 0


def register(subparsers: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter

    p = one_line_errors(
        subparsers.add_parser(
            "run", help="measure one commit now and judge it (exit 3 regressed, 1 broken)", formatter_class=fmt
        )
    )
    p.add_argument("--repo", default=".", help="repository: a path or a URL (default: .)")
    p.add_argument("--commit", default="HEAD", help="commit or revision (default HEAD)")
    p.add_argument("--branch", help="branch label (default: a branch holding the commit)")
    p.add_argument(
        "--base",
        metavar="REF",
        help="a pull request's or branch's base (e.g. origin/main): judge the commit against the level of its "
        "merge-base with REF (measured first when it never was), in a series of its own that never moves main's",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print the log tail even when it passed")
    add_db_argument(p)
    add_runner_options(p)
    p.set_defaults(func=cmd_run)

    p = one_line_errors(subparsers.add_parser("ack", help="accept an open step (an intended slowdown) with a reason"))
    p.add_argument(
        "commit", nargs="?", help="the step's commit (or a prefix), or step:ID (a step id as `solci report` shows it)"
    )
    p.add_argument("--step", metavar="ID", help="the step by its id (as `solci report` shows it)")
    p.add_argument("--reason", required=True, help="why the change is intended (stored with the step)")
    p.add_argument("--hardware", help="only the step on this hardware label")
    add_db_argument(p)
    p.set_defaults(func=cmd_ack)

    p = one_line_errors(
        subparsers.add_parser("watch", help="poll a branch; queue and run every new commit, oldest first")
    )
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
    p.add_argument(
        "--max-commits",
        type=bounded(int, 1),
        default=None,
        help="queue at most the N newest new commits per poll, leaving older ones out "
        "(default: no cap, every commit is queued)",
    )
    p.add_argument(
        "--base",
        metavar="REF",
        help="the followed branch is a feature or pull-request branch off REF (e.g. main): each of its commits is "
        "judged against the level of its merge-base with REF (queued first), in a series of its own that never "
        "moves REF's; without it a branch is judged along its own first-parent line, as main is",
    )
    add_db_argument(p)
    add_runner_options(p)
    p.set_defaults(func=cmd_watch)

    p = one_line_errors(
        subparsers.add_parser("worker", help="process the job queue (one job at a time for one GPU slot)")
    )
    p.add_argument("--once", action="store_true", help="exit when the queue is empty")
    p.add_argument("--max-jobs", type=int, help="exit after this many jobs")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between looks at an empty queue (5)")
    p.add_argument(
        "--compact-every",
        type=bounded(int, 0),
        default=None,
        metavar="N",
        help="a lake: compact its small files every N jobs (default $SOLCI_COMPACT_EVERY, else never)",
    )
    add_db_argument(p)
    add_runner_options(p)
    p.set_defaults(func=cmd_worker)

    p = subparsers.add_parser(
        "enqueue", help="queue commits of a repository (the git hooks queue through python -m ci.service.hooks)"
    )
    p.add_argument("repo", help="repository: a path or a URL")
    p.add_argument("revisions", nargs="+", metavar="REV", help="commits, or ranges OLD..NEW (oldest first)")
    p.add_argument("--branch", help="branch label (default: a branch holding the commit)")
    p.add_argument("--trigger", default="manual", help="what queued it (manual, hook, watch; default manual)")
    p.add_argument("--force", action="store_true", help="queue again even if already queued or measured")
    p.add_argument(
        "--base",
        metavar="REF",
        help="a pull request's base (e.g. origin/main): each commit not on REF's line is judged against its "
        "merge-base with REF (queued first)",
    )
    add_db_argument(p)
    p.set_defaults(func=cmd_enqueue)

    p = subparsers.add_parser("hooks", help="install/uninstall the git hook that queues each commit or push")
    p.add_argument("action", choices=("install", "uninstall"))
    p.add_argument("repo", help="repository path (bare: post-receive; working: post-commit)")
    p.add_argument("--python", help="Python the hook runs (default: this one)")
    add_db_argument(p)
    p.set_defaults(func=cmd_hooks)
