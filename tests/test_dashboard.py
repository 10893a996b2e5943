"""The dashboard: pure chart functions, the streamlit app (AppTest) on fabricated histories, `solci dashboard`
really serving, and `solci up --no-serve` measuring a real repository (Triton's interpreter, case 1,7)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import duckdb
import pandas as pd
import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

from ci.judging import judge_run
from dashboard import charts, data
from dashboard.data import Selection
from kernel.workload import SMOKE_CASES
from storage import queries
from storage.db import Database
from storage.ingest import ingest_result
from storage.jobs import claim_next, enqueue, finish, list_jobs
from tests.factories import BASE_TIME, make_result
from tests.repo_factory import PROJECT, make_project_repo

APP = str(PROJECT / "dashboard" / "app.py")
H200 = "NVIDIA H200"
CPU = "cpu-interpreter"
N_GPU_RUNS = 12
SLOW_FROM = 6  # runs 6.. are 15% slower: a regression at run 6
INCORRECT_RUN = 9


def fill_history(db: Database) -> None:
    """12 H200 runs (a 15% step at run 6, one run with an incorrect case), then 2 CPU-interpreter runs (the
    latest), judged as the runner does; and a job queue with a job of each status."""
    docs = []
    for i in range(N_GPU_RUNS):
        docs.append(make_result(
            run_id=f"gpu{i:03d}", commit=f"{i:02d}aa{i:02d}bb{i:02d}cc", started_at=BASE_TIME + i * timedelta(hours=1),
            scale=1.15 if i >= SLOW_FROM else 1.0, status={"B1_S256": "incorrect"} if i == INCORRECT_RUN else "pass",
            branch="main" if i % 4 else "feature",
        ))  # fmt: skip
    for i in range(2):
        docs.append(make_result(
            run_id=f"cpu{i:03d}", commit=f"{i:02d}cpu", cases=SMOKE_CASES, gpu_model=None, hardware_label=CPU,
            protocol="pcpu", started_at=BASE_TIME + timedelta(days=2, hours=i), n_samples=5, noise=0.05,
            medians={c.name: 2e6 * (k + 1) for k, c in enumerate(SMOKE_CASES)},
        ))  # fmt: skip
    for doc in docs:
        ingest_result(db, doc)
        judge_run(db, doc["run_id"])
    enqueue(db, "local", "f" * 40, branch="main")
    job = claim_next(db, "w", "gpu0")
    assert job is not None
    finish(db, job.id, status="failed", outcome="build_failed", log="fabricated build failure")
    enqueue(db, "local", "e" * 40, branch="main")
    enqueue(db, "local", "d" * 40, branch="main")
    claim_next(db, "w", "gpu1")


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> Database:
    db = Database(tmp_path_factory.mktemp("dash") / "history.duckdb", lock_timeout=20)
    fill_history(db)
    return db


@pytest.fixture(scope="module")
def h200(history_db: Database) -> dict:
    """The H200 selection's frames, as the app loads them."""
    sel = Selection(H200, "p1")
    runs = data.selected_runs(history_db, sel)
    hist = data.case_history(history_db, sel, list(runs["run_id"]))
    cases = hist.drop_duplicates("case")["case"].tolist()
    return {
        "runs": runs, "hist": hist, "flags": data.selected_flags(history_db, runs),
        "steps": data.steps(history_db, sel, cases), "run_id": runs["run_id"].iloc[-1],
    }  # fmt: skip


def _names(fig: go.Figure) -> list[str]:
    return [t.name for t in fig.data if t.name]


def _text(fig: go.Figure) -> str:
    """Title, subtitle and axis titles of a figure."""
    lay = fig.layout
    parts = [lay.title.text or "", (lay.title.subtitle.text or "") if lay.title.subtitle else ""]
    for ax in ("xaxis", "yaxis"):
        parts.append(getattr(lay, ax).title.text or "")
    return " | ".join(parts)


# ------------------------------------------------------------------------------------------------ data
def test_selection_defaults_and_options(history_db: Database) -> None:
    runs = data.all_runs(history_db)
    assert data.default_selection(runs) == Selection(CPU, "pcpu")  # the most recent run's
    assert data.hardware_options(runs) == [CPU, H200]
    assert data.protocol_options(runs, H200) == ["p1"]
    sel = data.selected_runs(history_db, Selection(H200, "p1", limit=5))
    assert len(sel) == 5 and set(sel["hardware"]) == {H200} and sel["started_at"].is_monotonic_increasing


