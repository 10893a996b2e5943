"""Write a selection of Gluon configurations (``scripts/bench_gluon_v19.py --select FILE``) into ``GLUON_TABLE``
of kernel/gluon_backward.py, one entry line per selected M bucket (enabled), the other lines untouched.

Usage: python scripts/apply_gluon_selection.py FILE [--table kernel/gluon_backward.py] [--dry-run]
The same file gives the same text wherever it runs, so the code tested on the GPU after a selection (the device
copy) and the code committed (here) are the same.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

# GluonConfig's fields after its four tiles, in the order of its definition, with their defaults (a field at its
# default is left off the line); a field this writer does not know is refused, never dropped
DEFAULTS = {"stages": 3, "group": 4, "loader_regs": 40, "schedule": "auto", "pingpong": False, "lazy_init": False}
ORDER = tuple(DEFAULTS)


WIDTH = 120  # the project's line length (pyproject.toml's ruff); the table sits between "fmt: off" and "fmt: on"


def entry_line(bucket: int, cfg: dict) -> str:
    """The table's entry for ``bucket``: one line, or where that is wider than WIDTH, its arguments filled onto
    continuation lines aligned after ``GluonConfig(``."""
    unknown = sorted(set(cfg) - set(DEFAULTS) - {"ga_bm", "ga_bn", "gw_bm", "gw_bn"})
    if unknown:  # a GluonConfig field this writer does not know would be dropped from the line
        raise SystemExit(f"bucket {bucket}: configuration fields {unknown} unknown to apply_gluon_selection.py")
    args = [str(cfg[k]) for k in ("ga_bm", "ga_bn", "gw_bm", "gw_bn")]
    args += [f"{k}={cfg[k]!r}" for k in ORDER if k in cfg and cfg[k] != DEFAULTS[k]]
    head, tail = f"    {bucket}: (GluonConfig(", "), True),"
    if len(head) + len(", ".join(args)) + len(tail) <= WIDTH:
        return head + ", ".join(args) + tail
    lines, line = [], head
    for i, arg in enumerate(args):
        piece = arg + (tail if i == len(args) - 1 else ",")
        if line not in (head, " " * len(head)) and len(line) + 1 + len(piece) > WIDTH:
            lines.append(line)
            line = " " * len(head)
        line += ("" if line in (head, " " * len(head)) else " ") + piece
    return "\n".join([*lines, line])


def apply(text: str, selection: dict) -> str:
    for bucket, entry in sorted(selection.items(), key=lambda kv: int(kv[0])):
        # an entry's arguments hold no parenthesis: [^)]* spans its continuation lines, if any
        pattern = re.compile(rf"^    {int(bucket)}: \(GluonConfig\([^)]*\), (True|False)\),$", re.M)
        if len(pattern.findall(text)) != 1:
            raise SystemExit(f"GLUON_TABLE: no single entry line for bucket {bucket}")
        text = pattern.sub(entry_line(int(bucket), entry["config"]), text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("selection")
    ap.add_argument("--table", default="kernel/gluon_backward.py")
    ap.add_argument("--dry-run", action="store_true", help="print the entry lines, change nothing")
    args = ap.parse_args(argv)
    selection = json.loads(Path(args.selection).read_text())
    path = Path(args.table)
    new = apply(path.read_text(), selection)
    for bucket, entry in sorted(selection.items(), key=lambda kv: int(kv[0])):
        print(f"{entry['name']}: {entry_line(int(bucket), entry['config']).strip()}")
    if not args.dry_run:
        path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
