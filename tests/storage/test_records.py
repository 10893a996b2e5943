"""storage.records: the rule that makes a project record (pure), and schema version 4, which turns the records of
before it (the fastest single run ever seen) into records from confirmed levels and says what changed."""

from __future__ import annotations

import math

import pytest

from ci.verdict.apply import judge_run
from ci.verdict.rules import JudgeConfig
from storage import queries, schema
from storage.db import Database, open_database
from storage.records import (
    LEVEL_RECORD_RUNS,
    Figure,
    beats,
    below,
    improvement_figure,
    level_figure,
)
from tests.support.lab import NAMES, Lab, chain

SIGMA = 0.005  # a case's between-run spread (log)


def level(us: float, n: int, sigma: float = SIGMA) -> Figure:
    fig = level_figure([math.log(us)] * n, sigma, commit="c")
    assert fig is not None
    return fig


# ------------------------------------------------------------------------------------------------ the rule
def test_a_level_figure_is_the_median_of_its_commits_with_the_error_of_a_median() -> None:
    fig = level_figure([math.log(x) for x in (10.0, 10.4, 9.9, 30.0)], SIGMA, commit="c3", run_id="r")
    assert fig is not None and fig.basis == "level" and fig.n_runs == 4 and fig.commit == "c3"
    assert fig.latency_us == pytest.approx(math.sqrt(10.0 * 10.4))  # the median: one slow commit moves nothing
    assert fig.se == pytest.approx(SIGMA * math.sqrt(math.pi / 2 / 4))
    assert fig.lo_us < fig.latency_us < fig.hi_us
    assert math.log(fig.hi_us / fig.latency_us) == pytest.approx(1.96 * fig.se)
    assert level_figure([], SIGMA) is None


def test_a_level_counts_from_enough_runs_and_the_first_record_needs_no_beating() -> None:
    assert LEVEL_RECORD_RUNS == 3
    assert not beats(level(10.0, LEVEL_RECORD_RUNS - 1), None), "a level of two commits is not confirmed"
    assert beats(level(10.0, LEVEL_RECORD_RUNS), None)
    assert beats(improvement_figure(math.log(10.0), math.log(0.9), 0.004), None)


def test_a_record_moves_only_when_beaten_beyond_noise() -> None:
    record = level(10.0, 5)
    assert not beats(level(9.95, 10), record), "0.5 % faster: within noise"
    assert not beats(level(10.5, 10), record), "slower never beats"
    assert beats(level(9.5, 10), record), "5 % faster over ten commits: beyond noise"
    noisy = level(9.5, 10, sigma=0.05)  # the same figure from a case that spreads 5 % between runs
    assert not beats(noisy, level(10.0, 5, sigma=0.05))
    # however quiet the case, a record moves by at least half the minimum effect (the least a confirmation accepts)
    quiet = level(10.0, 5, sigma=0.0001)
    assert not beats(level(9.96, 10, sigma=0.0001), quiet) and beats(level(9.94, 10, sigma=0.0001), quiet)
    assert beats(level(9.96, 10, sigma=0.0001), quiet, min_effect=0.005)


def test_a_confirmed_improvement_beats_the_level_it_was_confirmed_against() -> None:
    before = level(10.0, 8)
    paired = improvement_figure(before.log, math.log(0.95), 0.004, commit="c9", step_id="s")
    assert paired.latency_us == pytest.approx(9.5) and paired.basis == "improvement" and paired.step_id == "s"
    assert beats(paired, before)
    assert not beats(improvement_figure(before.log, math.log(0.99), 0.004), before), "1 %, 0.4 % error: noise"
    assert not beats(paired, level(9.4, 8)), "an older, faster record stands"


def test_below_record_is_the_same_bar_the_other_way() -> None:
    record = level(10.0, 5)
    assert not below(level(10.05, 3), record) and below(level(10.6, 2), record)
    assert not below(level(20.0, 3), None), "no record: nothing to be below"


def test_the_rule_uses_the_judges_defaults() -> None:
    from storage import records

    cfg = JudgeConfig()
    assert (records.DEFAULT_K, records.DEFAULT_MIN_EFFECT) == (cfg.k, cfg.min_effect)
    with pytest.raises(ValueError, match="basis"):
        beats(Figure(10.0, 0.01, 3, "run"), None)


# ------------------------------------------------------------------------------------------------ migration
def _judged_history(db: Database) -> None:
    """12 commits judged in order: a lucky run at c5 (0.5 % faster, below the minimum effect), a confirmed
    improvement of two cases at c8."""
    fast = {"B1_S256": 0.9, "B4_S128": 0.9}
    levels: dict = {c: (fast if i >= 8 else 1.0) for i, c in enumerate(chain(12))} | {"c5": 0.995}
    lab, commits = Lab(db), chain(12)
    for i, c in enumerate(commits):
        judge_run(db, lab.run(c, levels[c]), ancestry=commits[: i + 1][::-1], confirm=lab.confirmer(levels))


