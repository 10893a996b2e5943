"""The subcommands of several hosts sharing one history (a DuckLake on PostgreSQL; README, "Several hosts").

solci migrate --to ducklake:postgres:... --data-path DIR [--db FILE]   copy a history file into a new lake
                                                                      and verify it (exit 1: what differs)
solci migrate --to ducklake:... --check [--db FILE]                   only verify an earlier copy
solci compact [--db ...] [--keep-days 7]                              merge the lake's small files, expire
                                                                      old snapshots (a file: CHECKPOINT)
solci spool [list|flush] [--db ...]                                   results this host could not store yet
solci fleet [--db ...]                                                GPU models and hosts, running leases
"""

from __future__ import annotations

import argparse
from typing import Any

import pandas as pd

from ci.cli.common import add_db_argument, echo, error, handles_errors, open_db, print_table
from ci.harness.args import bounded
from storage import jobs, spool
from storage.db import is_lake_spec, open_database
from storage.lake import compact
from storage.lake_migrate import migrate, verify
from storage.lake_queue import registered_models


@handles_errors
def cmd_migrate(args: argparse.Namespace) -> int:

    source = open_db(args, create=False)
    if getattr(source, "backend", "file") != "file":
        raise ValueError("--db must be the history file to copy (the lake is --to)")
    if not is_lake_spec(args.to):
        raise ValueError(f"--to must be a lake spec ducklake:postgres:<libpq connection string>, got {args.to!r}")
    target = open_database(args.to, args.data_path, lock_timeout=source.lock_timeout, create=not args.check)
    if args.check:
        report = verify(source, target)
    else:
        echo(f"copying {source.path} into {target.describe()}")
        report = migrate(source, target)
    for t in report.tables:
        state = "ok" if t.ok else "DIFFERS"
        print(f"{t.table:<16} {t.source_rows:>10} rows -> {t.target_rows:>10}  {state}")
    if report.jobs_queued:
        print(f"{report.jobs_queued} job(s) copied into the lake's queue")
    if not report.ok:
        for line in report.differences():
            error(line)
        return 1
    print(f"solci: verified: every table has the same rows (counts and checksums) in {target.describe()}")
    return 0


@handles_errors
def cmd_compact(args: argparse.Namespace) -> int:

    db = open_db(args, create=False)
    result = compact(db, keep_days=args.keep_days, grace_hours=args.grace_hours)
    print("solci: compacted " + db.describe() + ": " + ", ".join(f"{k} {v}" for k, v in result.items()))
    return 0


@handles_errors
def cmd_spool(args: argparse.Namespace) -> int:

    db = open_db(args)
    folder = spool.spool_dir(db)
    if args.action == "flush":
        report = spool.flush(db, echo=echo)
        print(
            f"solci: spool {folder}: {len(report.ingested)} stored, {len(report.already)} were stored already, "
            f"{len(report.requeued)} job(s) queued for judging, {len(report.rejected)} rejected, {report.left} left"
        )
        return 4 if report.left else 0
    items = spool.pending(db)
    rows = [
        {
            "spooled_at": s.spooled_at,
            "run_id": s.run_id,
            "job": s.job_id,
            "purpose": s.purpose,
            "commit": str(s.doc.get("commit") or "")[:12],
            "file": s.path.name,
        }
        for s in items
    ]
    print(f"spool {folder}:")
    print_table(pd.DataFrame(rows), empty="(empty: every result is stored)")
    return 0


@handles_errors
def cmd_fleet(args: argparse.Namespace) -> int:

    db = open_db(args, create=False)
    if getattr(db, "backend", "file") == "lake":
        models = pd.DataFrame(registered_models(db), columns=["gpu_model", "host", "first_seen", "last_seen"])
        print("runners (GPU model x host) that claimed from this queue:")
        print_table(models, empty="(none yet)")
    running = jobs.list_jobs(db, status="running", limit=200)
    rows = [
        {
            "job": j.id,
            "commit": j.commit[:12],
            "gpu_model": j.gpu_model,
            "gpu": j.gpu,
            "owner": j.lease_owner,
            "heartbeat_at": j.heartbeat_at,
            "attempts": j.attempts,
        }
        for j in running
    ]
    print(f"running jobs (lease timeout {jobs.lease_timeout_s():g} s):")
    print_table(pd.DataFrame(rows), empty="(none)")
    return 0


def _lake_arguments(p: argparse.ArgumentParser) -> None:
    add_db_argument(p)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("migrate", help="copy a history file into a new lake (ducklake:postgres:...), verified")
    p.add_argument("--to", required=True, metavar="SPEC", help="the lake: ducklake:postgres:<libpq connection string>")
    p.add_argument("--check", action="store_true", help="only compare an earlier copy with the file (no copying)")
    p.add_argument("--db", help="the history file to copy (default: $SOLCI_DB, else ./.solci/history.duckdb)")
    p.add_argument("--data-path", help="the lake's data folder (default: $SOLCI_DATA_PATH)")
    p.set_defaults(func=cmd_migrate)

    p = subparsers.add_parser("compact", help="merge the lake's small files and expire old snapshots")
    p.add_argument(
        "--keep-days", type=bounded(float, 0.0), default=7.0, help="snapshots kept for time travel (default 7)"
    )
    p.add_argument(
        "--grace-hours",
        type=bounded(float, 0.0),
        default=1.0,
        help="files no snapshot needs are deleted after this long (readers still on them; default 1)",
    )
    _lake_arguments(p)
    p.set_defaults(func=cmd_compact)

    p = subparsers.add_parser("spool", help="results this host measured but could not store yet (list / flush)")
    p.add_argument("action", nargs="?", choices=("list", "flush"), default="list")
    _lake_arguments(p)
    p.set_defaults(func=cmd_spool)

    p = subparsers.add_parser("fleet", help="the runners of a lake (GPU model x host) and the running leases")
    _lake_arguments(p)
    p.set_defaults(func=cmd_fleet)
