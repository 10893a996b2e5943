"""The dashboard on runs of a subset of the cases (``solci run --cases``) beside full-suite runs, and on a
quarantined run: suite figures (geomean line, headline change, T_SOL, suite score, the B200 leaderboard) are
compared only among runs of the same cases; a quarantined run shows no SOL score anywhere."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import charts, data, fmt
from dashboard.data import Selection
from kernel.workload import CASES, Case, geomean, t_sol_us
from storage.db import Database
from storage.ingest import ingest_result
from tests.factories import BASE_TIME, make_result
from tests.repo_factory import PROJECT

APP = str(PROJECT / "dashboard" / "app.py")
H200 = "NVIDIA H200"
N_FULL = len(CASES)
SUBSET = ["1,256", "4,128"]  # the two smallest-M cases
SUB_MEDIANS = {Case.parse(c).name: 1.2 * t_sol_us(Case.parse(c).m, "H200") for c in SUBSET}  # 83 % of SOL
N_FULL_RUNS = 3


def _full(i: int) -> str:
    return f"full{i}"


@pytest.fixture(scope="module")
def mixed_db(tmp_path_factory: pytest.TempPathFactory) -> Database:
    """Three 16-case H200 runs, then two runs of the same two cases on the same GPU and protocol (the second
    10 % slower than the first): a subset's geomean is far below the suite's, though no case got faster."""
    db = Database(tmp_path_factory.mktemp("subsets") / "history.duckdb", lock_timeout=20)
    for i in range(N_FULL_RUNS):
        ingest_result(
            db,
            make_result(run_id=_full(i), commit=f"{i:02d}ffff{i:02d}", started_at=BASE_TIME + i * timedelta(hours=1)),
        )
    for k, scale in enumerate((1.0, 1.1)):
        i = N_FULL_RUNS + k
        doc = make_result(
            run_id=f"sub{i}",
            commit=f"{i:02d}ssss{i:02d}",
            cases=SUBSET,
            medians=SUB_MEDIANS,
            scale=scale,
            started_at=BASE_TIME + i * timedelta(hours=1),
        )
        ingest_result(db, doc)
    return db


def _app(monkeypatch: pytest.MonkeyPatch, db_path: Path, run_id: str | None = None, **params: str) -> AppTest:
    monkeypatch.setenv("SOLCI_DB", str(db_path))
    at = AppTest.from_file(APP, default_timeout=90)
    for k, v in params.items():
        at.query_params[k] = v
    at = at.run()
    assert not at.exception
    if run_id is not None:
        at = at.sidebar.selectbox(key="run").set_value(run_id).run()
        assert not at.exception
    return at


def _metric(at: AppTest, prefix: str):
    return next(m for m in at.metric if m.label.startswith(prefix))


def _texts(at: AppTest) -> str:
    parts = [e.value for kind in ("markdown", "caption", "text", "info", "warning", "error") for e in getattr(at, kind)]
    return " ".join(parts).replace("\\", "")


def _figure(at: AppTest, title: str) -> dict:
    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    return next(f for f in figs if title in f["layout"]["title"]["text"])


# ------------------------------------------------------------------------------------------------ defect 1
def test_case_sets_of_the_window(mixed_db: Database) -> None:
    """Each run of the window carries its set of cases; the suite line follows the benchmark's 16 cases."""
    win = data.window(mixed_db, Selection(H200, "p1"))
    series = data.with_case_sets(win, data.chart_cases(mixed_db, list(win["run_id"])))
    full = series.set_index("run_id")["full_suite"].to_dict()
    assert full == {_full(0): True, _full(1): True, _full(2): True, "sub3": False, "sub4": False}
    sets = series.set_index("run_id")["case_set"]
    assert sets["sub3"] == sets["sub4"] != sets[_full(0)]
    assert data.main_case_set(series) == sets[_full(0)]


def test_a_subset_run_is_not_a_change_of_the_suite_line(mixed_db: Database) -> None:
    """The suite chart's geomean line, references and T_SOL are of the 16-case runs only; the 2-case runs are a
    trace of their own, named with their number of cases."""
    sel = Selection(H200, "p1")
    win = data.window(mixed_db, sel)
    hist = data.chart_cases(mixed_db, list(win["run_id"]))
    series = data.with_case_sets(win, hist)
    fig = charts.suite_history_figure(
        series, hardware=H200, main_set=data.main_case_set(series), t_sol_us=data.suite_t_sol(series, hist)
    )
    line = next(t for t in fig.data if t.name == "kernel geomean")
    assert list(line.x) == [f"{i:02d}ffff{i:02d}"[:8] for i in range(N_FULL_RUNS)]
    apart = next(t for t in fig.data if t.name and "2 cases" in t.name)
    assert list(apart.x) == ["03ssss03", "04ssss04"] and "lines" not in apart.mode
    assert list(fig.layout.xaxis.categoryarray) == [*line.x, *apart.x]  # every run in time order
    t_sol = geomean([t_sol_us(c.m, "H200") for c in CASES])
    assert next(t for t in fig.data if t.name and t.name.startswith("T_SOL")).y[0] == pytest.approx(t_sol)


