"""Records from confirmed levels (issue 20, item 1), on stored runs with known steps, judged as the runner does:
a record is the best confirmed level (or a confirmed improvement's paired estimate), never one run; a noisy
neutral run sets none; a confirmed improvement sets one record event per case it moved; a regressed run sets
none, and its level shows "below record since COMMIT"."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

import pandas as pd
import pytest

from ci.verdict.apply import judge_run
from problem.workload import t_sol_us
from storage import queries
from storage.db import Database, open_database
from storage.ingest import ingest_result
from tests.support import PROJECT
from tests.support.factories import default_median_us, make_result
from tests.support.lab import NAMES, Lab, chain

SUITE = "__suite__"
FASTER = {"B1_S256": 0.90, "B4_S128": 0.90}  # the confirmed improvement at c9: two cases 10 % faster
SLOWER = {**FASTER, "B8_S256": 1.10}  # the confirmed regression at c14: one more case 10 % slower


def _levels() -> dict[str, float | dict[str, float]]:
    out: dict[str, float | dict[str, float]] = {c: 1.0 for c in chain(8)}
    out["c8"] = 0.995  # a lucky run: every case 0.5 % faster, below the minimum effect (1 %)
    out.update({c: FASTER for c in chain(14)[9:]})
    out.update({c: SLOWER for c in chain(16)[14:]})
    return out


@dataclass
class Scenario:
    """The 16 commits judged in order, and after each judging what the history said."""

    db: Database
    verdicts: dict[str, str] = field(default_factory=dict)
    records: dict[str, pd.DataFrame] = field(default_factory=dict)  # after judging commit c: its project records
    events: dict[str, pd.DataFrame] = field(default_factory=dict)  # after judging commit c: every record event


def _judge(db: Database, lab: Lab, levels: dict, upto: int, scenario: Scenario | None = None) -> dict[str, str]:
    """Judge commits c0 .. c{upto-1} in order (each once, along its first-parent line); their verdicts."""
    commits = chain(16)
    out = {}
    for i, c in enumerate(commits[:upto]):
        run = lab.run(c, levels[c])
        out[c] = judge_run(db, run, ancestry=commits[: i + 1][::-1], confirm=lab.confirmer(levels)).verdict
        if scenario is not None:
            rec = queries.records(db)
            scenario.records[c] = rec[rec["kind"] == "project"].set_index("case")
            scenario.events[c] = queries.record_events(db)
    return out


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    db = open_database(tmp_path_factory.mktemp("records") / "history.duckdb", lock_timeout=20)
    s = Scenario(db)
    s.verdicts = _judge(db, Lab(db), _levels(), 16, s)
    return s


def test_a_level_sets_the_first_records_from_three_commits_without_an_event(scenario: Scenario) -> None:
    assert scenario.records["c1"].empty, "two commits are not a level with enough runs: no record yet"
    proj = scenario.records["c2"]
    assert set(proj.index) == {*NAMES, SUITE}
    assert (proj["n_runs"] == 3).all() and set(proj["basis"]) == {"level"} and set(proj["commit"]) == {"c0"}
    assert (proj["lo_us"] < proj["latency_us"]).all() and (proj["latency_us"] < proj["hi_us"]).all()
    assert proj.loc[SUITE, "n_cases"] == len(NAMES)
    assert scenario.events["c2"].empty, "the first record of a series breaks nothing"


def test_a_noisy_neutral_run_sets_no_record(scenario: Scenario) -> None:
    """Issue 20: a record was the smallest single-run median ever seen, so every lucky run was a new record."""
    assert scenario.verdicts["c8"] == "pass", scenario.verdicts
    ev = scenario.events["c8"]
    assert ev.empty, f"a lucky run set records: {sorted(ev['case'])}"
    assert set(scenario.records["c8"]["commit"]) == {"c0"}


def test_a_confirmed_improvement_sets_one_record_event_per_case_it_moved(scenario: Scenario) -> None:
    verdicts = {c: v for c, v in scenario.verdicts.items() if c in chain(14)}
    assert verdicts["c9"] == "improved", verdicts
    assert all(v == "pass" for c, v in verdicts.items() if c not in ("c0", "c9")), verdicts
    ev = scenario.events["c13"]  # the improvement at c9, then four commits at its level
    per_case = ev.groupby("case").size().to_dict()
    moved = {c: n for c, n in per_case.items() if c != SUITE}
    assert moved == {"B1_S256": 1, "B4_S128": 1}, per_case
    # the suite (3.4 % faster): by the improvement, and by its level where that is faster beyond noise (half
    # the minimum effect: 0.5 %) than the improvement's paired estimate
    assert per_case.get(SUITE, 0) <= 2
    cases = ev[ev["case"] != SUITE].set_index("case")
    assert set(cases["commit"]) == {"c9"} and set(cases["basis"]) == {"improvement"}
    assert (cases["new_us"] < 0.93 * cases["previous_us"]).all() and (cases["new_hi_us"] < cases["previous_us"]).all()
    proj = scenario.records["c13"]
    assert proj.loc["B1_S256", "commit"] == "c9" and proj.loc["B8_S256", "commit"] == "c0"
    step = queries.changes(scenario.db, status="improvement").iloc[0]
    assert proj.loc["B1_S256", "step_id"] == step["step_id"]


def test_a_regressed_run_sets_no_record_and_its_level_is_below_record_since_its_commit(scenario: Scenario) -> None:
    db = scenario.db
    assert scenario.verdicts["c14"] == "regressed" and scenario.verdicts["c15"] == "pass", scenario.verdicts
    ev = scenario.events["c15"]
    assert len(ev) == len(scenario.events["c13"]), "a regressed commit or its level set a record"
    lv = queries.levels(db).set_index("case")
    assert lv.loc["B8_S256", "below_record"] and lv.loc["B8_S256", "below_since"] == "c14"
    assert lv.loc["B8_S256", "standing"] == "below record since c14"
    assert lv.loc["B8_S256", "level_us"] > 1.05 * lv.loc["B8_S256", "record_us"]
    assert not lv.loc["B1_S256", "below_record"] and not lv.loc["B16_S256", "below_record"]
    assert lv.loc["B16_S256", "standing"] in ("the record", "within noise of the record")
    assert lv.loc[SUITE, "n_cases"] == len(NAMES) and lv.loc["B8_S256", "n_runs"] == 2  # c14, c15
    env = {"SOLCI_DB": str(db.path), "PYTHONPATH": str(PROJECT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "ci.cli", "records"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "below record since c14" in out.stdout and "RIAC as well" in out.stdout
    assert "vs B200 #1" in out.stdout and "level_us" in out.stdout


def _events(db: Database) -> pd.DataFrame:
    return queries.record_events(db)


def _project(db: Database) -> pd.DataFrame:
    rec = queries.records(db)
    return rec[rec["kind"] == "project"].set_index("case")


def test_incorrect_broken_quarantined_rejected_and_cpu_runs_make_no_record(db: Database) -> None:
    """Each of these runs is 30 % faster than the records, three times in a row (a level's worth of commits)."""
    _judge(db, Lab(db), _levels(), 3)
    before = _project(db)["latency_us"].to_dict()
    fast = {c: 0.7 * default_median_us(c) for c in NAMES}  # above the speed of light
    kinds = {
        "incorrect": dict(status={"B1_S256": "incorrect"}),
        "broken": dict(status={"B4_S128": "error"}),
        "quarantined": dict(medians={**fast, "B1_S256": 0.1 * t_sol_us(256, "H200")}),
        "rejected": dict(status={"B4_S128": "error"}),
        "functional": dict(gpu_model=None, hardware_label="cpu-interpreter", protocol="pcpu"),
    }
    commits = chain(3)
    for verdict, kw in kinds.items():
        for k in range(3):
            commit = f"{verdict}{k}"
            doc = make_result(run_id=commit, commit=commit, cases=NAMES, **{"medians": fast, **kw})
            if verdict == "rejected":
                next(c for c in doc["cases"] if c["status"] == "error")["error"] = "integrity: the timer was replaced"
            ingest_result(db, doc)
            ancestry = [f"{verdict}{j}" for j in range(k, -1, -1)] + commits[::-1]
            assert judge_run(db, commit, ancestry=ancestry).verdict == verdict
    assert _project(db)["latency_us"].to_dict() == before and _events(db).empty
    assert not (queries.records(db)["hardware"] == "cpu-interpreter").any()
