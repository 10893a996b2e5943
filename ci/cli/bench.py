"""``solci bench``: the command-line face of ci/harness/bench.py (the developer's in-process table)."""

from __future__ import annotations

import argparse

from problem.workload import TIMED_ITERS, WARMUP_ITERS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", nargs="*", help="'all' (default) or B,S pairs such as 4,128")
    p.add_argument("--warmup", type=int, default=WARMUP_ITERS)
    p.add_argument("--iters", type=int, default=TIMED_ITERS)
    p.add_argument("--csv", help="also write the table as CSV here")
    p.add_argument("--sweep", action="store_true", help="time candidate configurations per M bucket")
    p.add_argument("--save", help="with --sweep: write the fastest configuration per bucket to this JSON file")
    p.add_argument("--configs", help="time with the configurations of this JSON file (from --sweep --save)")


def _run(args: argparse.Namespace) -> int:
    from ci.harness.bench import run  # lazy: torch and Triton, 3.3 s at every solci start otherwise

    return run(args)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="GPU benchmark: kernel vs eager vs cuBLAS, T_SOL and score")
    add_arguments(p)
    p.set_defaults(func=_run)