def test_the_history_tab_keeps_subset_runs_apart(monkeypatch: pytest.MonkeyPatch, mixed_db: Database) -> None:
    at = _app(monkeypatch, mixed_db.path, view="History")
    suite = _figure(at, "Suite geometric mean")
    line = next(t for t in suite["data"] if t.get("name") == "kernel geomean")
    assert len(set(line["y"])) == 1 and len(line["x"]) == N_FULL_RUNS  # no -69 % drop to the subset's geomean
    sol = next(t for t in suite["data"] if t.get("name", "").startswith("T_SOL"))
    assert sol["y"][0] == pytest.approx(geomean([t_sol_us(c.m, "H200") for c in CASES]))
    assert any("2 cases" in (t.get("name") or "") for t in suite["data"])


def test_the_headline_compares_a_subset_run_only_with_runs_of_its_cases(
    monkeypatch: pytest.MonkeyPatch, mixed_db: Database
) -> None:
    """The first 2-case run has no earlier run of its cases: no change and no points, its number of cases
    instead; the second is compared with the first (+10 %); a 16-case run with the 16-case run before it."""
    at = _app(monkeypatch, mixed_db.path, run_id="sub3")
    g, s = _metric(at, "Suite geomean"), _metric(at, "SOL score")
    assert not g.delta.endswith("%") and f"2 of {N_FULL} cases" in g.delta, g.delta
    assert "pts" not in s.delta and f"2 of {N_FULL} cases" in s.delta, s.delta
    assert f"2 of {N_FULL} cases" in _texts(at)
    at = _app(monkeypatch, mixed_db.path)  # the newest passing run: sub4
    assert _metric(at, "Suite geomean").delta == "+10.0%"
    assert _metric(at, "SOL score").delta.endswith("pts")
    at = _app(monkeypatch, mixed_db.path, run_id=_full(2))
    assert _metric(at, "Suite geomean").delta == "+0.0%"
    assert f"of {N_FULL} cases" not in _texts(at)


# ------------------------------------------------------------------------------------------------ defect 2
def test_a_subset_score_is_not_ranked_against_the_leaderboard(
    monkeypatch: pytest.MonkeyPatch, mixed_db: Database
) -> None:
    """A 2-case run scores 83 % of SOL (above the B200 #1's 75 %): that is a mean over 2 of 16 cases, so it is
    neither the project's best nor a bar beside the 16-case leaderboard, and no 'pts ahead' is claimed."""
    at = _app(monkeypatch, mixed_db.path, run_id="sub3", view="SOL and records")
    full_best = data.best_score(mixed_db, Selection(H200, "p1"), N_FULL)
    assert full_best is not None and full_best["run_id"].startswith("full")
    records = _figure(at, "leaderboard")
    bars = dict(zip(records["data"][0]["y"], records["data"][0]["x"], strict=True))
    assert all(not math.isclose(v, 83.333, abs_tol=0.1) for v in bars.values()), bars
    best_bar = next(v for k, v in bars.items() if k.startswith("solci best"))
    assert best_bar == pytest.approx(full_best["score"] * 100)
    m = {x.label: x.value for x in at.metric}
    assert m["Project best SOL score"] == fmt.pct(full_best["score"])
    assert m["This run vs project best (lower is better)"] == fmt.DASH
    text = _texts(at)
    assert "ahead of" not in text and f"2 of {N_FULL} cases" in text and "not comparable" in text


def test_a_full_suite_run_is_still_ranked(monkeypatch: pytest.MonkeyPatch, mixed_db: Database) -> None:
    at = _app(monkeypatch, mixed_db.path, run_id=_full(2), view="SOL and records")
    records = _figure(at, "leaderboard")
    assert any(y.startswith("solci best") for y in records["data"][0]["y"])
    assert "behind the B200 #1" in _texts(at) and "not comparable" not in _texts(at)


# ------------------------------------------------------------------------------------------------ defect 3
@pytest.fixture(scope="module")
def quarantined_db(tmp_path_factory: pytest.TempPathFactory) -> Database:
    """Four H200 runs; the third is faster than the speed of light in every case (quarantined)."""
    db = Database(tmp_path_factory.mktemp("quar") / "history.duckdb", lock_timeout=20)
    for i in range(4):
        doc = make_result(
            run_id=f"q{i}",
            commit=f"{i:02d}qq{i:02d}qq",
            scale=0.001 if i == 2 else 1.0,
            started_at=BASE_TIME + i * timedelta(hours=1),
        )
        ingest_result(db, doc)
    return db


def test_one_run_table_gives_a_quarantined_run_no_score(
    monkeypatch: pytest.MonkeyPatch, quarantined_db: Database
) -> None:
    """Runs and jobs → One run: a quarantined run's cases passed, but its figures are not believed: no SOL
    score (–), as in the SOL tab."""
    at = _app(monkeypatch, quarantined_db.path, run_id="q2", view="Runs and jobs")
    table: pd.DataFrame = next(d.value for d in at.dataframe if "error_line" in d.value.columns)
    assert (table["status"] == "pass").all() and table["score"].isna().all()
    at = _app(monkeypatch, quarantined_db.path, run_id="q3", view="Runs and jobs")
    table = next(d.value for d in at.dataframe if "error_line" in d.value.columns)
    assert table["score"].notna().all()
