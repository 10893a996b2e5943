"""Argument helpers of the harness's own entry point (``python -m ci.harness.measure``), which the command
line shares: a bounded number type and the handler dispatch with its Ctrl-C exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

EXIT_INTERRUPTED = 130  # Ctrl-C, or a stop signal that left a queued job unfinished (run / up / watch)


def dispatch(args: argparse.Namespace) -> int:
    """Run a parsed command's handler (``args.func``): its exit code; Ctrl-C is 130 with one line, no traceback."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def bounded(convert: type, low: float, *, strict: bool = False) -> Callable[[str], Any]:
    """An argparse type: a number (int or float) >= low (> low when strict), with a clear message."""
    what = "an integer" if convert is int else "a number"

    def parse(text: str) -> Any:
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if v != v or v in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if v < low or (strict and v == low):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {low}, got {v}")
        return v

    return parse