def test_history_has_spread_and_never_mixes_hardware(h200: dict) -> None:
    hist = h200["hist"]
    assert set(hist["hardware"]) == {H200}
    assert len(hist) == N_GPU_RUNS * 16
    ok = hist.dropna(subset=["q25_us"])
    assert ((ok["q25_us"] <= ok["median_us"] + 1e-9) & (ok["median_us"] <= ok["q75_us"] + 1e-9)).all()


def test_flag_table_merges_flags_and_change_points_newest_first(h200: dict) -> None:
    kinds = set(h200["flags"]["kind"])
    assert {"regression", "incorrect"} <= kinds
    assert (h200["steps"]["case"] == "__suite__").any()  # the 15% step is found in the suite series
    table = data.flag_table(h200["flags"], h200["steps"])
    assert {"verdict (confirmed)", "stored step"} == set(table["source"])
    assert table["started_at"].is_monotonic_decreasing
    step = table[table["source"] == "stored step"].iloc[-1]
    assert step["commit"].startswith(f"{SLOW_FROM:02d}") and step["change"] == pytest.approx(0.15, abs=0.02)


# ------------------------------------------------------------------------------------------------ charts
def test_case_history_figure(h200: dict) -> None:
    fig = charts.case_history_figure(h200["hist"], case="B64_S128", hardware=H200, protocol="p1",
                                     flags=h200["flags"], steps=h200["steps"])  # fmt: skip
    names = _names(fig)
    for expected in ("kernel median", "kernel p25–p75", "eager (PyTorch)", "cuBLAS (2 GEMMs)", "regression"):
        assert expected in names
    assert any(n.startswith("T_SOL") for n in names)
    assert H200 in fig.layout.title.text and H200 in fig.layout.yaxis.title.text
    median = next(t for t in fig.data if t.name == "kernel median")
    assert list(median.x) == [f"{i:02d}aa{i:02d}bb" for i in range(N_GPU_RUNS)]  # commits, oldest first
    regression = next(t for t in fig.data if t.name == "regression")
    assert f"{SLOW_FROM:02d}aa{SLOW_FROM:02d}bb" in regression.x
    assert any(s.type == "line" for s in fig.layout.shapes)  # the change point


def test_suite_history_figure_marks_the_failed_run(h200: dict) -> None:
    fig = charts.suite_history_figure(h200["runs"], hardware=H200, protocol="p1", flags=h200["flags"],
                                      steps=h200["steps"], t_sol_us=39.6)  # fmt: skip
    names = _names(fig)
    assert {"kernel geomean", "eager (PyTorch)", "cuBLAS (2 GEMMs)", "run failed (no suite figure)"} <= set(names)
    failed = next(t for t in fig.data if t.name == "run failed (no suite figure)")
    assert list(failed.x) == [f"{INCORRECT_RUN:02d}aa{INCORRECT_RUN:02d}bb"]
    assert H200 in fig.layout.title.text and H200 in fig.layout.yaxis.title.text


def test_case_grid_one_panel_per_case(h200: dict) -> None:
    fig = charts.case_grid_figure(h200["hist"], hardware=H200, flags=h200["flags"])
    assert len(fig.layout.annotations) >= 16 and H200 in fig.layout.title.text
    assert sum(1 for t in fig.data if t.name == "kernel median") == 16


def test_sol_figures(history_db: Database, h200: dict) -> None:
    table = data.sol_table(history_db, h200["run_id"])
    fig = charts.sol_scores_figure(table, hardware=H200, run_label="run x")
    assert len(fig.data) == 1 and len(fig.data[0].x) == 16
    assert fig.data[0].y == pytest.approx(list(table["score"] * 100))
    assert H200 in fig.layout.title.text and H200 in fig.layout.yaxis.title.text
    lat = charts.sol_latency_figure(table, hardware=H200, run_label="run x")
    assert {"kernel median", "T_SOL", "cuBLAS (2 GEMMs)", "eager (PyTorch)"} == set(_names(lat))
    cpu = charts.sol_scores_figure(pd.DataFrame({"case": ["B1_S7"], "status": ["pass"], "score": [None],
                                                 "median_us": [1.0], "t_sol_us": [None]}),
                                   hardware=CPU, run_label="run y")  # fmt: skip
    assert len(cpu.data) == 0 and CPU in cpu.layout.title.text


