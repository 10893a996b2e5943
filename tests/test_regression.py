"""ci.regression: flags from raw samples against the recent passing runs, and change points."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from factories import BASE_TIME, make_result

from ci.regression import change_points, find_steps, judge_run
from storage import queries
from storage.db import Database, StorageError
from storage.ingest import ingest_result

FEW = ["4,128", "8,256", "1,1024", "2,4096"]


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(tmp_path / "h.duckdb", lock_timeout=5)


def add(db: Database, i: int, **kw) -> str:
    run_id = kw.pop("run_id", f"run{i:03d}")
    kw.setdefault("cases", FEW)
    doc = make_result(run_id=run_id, commit=kw.pop("commit", f"c{i}"), started_at=BASE_TIME + timedelta(hours=i), **kw)
    ingest_result(db, doc)
    return run_id


def kinds(flags: list[dict], case: str | None = None) -> set[str]:
    return {f["kind"] for f in flags if case is None or f["case"] == case}


def test_regression_flagged_on_that_run_only(db):
    for i in range(6):
        add(db, i)
    slow = add(db, 6, scale=2.0)
    after = add(db, 7)
    for i in range(6):
        assert "regression" not in kinds(judge_run(db, f"run{i:03d}"))
    flags = judge_run(db, slow)
    reg = [f for f in flags if f["kind"] == "regression"]
    assert {f["case"] for f in reg} == {"B4_S128", "B8_S256", "B1_S1024", "B2_S4096", "__suite__"}
    suite = next(f for f in reg if f["case"] == "__suite__")
    assert suite["magnitude"] == pytest.approx(1.0, rel=0.02)
    assert suite["p_value"] < 1e-6 and suite["new_median_us"] > suite["baseline_median_us"]
    assert "slower" in suite["message"]
    assert not kinds(judge_run(db, after)) & {"regression", "improvement"}
    stored = queries.flags(db, run_id=slow)
    assert len(stored) == len(flags) and set(stored["kind"]) == {"regression"}
    assert set(queries.flags(db, commit="c6")["run_id"]) == {slow}


def test_small_change_within_noise_not_flagged(db):
    for i in range(5):
        add(db, i)
    r = add(db, 5, scale=1.01)
    assert judge_run(db, r) == []
    r = add(db, 6, scale=0.99, noise=0.03)
    assert not kinds(judge_run(db, r)) & {"regression", "improvement"}


def test_improvement_and_new_record(db):
    for i in range(5):
        add(db, i)
    fast = add(db, 5, scale=0.8)
    flags = judge_run(db, fast)
    assert kinds(flags, "__suite__") == {"improvement", "new_record"}
    imp = next(f for f in flags if f["kind"] == "improvement" and f["case"] == "__suite__")
    assert imp["magnitude"] == pytest.approx(-0.2, abs=0.01)
    rec = [f for f in flags if f["kind"] == "new_record"]
    assert {f["case"] for f in rec} == {*(queries._case_name(c) for c in FEW), "__suite__"}
    assert all(f["magnitude"] < 0 for f in rec)


def test_incorrect_and_error_flagged(db):
    for i in range(3):
        add(db, i)
    r = add(db, 3, status={"B4_S128": "incorrect", "B8_S256": "error", "B1_S1024": "timeout"})
    flags = judge_run(db, r)
    by_case = {f["case"]: f["kind"] for f in flags}
    assert by_case == {"B4_S128": "incorrect", "B8_S256": "error", "B1_S1024": "error"}
    # an incorrect run is never a baseline: the next 2x run is judged against the passing ones
    slow = add(db, 4, scale=2.0)
    assert "regression" in kinds(judge_run(db, slow), "__suite__")


def test_baseline_is_same_hardware_and_protocol(db):
    for i in range(3):
        add(db, i)
    other = add(db, 3, scale=2.0, hardware_label="NVIDIA H100", gpu_model="H100")
    assert not kinds(judge_run(db, other)) & {"regression", "improvement"}  # no baseline on H100
    proto = add(db, 4, scale=2.0, protocol="p2")
    assert not kinds(judge_run(db, proto)) & {"regression", "improvement"}
    assert "regression" in kinds(judge_run(db, add(db, 5, scale=2.0)))


def test_judge_is_idempotent_and_checks_the_run(db):
    for i in range(3):
        add(db, i)
    slow = add(db, 3, scale=1.5)
    first = judge_run(db, slow)
    assert judge_run(db, slow) == first
    assert len(queries.flags(db, run_id=slow)) == len(first)
    with pytest.raises(StorageError, match="no run"):
        judge_run(db, "missing")


def test_baseline_uses_only_the_last_n_runs(db):
    for i in range(5):
        add(db, i, scale=2.0)  # an old, slow era
    for i in range(5, 8):
        add(db, i)
    r = add(db, 8)
    # the last 5: 3 fast + 2 slow, pooled median fast; the last 8: mostly slow
    assert not kinds(judge_run(db, r, baseline_runs=5)) & {"regression", "improvement"}
    assert "improvement" in kinds(judge_run(db, r, baseline_runs=8), "__suite__")


def test_change_points_name_the_commit(db):
    for i in range(12):
        add(db, i, cases=["4,128"], n_samples=5)
    for i in range(12, 24):
        add(db, i, cases=["4,128"], n_samples=5, scale=1.3, noise=0.005)
    steps = change_points(db, case="4,128", hardware="NVIDIA H200", protocol="p1")
    assert len(steps) == 1
    step = steps[0]
    assert (step["commit"], step["run_id"], step["case"]) == ("c12", "run012", "B4_S128")
    assert step["after_median"] / step["before_median"] == pytest.approx(1.3, rel=0.01)
    suite = change_points(db, case="__suite__", hardware="H200", protocol="p1")
    assert [s["commit"] for s in suite] == ["c12"]
    assert change_points(db, case="4,128", hardware="NVIDIA H100", protocol="p1") == []


def test_find_steps_on_noisy_series():
    rng = np.random.default_rng(0)
    flat = 100 * (1 + 0.01 * rng.standard_normal(60))
    assert find_steps(flat) == []
    two = np.concatenate([flat[:20], flat[20:40] * 1.2, flat[40:] * 0.9])
    assert find_steps(two) == [20, 40]
    tiny = np.concatenate([flat[:30], flat[30:] * 1.01])  # below min_effect
    assert find_steps(tiny) == []
