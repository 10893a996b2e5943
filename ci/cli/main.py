"""``solci``: the one command-line entry point. Each module in COMMAND_MODULES adds its subcommands."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from ci.cli import bench, commands, comment, doctor, fleet, read, up
from ci.harness import measure
from ci.harness.args import dispatch

# Each module defines ``register(subparsers) -> None``; a subcommand sets ``func(args) -> int``.
COMMAND_MODULES = (
    bench,  # solci bench
    measure,  # solci measure
    commands,  # solci run / watch / worker / enqueue / hooks
    read,  # solci history / flags / records / jobs / sql / report
    up,  # solci dashboard / solci up (the main job)
    doctor,  # solci doctor
    fleet,  # solci migrate / compact / spool / fleet (several hosts, one lake)
    comment,  # solci comment (a pull request's report as one comment, updated in place)
)


def _version() -> str:
    try:
        return version("solci")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="solci",
        description="Regression CI for the fused attention-output-projection backward kernel.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
