"""``python -P -m ci.hooks REPO``: the command every installed git hook runs (``ci.service.hooks`` writes
the hooks); its name stays fixed so that hooks installed by any solci version keep working."""

from __future__ import annotations

import argparse
import sys

from ci.cli.common import echo, open_db
from ci.service.triggers import RefUpdate, queue_updates, record_pending


def main(argv: list[str] | None = None) -> int:
    """What the hook runs: queue the ``OLD NEW REF`` lines on stdin (``ci.service.triggers.queue_updates``). Exit 0
    when each update was queued or recorded in the pending file; not 0 only when recording failed too (the
    shell then records the lines itself)."""
    parser = argparse.ArgumentParser(prog="python -m ci.hooks")
    parser.add_argument("repo")
    parser.add_argument("--trigger", default="hook")
    args = parser.parse_args(argv)
    updates = [u for u in map(RefUpdate.parse, sys.stdin.read().splitlines()) if u is not None and u.wanted]
    try:
        db = open_db(argparse.Namespace(db=None, data_path=None))
    except Exception as exc:  # a bad $SOLCI_DB or lake spec: keep the updates for when it is fixed
        path = record_pending(args.repo, updates) if updates else None
        echo(f"could not open the database: {exc}" + (f"; {len(updates)} update(s) recorded in {path}" if path else ""))
        return 0
    queue_updates(db, args.repo, updates, trigger=args.trigger, echo=echo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
