"""``solci``: the one command-line entry point. Each module in COMMAND_MODULES adds its subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys

from ci.common import dispatch

# Each module defines ``register(subparsers) -> None``; a subcommand sets ``func(args) -> int``.
COMMAND_MODULES = (
    "ci.bench_cli",  # solci bench
    "ci.measure",  # solci measure
    "ci.commands",  # solci run / watch / worker / enqueue / hooks
    "ci.read_commands",  # solci history / flags / records / jobs / sql
    "dashboard.commands",  # solci dashboard / solci up (the main job)
    "ci.doctor",  # solci doctor
    "ci.fleet_commands",  # solci migrate / compact / spool / fleet (several hosts, one lake)
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

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
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
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
