"""Issue 19, finding 6: text from a commit or a log is printed with its control characters made visible, so an
error text cannot rewrite the screen (a crashed commit read PASSED while the command exited 1)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ci.cli.common import print_table
from ci.cli.main import main
from ci.harness.terminal import visible
from ci.service.runner import RunnerLog
from storage import jobs
from storage.db import open_database

FORGED = "crashed\r\x1b[1A\x1b[2KPASSED\u202e"


def test_visible_keeps_lines_and_tabs_and_shows_every_other_control() -> None:
    assert visible("a\tb\nc") == "a\tb\nc"
    assert visible(FORGED) == "crashed\\x0d\\x1b[1A\\x1b[2KPASSED\\u202e"
    assert visible("\x00\x7f\x9b") == "\\x00\\x7f\\x9b"
    assert visible(3) == "3"


def test_a_jobs_log_is_printed_with_its_controls_visible(tmp_path: Path, capsys) -> None:
    db = open_database(tmp_path / "h.duckdb")
    job_id, _ = jobs.enqueue(db, "repo", "c1", branch="main")
    job = jobs.claim_next(db, "w", "gpu0")
    assert job is not None and job.id == job_id
    jobs.finish(db, job.id, status="failed", outcome="crashed", log=f"case B1_S256: {FORGED}")
    assert main(["jobs", "--db", str(db.path), "--log", str(job_id)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "\\x1b[2KPASSED" in out and "crashed" in out


def test_tables_and_the_runners_terminal_lines_show_controls(capsys) -> None:
    print_table(pd.DataFrame({"branch": [f"feature{FORGED}"], "n": [1]}))
    said: list[str] = []
    log = RunnerLog(said.append).for_job(7)
    log(f"measuring: {FORGED}")
    out = capsys.readouterr().out + "\n".join(said)
    assert "\x1b" not in out and "\r" not in out
    assert out.count("\\x1b[1A") == 2
    assert "\x1b" in log.text()  # the stored log keeps the text as it was; printing it makes it visible