def _as_version_3(db: Database) -> None:
    """Make the history what solci wrote before version 4: its tables and columns, and a project record per case
    (and the suite) that is the fastest passing single run ever ingested, as ingest kept them."""
    with db.write() as conn:
        conn.execute("DELETE FROM records WHERE kind = 'project'")
        conn.execute(
            """INSERT INTO records (kind, gpu_model, hardware_label, protocol, case_name, n_cases, implementation,
                   latency_us, source, run_id, "commit")
               SELECT 'project', r.gpu_model, r.hardware_label, r.protocol, x.case_name, NULL, 'solci@' || r."commit",
                      x.median_us, 'solci (this project''s passing runs)', r.run_id, r."commit"
               FROM results x JOIN runs r USING (run_id) WHERE r.purpose = 'measure'
               QUALIFY row_number() OVER (PARTITION BY x.case_name ORDER BY x.median_us) = 1"""
        )
        conn.execute(
            """INSERT INTO records (kind, gpu_model, hardware_label, protocol, case_name, n_cases, implementation,
                   latency_us, source, run_id, "commit")
               SELECT 'project', gpu_model, hardware_label, protocol, '__suite__', n_cases, 'solci@' || "commit",
                      geomean_us, 'solci (this project''s passing runs)', run_id, "commit"
               FROM runs WHERE purpose = 'measure' ORDER BY geomean_us LIMIT 1"""
        )
        conn.execute("DROP TABLE levels")
        for table, cols in (
            ("records", ("lo_us", "hi_us", "n_runs", "basis", "step_id")),
            ("record_events", ("new_lo_us", "new_hi_us", "n_runs", "basis", "step_id")),
        ):
            for col in cols:
                conn.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
        conn.execute("DELETE FROM record_events")
        # version 5's columns stay (DuckDB cannot drop a column of a table with a key); its migration adds
        # them only where they are missing
        conn.execute("DELETE FROM solci_schema WHERE version >= 4")


def test_version_4_recomputes_the_records_from_the_stored_levels_and_says_what_changed(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "history.duckdb"
    db = open_database(path, lock_timeout=20)
    _judged_history(db)
    made = queries.records(db).query("kind == 'project'").set_index("case")
    assert set(made.loc[["B1_S256", "B4_S128"], "basis"]) == {"improvement"}
    _as_version_3(db)
    assert db.schema_version() == 3
    lucky = queries.run_sql(db, "SELECT \"commit\" FROM records WHERE kind = 'project'")["commit"]
    assert "c5" in set(lucky), "before version 4 the lucky run held records"
    capsys.readouterr()

    again = open_database(path)
    assert again.schema_version() == 3
    rec = queries.records(again)  # a reader upgrades it
    assert again.schema_version() == schema.CURRENT_VERSION == 5
    line = capsys.readouterr().err.strip()
    assert line.count("\n") == 0 and "schema version 4" in line, line
    assert f"{len(NAMES) + 1} project records (each the fastest single run seen) replaced by {len(NAMES) + 1}" in line
    note = queries.run_sql(again, "SELECT description FROM solci_schema WHERE version = 4")["description"][0]
    assert "replaced by" in note
    proj = rec[rec["kind"] == "project"].set_index("case")
    assert "c5" not in set(proj["commit"]), "the lucky run's records are gone"
    assert set(proj.loc[["B1_S256", "B4_S128"], "commit"]) == {"c8"}
    assert set(proj.loc[["B1_S256", "B4_S128"], "basis"]) == {"improvement"}
    for case in NAMES:  # the records judging made, recomputed from what it stored
        assert proj.loc[case, "latency_us"] == pytest.approx(made.loc[case, "latency_us"], rel=1e-9), case
        assert proj.loc[case, "commit"] == made.loc[case, "commit"]
    assert (proj["lo_us"] < proj["latency_us"]).all() and (proj["n_runs"] >= 1).all()
    assert queries.record_events(again).empty, "the recomputation writes no events"
    open_database(path).schema_version()
    assert capsys.readouterr().err == "", "said once"


def test_a_new_history_says_nothing_about_records() -> None:
    import subprocess
    import sys

    from tests.support import PROJECT

    code = "import tempfile, pathlib; from storage.db import open_database; "
    code += "open_database(pathlib.Path(tempfile.mkdtemp()) / 'h.duckdb').schema_version(); "
    code += "from storage import queries; "
    code += "d = open_database(pathlib.Path(tempfile.mkdtemp()) / 'h.duckdb'); queries.records(d)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
