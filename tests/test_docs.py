"""Docs that describe code are generated from it or checked against it, so they cannot drift."""

from __future__ import annotations

import subprocess
import sys

from ci.cli.main import build_parser
from tests.support import PROJECT


def test_contracts_page_is_what_the_code_says() -> None:
    proc = subprocess.run(
        [sys.executable, str(PROJECT / "scripts" / "gen_contracts.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=PROJECT,
    )
    assert proc.returncode == 0, proc.stderr


def test_readme_names_every_command_the_cli_has() -> None:
    readme = (PROJECT / "README.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    missing = [name for name in sub.choices if f"solci {name}" not in readme]
    assert not missing, f"README.md does not mention: {missing}"


def test_readme_gives_the_two_set_up_commands() -> None:
    readme = (PROJECT / "README.md").read_text()
    assert "./dev up" in readme and "./dev test" in readme
    ci_run = (PROJECT / ".ci" / "run").read_text()
    assert "./dev test" in ci_run, ".ci/run calls the README's test command"