def test_records_compare_only_sol_scores(history_db: Database, h200: dict) -> None:
    published = data.published_records(history_db)
    run = queries.run_info(history_db, h200["run_id"])
    assert run is not None
    fig = charts.records_figure(published, hardware=H200, project_score=run["score"], run_label="abc")
    bar = fig.data[0]
    assert len(bar.y) == len(published) + 1
    assert sum(f"({H200})" in n for n in bar.y) == 1 and sum("(B200)" in n for n in bar.y) == len(published)
    assert max(bar.x) <= 100 and "% of SOL" in fig.layout.xaxis.title.text
    assert "µs" not in (fig.layout.xaxis.title.text or "") + (fig.layout.yaxis.title.text or "")
    assert run["score"] * 100 in list(bar.x)


def test_samples_figure(history_db: Database, h200: dict) -> None:
    samples = queries.run_samples(history_db, h200["run_id"])
    fig = charts.samples_figure(samples, hardware=H200, run_label="run x")
    assert [t.type for t in fig.data] == ["box"] * 16
    assert all(len(t.y) == 50 for t in fig.data)
    assert H200 in fig.layout.title.text and H200 in fig.layout.yaxis.title.text
    absolute = charts.samples_figure(samples, hardware=H200, run_label="run x", relative=False)
    assert "µs" in absolute.layout.yaxis.title.text


def test_charts_refuse_to_mix_hardware(h200: dict) -> None:
    mixed = pd.concat([h200["hist"], h200["hist"].head(3).assign(hardware=CPU)])
    with pytest.raises(ValueError, match="never mix"):
        charts.case_history_figure(mixed, case="B1_S256", hardware=H200)
    with pytest.raises(ValueError, match="never mix"):
        charts.case_grid_figure(mixed, hardware=H200)
    with pytest.raises(ValueError, match="never mix"):
        charts.suite_history_figure(h200["runs"].assign(hardware=CPU), hardware=H200)
    with pytest.raises(ValueError, match="never mix"):
        charts.sol_scores_figure(mixed, hardware=H200, run_label="x")


def test_run_labels_disambiguate_repeated_commits() -> None:
    df = pd.DataFrame({"run_id": ["r1", "r2", "r3", "r2"], "commit": ["abcdef123", "abcdef123", None, "abcdef123"]})
    assert charts.run_labels(df) == {"r1": "abcdef12", "r2": "abcdef12 #2", "r3": "r3"}


# ------------------------------------------------------------------------------------------------ the app
def _app(monkeypatch: pytest.MonkeyPatch, db_path: Path, **params: str) -> AppTest:
    monkeypatch.setenv("SOLCI_DB", str(db_path))
    at = AppTest.from_file(APP, default_timeout=90)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def test_app_defaults_to_the_latest_runs_hardware(monkeypatch: pytest.MonkeyPatch, history_db: Database) -> None:
    at = _app(monkeypatch, history_db.path)
    assert not at.exception
    assert at.sidebar.selectbox(key="hardware").value == CPU
    assert any("Triton's interpreter" in w.value for w in at.warning)
    assert [m.label for m in at.metric][:3] == ["Status", "Suite geomean (µs)", "SOL score"]
    for fig in _figures(at):
        title = fig["layout"]["title"]["text"]
        assert CPU in title and H200 not in title


@pytest.mark.parametrize(
    ("view", "headers"),
    [
        ("History", []),
        ("Flags", [f"Flags — {H200}"]),
        ("SOL and records", [f"Distance to SOL — {H200}", "Best-known records"]),
        ("Runs and jobs", [f"Runs — {H200}", "Job queue", f"One run — {H200}"]),
    ],
)
def test_app_views_of_one_gpu(
    monkeypatch: pytest.MonkeyPatch, history_db: Database, view: str, headers: list[str]
) -> None:
    at = _app(monkeypatch, history_db.path, hardware=H200, view=view)
    assert not at.exception
    assert not at.error
    subheaders = [s.value for s in at.subheader]
    for h in headers:
        assert any(s.startswith(h) for s in subheaders), (h, subheaders)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["SOL score"].endswith("%") and metrics["Status"] == "pass"
    figures = _figures(at)
    if view != "Flags":
        assert figures
    for fig in figures:  # every figure names the GPU; none shows the CPU interpreter's timings
        text = json.dumps(fig["layout"].get("title", {}))
        assert H200 in text and CPU not in text
    if view == "Flags":
        assert len(at.dataframe) == 1 and len(at.dataframe[0].value) > 0
    if view == "Runs and jobs":
        assert {"queued", "running", "done", "failed"} <= set(metrics)
        assert metrics["failed"] == "1" and metrics["queued"] == "1"


