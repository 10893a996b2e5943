"""``solci bench`` without the ``solci`` front end (whose CLI imports the storage layer, i.e. DuckDB, which the
lent H200 does not have): the same argument parser (ci/cli/bench.py) and the same run (ci/harness/bench.py).

Usage (GPU host, repository root): PYTHONPATH=. python scripts/solci_bench_direct.py [solci bench arguments]
"""

from __future__ import annotations

import argparse
import sys

from ci.cli.bench import add_arguments


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    from ci.harness.bench import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
