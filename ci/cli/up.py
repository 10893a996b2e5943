"""The dashboard's subcommands of ``solci``.

solci dashboard [--db PATH] [--port 8501] [--host 127.0.0.1]
    serve the dashboard (streamlit) on the history file
solci up [--repo .] [--db PATH] [--port 8501] [--no-serve] [runner options, e.g. --cases 1,7]
    the main job on one machine: measure the checkout's HEAD exactly as CI does (queued as a job, run by
    the runner with the local executor: on a machine without a GPU, Triton's interpreter on the smoke
    cases), store it in the local DuckDB file, print the summary, then serve the dashboard on it
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ci.cli.common import (
    add_db_argument,
    add_runner_options,
    echo,
    error,
    handles_errors,
    one_line_errors,
    open_db,
    print_report,
    print_table,
    run_commit_now,
)
from ci.harness.sandbox import probe
from ci.service.executors.base import EXECUTOR_ENV
from ci.service.gitutil import GitError, local_repo
from ci.service.runner import EXIT_USAGE, exit_code_for
from storage.queries import protocol_names, run_cases, run_info

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
DEFAULT_PORT = 8501
DEFAULT_HOST = "127.0.0.1"
UP_DESCRIPTION = """\
Measure this checkout's HEAD (or --commit) exactly as CI does: it is queued as a job and the runner
measures it, stores the run in the history file and judges it against the earlier runs. The executor is
local unless --executor or $SOLCI_EXECUTOR says otherwise; without a GPU the kernel runs under Triton's
interpreter on the smoke cases (about 2.5 minutes on 2 CPU cores, fewer with more). Then the summary is
printed and the dashboard served on the history (Ctrl-C stops it; --no-serve skips it).

  solci up                          # measure HEAD of ., serve on http://localhost:8501
  solci up --cases 1,7 --iters 2    # a quicker smoke run
  solci up --no-serve --db ci.duckdb
"""


# ------------------------------------------------------------------------------------------------ dashboard
def port_free(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be bound now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def streamlit_command(host: str, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dashboard.serve",
        "run",
        str(APP),
        "--server.headless",
        "true",
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "minimal",
    ]


def serve(db_path: Path, host: str, port: int) -> int:
    """Run the streamlit server on ``db_path`` until it exits or this process is told to stop."""
    if not port_free(host, port):
        error(f"port {port} on {host} is already in use (another dashboard?); pick another with --port")
        return EXIT_USAGE
    root = str(APP.parents[1])  # `python -m dashboard.serve` finds the package from any working directory
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, SOLCI_DB=str(db_path.resolve()), PYTHONPATH=root + (os.pathsep + path if path else ""))
    url_host = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::") else host
    echo(f"dashboard on http://{url_host}:{os.getenv('SOLCI_PUBLIC_PORT', port)} (history {db_path}); Ctrl-C to stop")
    proc = subprocess.Popen(streamlit_command(host, port), env=env)

    def forward(signum: int, _frame: Any) -> None:
        proc.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        while True:
            try:
                return _serve_exit(proc.wait())
            except KeyboardInterrupt:  # a second Ctrl-C while streamlit shuts down
                proc.terminate()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _serve_exit(code: int) -> int:
    # streamlit stopped by a signal we forwarded: a normal end
    return 0 if code in (0, -signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGINT) else code


@handles_errors
def cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve an existing history: a missing file is refused (exit 2, HistoryMissingError), never created."""

    db = open_db(args, create=False)
    protocol_names(db)  # a first read: missing, corrupt, newer or locked files end here, in one line
    return serve(db.path, args.host, args.port)


# ------------------------------------------------------------------------------------------------ up
def _dirty(source: Path) -> bool:
    proc = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=source, capture_output=True, text=True
    )
    return proc.returncode == 0 and bool(proc.stdout.strip())