def test_app_switches_hardware(monkeypatch: pytest.MonkeyPatch, history_db: Database) -> None:
    at = _app(monkeypatch, history_db.path)
    at.sidebar.selectbox(key="hardware").set_value(H200).run()
    assert not at.exception
    assert at.sidebar.selectbox(key="protocol").value == "p1"
    assert not at.warning
    assert all(H200 in f["layout"]["title"]["text"] for f in _figures(at))


def test_app_on_an_empty_database(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    at = _app(monkeypatch, tmp_path / "new" / "history.duckdb")
    assert not at.exception
    assert any("No runs yet" in i.value and "solci up" in i.value for i in at.info)


def test_app_shows_a_locked_database_as_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "locked.duckdb"
    Database(path).schema_version()
    with Database(path).write():
        pass
    monkeypatch.setenv(data.DASHBOARD_LOCK_ENV, "0.5")
    holder = duckdb.connect(str(path))  # a read-write connection keeps read-only ones out
    try:
        at = _app(monkeypatch, path)
    finally:
        holder.close()
    assert not at.exception
    assert at.error and "holds this database file" in at.error[0].value


# ------------------------------------------------------------------------------------------------ commands
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "TRITON_INTERPRET"}
    env.update(SOLCI_WORK=str(tmp / "work"), SOLCI_CACHE=str(tmp / "cache"), SOLCI_EXECUTOR="local",
               PYTHONPATH=str(PROJECT))  # fmt: skip
    return env


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read().decode(errors="replace")


@pytest.fixture
def served(history_db: Database, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ci.cli", "dashboard", "--db", str(history_db.path), "--port", str(port)],
        env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_solci_dashboard_serves(served: tuple[subprocess.Popen, int]) -> None:
    proc, port = served
    deadline = time.monotonic() + 60
    health = ""
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            _, health = _get(f"http://127.0.0.1:{port}/_stcore/health")
            if health.strip() == "ok":
                break
        except OSError:
            time.sleep(0.3)
    assert health.strip() == "ok", proc.stdout.read() if proc.poll() is not None and proc.stdout else health
    status, page = _get(f"http://127.0.0.1:{port}/")
    assert status == 200 and "<html" in page.lower()
    proc.terminate()  # SIGTERM to solci: forwarded to streamlit, which stops
    assert proc.wait(20) == 0
    with socket.socket() as s:  # streamlit is gone with it: nothing listens on the port any more
        s.settimeout(2)
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_solci_dashboard_and_up_refuse_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = str(s.getsockname()[1])
        for cmd in (["dashboard"], ["up", "--repo", str(tmp_path)]):
            proc = subprocess.run([sys.executable, "-m", "ci.cli", *cmd, "--db", str(tmp_path / "h.duckdb"),
                                   "--port", port], env=_env(tmp_path), cwd=tmp_path, capture_output=True,
                                  text=True, timeout=60)  # fmt: skip
            assert proc.returncode == 2 and "already in use" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_solci_up_measures_head_and_the_app_shows_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    repo = make_project_repo(tmp_path / "repo")
    db_path = tmp_path / "history.duckdb"
    proc = subprocess.run(
        [sys.executable, "-m", "ci.cli", "up", "--repo", str(repo.path), "--db", str(db_path), "--no-serve",
         "--cases", "1,7", "--rounds", "1", "--warmup", "0", "--iters", "2"],
        env=_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED" in proc.stdout and "B1_S7" in proc.stdout and CPU in proc.stdout
    db = Database(db_path)
    runs = queries.runs(db)
    assert len(runs) == 1 and runs["commit"].iloc[0] == repo.head() and runs["hardware"].iloc[0] == CPU
    jobs = list_jobs(db)
    assert [(j.status, j.outcome, j.run_id) for j in jobs] == [("done", "passed", runs["run_id"].iloc[0])]
    at = _app(monkeypatch, db_path)
    assert not at.exception and not at.error
    assert at.sidebar.selectbox(key="hardware").value == CPU
    assert any(m.label == "Status" and m.value == "pass" for m in at.metric)
