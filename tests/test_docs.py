"""Docs that describe code are generated from it or checked against it, so they cannot drift."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from ci.cli.main import build_parser
from ci.verdict.apply import judge_run
from problem.workload import CPU_LABEL, SMOKE_CASES
from storage.db import open_database
from storage.ingest import ingest_result
from storage.queries import run_sql
from tests.support import PROJECT
from tests.support.factories import BASE_TIME, make_result


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


def readme_sql_examples() -> list[tuple[str, str]]:
    """The ``solci sql "..."`` examples of the README's SQL section: (query, the comment after it)."""
    readme = (PROJECT / "README.md").read_text()
    section = readme[readme.index("## Query the history with SQL") :]
    section = section[: section.index("\n## ")]
    block = section[section.index("```bash") : section.index("```\n", section.index("```bash") + 7)]
    return [(" ".join(q.split()), note) for q, note in re.findall(r'solci sql "(.*?)"([^\n]*)', block, re.S)]


def test_the_readme_sql_examples_return_rows_on_a_cpu_history(tmp_path: Path) -> None:
    """Issue 20, item 6: the README's SQL example returned no rows on the history a newcomer's `./dev up` makes
    without a GPU (the interpreter's smoke cases, judged functional). Each example returns rows on such a
    history, except those marked "GPU history only"."""
    db = open_database(tmp_path / "history.duckdb", lock_timeout=20)
    for i in range(3):
        doc = make_result(
            commit=f"{i:02d}cpu" + "0" * 36,
            cases=SMOKE_CASES,
            gpu_model=None,
            hardware_label=CPU_LABEL,
            protocol="pcpu",
            started_at=BASE_TIME + timedelta(hours=i),
            n_samples=5,
            medians={c.name: 2e6 for c in SMOKE_CASES},
        )
        ingest_result(db, doc)
        judge_run(db, doc["run_id"])
    examples = readme_sql_examples()
    assert len(examples) >= 5 and examples[0][0].startswith("SELECT commit, started_at")
    for query, note in examples:
        rows = run_sql(db, query)
        if "GPU history only" in note:
            assert rows.empty, query
        else:
            assert not rows.empty, f"no rows on a CPU history: {query}"