def print_summary(db: Any, run_id: str) -> None:
    """The stored run: hardware, suite figures and the per-case table."""

    info = run_info(db, run_id)
    if info is None:
        return
    mode = "" if info["mode"] == info["hardware_label"] else f" ({info['mode']})"
    print(
        f"\nrun {run_id} on {info['hardware_label']}{mode}, protocol {info['protocol']}: "
        f"{info['status']}, {info['n_pass']}/{info['n_cases']} cases pass"
    )
    figures = [
        ("suite geomean", info["geomean_us"], " us"),
        ("eager", info["geomean_eager_us"], " us"),
        ("cuBLAS", info["geomean_cublas_us"], " us"),
    ]
    parts = [f"{name} {v:.2f}{unit}" for name, v, unit in figures if v is not None]
    if info["score"] is not None:
        parts.append(f"SOL score {info['score'] * 100:.1f}%")
    if parts:
        print(f"  {info['hardware_label']}: " + ", ".join(parts))
    cases = run_cases(db, run_id)
    if not cases.empty:
        cols = ["case", "status", "median_us", "eager_us", "cublas_us", "t_sol_us", "score"]
        print_table(cases[cols].round(3))
    if info["mode"] == "cpu-interpreter":
        print("  (Triton interpreter on the CPU: a check of the pipeline, not GPU timings; no SOL score)")


@handles_errors
def cmd_up(args: argparse.Namespace) -> int:

    db = open_db(args)
    if args.executor is None and not os.environ.get(EXECUTOR_ENV):
        args.executor = "local"
    if not args.no_serve and not port_free(args.host, args.port):  # fail before a measurement of minutes
        error(
            f"port {args.port} on {args.host} is already in use (another dashboard?); pick another with --port "
            "or pass --no-serve"
        )
        return EXIT_USAGE
    try:
        source = local_repo(args.repo)
    except GitError as exc:
        raise GitError(f"{exc} (solci up measures a commit: commit your work first, or pass --repo)") from None
    if _dirty(source):
        echo(
            f"{source} has uncommitted changes: they are not measured (only the commit {args.commit} is); "
            "commit them and run `solci up` again"
        )
    if args.executor == "local" and not args.trusted:
        why = probe()
        if why is not None:  # your own checkout: measured without the sandbox rather than not at all
            echo(f"no bubblewrap sandbox here ({why}): measuring your own checkout unsandboxed (--trusted)")
            args.trusted = True
    report = run_commit_now(db, args, args.repo, args.commit, branch=args.branch)
    if report is None:
        return 130
    print_report(db, report, show_log=args.verbose)
    if report.run_id:
        print_summary(db, report.run_id)
    code = exit_code_for([report.outcome])
    if args.no_serve:
        print(f"\nsee it: solci dashboard --db {db.path}")
        return code
    serve(db.path, args.host, args.port)
    return code


# ------------------------------------------------------------------------------------------------ register
def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1-65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number: use 1-65535")
    return port


def _add_serve(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"port of the dashboard, 1-65535 (default {DEFAULT_PORT})",
    )
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; 0.0.0.0 for every interface)",
    )


def register(subparsers: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter

    p = subparsers.add_parser("dashboard", help="serve the dashboard (streamlit) on the history database")
    one_line_errors(p)
    _add_serve(p)
    add_db_argument(p)
    p.set_defaults(func=cmd_dashboard)

    p = subparsers.add_parser(
        "up",
        formatter_class=fmt,
        help="measure this checkout's HEAD as CI does (local executor), store it, serve the dashboard",
        description=UP_DESCRIPTION,
    )
    one_line_errors(p)
    p.add_argument("--repo", default=".", help="repository whose commit is measured (default: .)")
    p.add_argument("--commit", default="HEAD", help="commit or revision (default HEAD)")
    p.add_argument("--branch", help="branch label (default: a branch holding the commit)")
    p.add_argument("--no-serve", action="store_true", help="measure and store only; do not serve the dashboard")
    p.add_argument("-v", "--verbose", action="store_true", help="print the log tail even when it passed")
    _add_serve(p)
    add_db_argument(p)
    add_runner_options(p)
    p.set_defaults(func=cmd_up)
