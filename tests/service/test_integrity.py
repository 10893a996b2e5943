"""Issues 9 and 18: the measured commit cannot touch the measurement, the history or the machine.

A hostile commit (tests/support/hostile.py) runs through each executor: the history stays byte-identical, no file
outside its tree is written or deleted, no git hook appears, no connection reaches the host, and its attempt
to forge the timing is caught (the run is broken, never a figure). The same commit run without the sandbox
(``--trusted``) does reach the host: the fixture is real. Issue 18's two forgeries (messages rewritten in place,
made-up reply lines on every descriptor by a kernel that raises on every call) go through both executors too:
the one that raises is broken or rejected, never passed. Then the ingest, physics and SQL probes."""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ci.harness import sandbox
from ci.harness.sandbox import probe
from ci.service.executors.base import MeasureOptions
from ci.service.executors.docker import LABEL, OWNER_LABEL, DockerExecutor, owner_id
from ci.service.executors.local import LocalExecutor
from ci.verdict.apply import judge_run
from problem.workload import t_sol_us
from storage import queries
from storage.db import StorageError, open_database
from storage.ingest import ingest_result, reject
from storage.result import RejectedResult, SchemaError, parse, validate
from tests.support import PROJECT
from tests.support.factories import make_result
from tests.support.hostile import (
    FILL_DISK,
    FILL_TRITON_CACHE,
    FORGE_FD,
    FORGE_MESSAGES,
    Targets,
    hostile_commit,
    reports,
)
from tests.support.listener import Listener
from tests.support.repo_factory import LAUNCHER, make_project_repo

OPTIONS = MeasureOptions(cases="1,7", rounds=1, warmup=0, iters=2, timeout=300)
NO_BWRAP = probe()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def scene(tmp_path: Path):
    repo = make_project_repo(tmp_path / "repo")
    db = open_database(tmp_path / "state" / "history.duckdb")
    ingest_result(db, make_result(commit="before"))  # a history with a run in it
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("keep me")
    markers = tmp_path / "markers"
    markers.mkdir()
    listener = Listener()
    t = Targets(
        db.path,
        repo.path / ".git" / "hooks" / "post-commit",
        tmp_path / "outside" / "written.txt",
        victim,
        listener.port,
        markers,
    )
    sha = hostile_commit(repo, t)
    before = _sha(db.path)
    yield repo, sha, t, before, listener
    listener.close()


def _untouched(t: Targets, before: str, listener: Listener) -> None:
    assert _sha(t.history) == before, "the history file changed"
    assert not t.outside.exists(), "a file outside the tree was written"
    assert t.victim.read_text() == "keep me", "a file outside the tree was deleted"
    assert not t.hook.exists(), "a git hook was planted in the source repository"
    assert listener.hits == [], f"the host's loopback got a connection: {listener.hits}"
    assert sorted(p.name for p in t.marker_dir.iterdir()) == [], "the commit's sitecustomize/.pth/ci ran"


def _forgery_caught(doc: dict) -> None:
    errors = [c["error"] or "" for c in doc["cases"]]
    assert all(c["status"] == "error" for c in doc["cases"]), [c["status"] for c in doc["cases"]]
    assert all("integrity" in e and "was replaced" in e for e in errors), errors[0][:500]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap: {NO_BWRAP}")
def test_hostile_commit_in_the_local_sandbox_changes_nothing(scene, tmp_path: Path) -> None:
    repo, sha, t, before, listener = scene
    ex = LocalExecutor(gpu="gpuh", work_root=tmp_path / "work", sandbox="bwrap")
    res = ex.execute(repo.path, sha, branch="main", repo=str(repo.path), options=OPTIONS)
    assert res.status == "ok" and res.doc is not None, res.log[-3000:]
    _untouched(t, before, listener)
    _forgery_caught(res.doc)
    attempts = reports("\n".join(c["error"] or "" for c in res.doc["cases"]))
    assert attempts, "the hostile kernel's report is in the error text"
    r = attempts[0]
    assert r["write_history"].startswith("refused") and r["plant_hook"].startswith("refused")
    assert r["network"].startswith("refused") and r["dns"].startswith("refused")
    assert str(t.history) not in r["parent_cmdline"] and r["env_history"] == "done: None"
    assert not list((tmp_path / "work").glob("*/gpuh/run-*")), "the work folder is removed"
    # stored, it is a broken run of the commit and nothing else: no figure, no record

    db = open_database(tmp_path / "judged.duckdb")
    ingest_result(db, res.doc)
    out = judge_run(db, res.doc["run_id"])
    assert out.verdict == "rejected" and "tampered" in out.message
    assert queries.records(db).query("kind == 'project'").empty


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_same_commit_unsandboxed_does_reach_the_host(scene, tmp_path: Path) -> None:
    """Against the old behaviour (no sandbox): the fixture's attacks are real. The trusted harness still
    ignores the planted sitecustomize/.pth/ci and still catches the forged timers."""
    repo, sha, t, before, listener = scene
    ex = LocalExecutor(gpu="gpuh", work_root=tmp_path / "work", sandbox="none")
    res = ex.execute(repo.path, sha, branch="main", repo=str(repo.path), options=OPTIONS)
    assert res.status == "ok" and res.doc is not None, res.log[-3000:]
    assert t.hook.exists() and t.outside.exists() and not t.victim.exists()
    assert _sha(t.history) != before
    assert listener.hits
    assert sorted(p.name for p in t.marker_dir.iterdir()) == []
    _forgery_caught(res.doc)
    assert "TRUSTED mode" in res.log


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_hostile_commit_in_the_docker_executor_changes_nothing(scene, tmp_path: Path) -> None:
    why = DockerExecutor.unavailable_reason()
    if why is not None:
        pytest.skip(f"docker executor: {why}")
    repo, sha, t, before, listener = scene
    ex = DockerExecutor(gpu="gpuh")
    res = ex.execute(repo.path, sha, branch="main", repo=str(repo.path), options=OPTIONS)
    assert res.status == "ok" and res.doc is not None, res.log[-3000:]
    _untouched(t, before, listener)
    _forgery_caught(res.doc)
    r = reports("\n".join(c["error"] or "" for c in res.doc["cases"]))[0]
    assert r["network"].startswith("refused") and r["write_history"].startswith("refused")
    # what this run made is gone (a container another, killed test run left is cleanup_stale's: CI saw one)
    mine = [f"{OWNER_LABEL}={owner_id()}", f"{LABEL}=gpuh"]
    assert not ex.client.containers.list(all=True, filters={"label": mine})
    assert not ex.client.volumes.list(filters={"label": mine})


# ------------------------------------------------------------------------------------------------ forgeries
def _executor(kind: str, tmp_path: Path):
    if kind == "local":
        if NO_BWRAP is not None:
            pytest.skip(f"bubblewrap: {NO_BWRAP}")
        return LocalExecutor(gpu="gpuh", work_root=tmp_path / "work", sandbox="bwrap")
    why = DockerExecutor.unavailable_reason()
    if why is not None:
        pytest.skip(f"docker executor: {why}")
    return DockerExecutor(gpu="gpuh")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["local", "docker"])
def test_a_kernel_that_raises_but_forges_its_replies_is_never_passed(tmp_path: Path, kind: str) -> None:
    """Issue 18: a kernel that raises on every call and writes made-up reply lines (with the request's own id)
    to every open descriptor at import. The parent believes no figure and no verdict of the commit's process:
    the judge finds no outputs to check, so the case is broken."""
    repo = make_project_repo(tmp_path / "repo")
    sha = repo.commit_file(LAUNCHER, FORGE_FD, "forgery: reply lines on every descriptor, raises on every call")
    res = _executor(kind, tmp_path).execute(repo.path, sha, branch="main", repo=str(repo.path), options=OPTIONS)
    assert res.status == "ok" and res.doc is not None, res.log[-3000:]
    assert [c["status"] for c in res.doc["cases"]] == ["error"], res.doc["cases"][0]["error"][:500]
    assert res.doc["measured_by"] == "interpreter" and res.doc["suite"]["status"] != "pass"
    db = open_database(tmp_path / "judged.duckdb")
    ingest_result(db, res.doc)
    assert judge_run(db, res.doc["run_id"]).verdict in ("broken", "rejected")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["local", "docker"])
def test_a_kernel_that_rewrites_its_messages_is_judged_by_the_harness(tmp_path: Path, kind: str) -> None:
    """Issue 18: the correct kernel whose import rewrites every kernel sample in its process's message stream
    (x0.85). Under the interpreter its timing is the recording process's own and only functional: the
    verdict says so; what decides the case is the judge's comparison of the outputs with its reference (on the
    GPU the figures come from the judge's replay: scripts/gpu_replay_e2e.sh, docs/replay.md)."""
    repo = make_project_repo(tmp_path / "repo")
    sha = repo.commit_file(LAUNCHER, FORGE_MESSAGES, "forgery: messages rewritten in place")
    res = _executor(kind, tmp_path).execute(repo.path, sha, branch="main", repo=str(repo.path), options=OPTIONS)
    assert res.status == "ok" and res.doc is not None, res.log[-3000:]
    (case,) = res.doc["cases"]
    assert case["status"] == "pass", case["error"]
    assert case["correctness"]["rounds_run"] == OPTIONS.rounds  # the judge's rounds
    db = open_database(tmp_path / "judged.duckdb")
    ingest_result(db, res.doc)
    assert judge_run(db, res.doc["run_id"]).verdict == "functional"


# ------------------------------------------------------------------------------------------------ disk
def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap: {NO_BWRAP}")
def test_a_commit_that_fills_its_folders_is_rejected_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """Issue 19, finding 1: the per-file cap let a kernel write as many large files as it liked. Everything the
    commit's processes write now lies in a tmpfs of the write budget: the kernel that fills it (and then computes
    the right result) is rejected with the budget named, and the runner's disk keeps nothing of it."""
    repo = make_project_repo(tmp_path / "repo")
    sha = repo.commit_file(LAUNCHER, FILL_DISK, "hostile: fills its temporary folder")
    ex = LocalExecutor(gpu="gpuh", work_root=tmp_path / "work", sandbox="bwrap")
    opts = replace(OPTIONS, env={"SOLCI_WRITE_BUDGET_MB": "64"})
    res = ex.execute(repo.path, sha, branch="main", repo=str(repo.path), options=opts)
    assert res.status == "ok" and res.doc is not None, res.log[-3000:]
    (case,) = res.doc["cases"]
    assert case["status"] == "error", f"the case was {case['status']}"
    assert case["error"].startswith("over budget:"), case["error"][:500]
    assert "64 MiB" in case["error"]
    db = open_database(tmp_path / "judged.duckdb")
    ingest_result(db, res.doc)
    judged = judge_run(db, res.doc["run_id"])
    assert judged.verdict == "rejected" and "write budget" in judged.message, judged.message
    assert _tree_bytes(tmp_path / "work") < 2**20  # the run's folder is gone, and the cache holds nothing of it


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap: {NO_BWRAP}")
def test_a_commit_s_triton_cache_is_kept_only_within_its_cap(tmp_path: Path) -> None:
    """Issue 19, finding 1: 24 MiB written under the kernel's Triton cache stayed on the runner's disk after the
    run. The cache now lives in the sandbox's tmpfs and is copied out only within $SOLCI_TRITON_CACHE_KEEP_MB;
    the run itself is within its budget and passes."""
    repo = make_project_repo(tmp_path / "repo")
    sha = repo.commit_file(LAUNCHER, FILL_TRITON_CACHE, "hostile: a large Triton cache")
    ex = LocalExecutor(gpu="gpuh", work_root=tmp_path / "work", sandbox="bwrap")
    small = replace(OPTIONS, env={"SOLCI_WRITE_BUDGET_MB": "256", "SOLCI_TRITON_CACHE_KEEP_MB": "8"})
    res = ex.execute(repo.path, sha, branch="main", repo=str(repo.path), options=small)
    assert res.status == "ok" and res.doc is not None, res.log[-3000:]
    assert [c["status"] for c in res.doc["cases"]] == ["pass"], res.doc["cases"][0]["error"]
    assert "Triton cache was not kept (over 8 MiB" in res.log
    assert _tree_bytes(tmp_path / "work") < 8 * 2**20
    roomy = replace(OPTIONS, env={"SOLCI_WRITE_BUDGET_MB": "256", "SOLCI_TRITON_CACHE_KEEP_MB": "64"})
    res = ex.execute(repo.path, sha, branch="main", repo=str(repo.path), options=roomy)
    assert res.status == "ok" and "Triton cache was not kept" not in res.log
    kept = ex.triton_cache(sha) / "planted"  # within the cap it is kept for the commit's next run
    assert sorted(p.name for p in kept.iterdir()) == ["blob-0.bin", "blob-1.bin", "blob-2.bin"]


def test_the_sandbox_s_scratch_is_a_tmpfs_of_the_budget(tmp_path: Path) -> None:
    """What the budgeted sandbox is made of: a tmpfs /scratch of the budget, small /tmp and /dev/shm, the
    commit's Triton cache read-only as a seed, and no host folder bound read-write."""
    cmd, _env = sandbox.wrap(
        ["true"],
        candidate=None,
        scratch=tmp_path / "s",
        env={},
        gpu=False,
        triton_cache=tmp_path / "tc",
        budget=5 * 2**20,
        info_fd=7,
    )
    joined = " ".join(cmd)
    assert f"--size {5 * 2**20} --tmpfs {sandbox.SCRATCH_MOUNT}" in joined
    assert f"--size {sandbox.SIDE_BYTES} --tmpfs /tmp" in joined and "--info-fd 7" in joined
    assert f"--ro-bind {(tmp_path / 'tc').resolve()} {sandbox.TRITON_SEED}" in joined
    assert "--bind " not in joined.replace("--ro-bind ", "").replace("--dev-bind ", "")
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------------------------ ingest
def _bad(**change) -> dict:
    doc = make_result(cases=["1,256", "4,128"])
    for path, value in change.items():
        obj = doc
        keys = path.split("__")
        for k in keys[:-1]:
            obj = obj[int(k)] if isinstance(obj, list) else obj[k]
        last = keys[-1]
        if isinstance(obj, list):
            obj[int(last)] = value
        else:
            obj[last] = value
    return doc


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"cases__0__timings__0__samples_us__0": float("nan")}, "NaN or infinite"),
        ({"cases__0__timings__0__samples_us__0": float("inf")}, "NaN or infinite"),
        ({"cases__0__timings__0__samples_us__0": -3.0}, "finite positive"),
        ({"cases__0__timings__0__samples_us__0": 1e12}, "beyond any measurement"),
        ({"cases__0__timings__0__median_us": 1e-9}, "not the median of its samples"),
        ({"cases__0__median_us": 1e-9}, "not the kernel's median"),
        ({"cases__0__status": "excellent"}, "must be one of"),
        ({"cases__0__case": "__suite__"}, "is not the case"),
        (
            {"cases__1__case": "B1_S256", "cases__1__batch_size": 1, "cases__1__seq_len": 256, "cases__1__m": 256},
            "appears twice",
        ),
        ({"cases__0__m": 999}, "is not 1 x 256"),
        ({"suite__n_pass": 7}, "do not count the cases"),
        ({"suite__geomean_us": 0.001}, "not the geometric mean"),
        ({"run_id": "../../etc/passwd"}, "not a run id"),
        ({"wall_s": float("nan")}, "NaN or infinite"),
        ({"commit": "x" * 300_000}, "characters"),
        ({"measured_by": "direct"}, "never stored as a CI result"),
        # issue 19, finding 3: a configuration describing itself as megabytes of small strings
        ({"cases__0__config": {f"k{i}": "x" * 60 for i in range(400)}}, r"config: \d+ bytes of JSON \(at most 16384\)"),
        ({"cases__0__config": {"a": {"b": {"c": {"d": {"e": 1}}}}}}, "config: nested deeper than 4 levels"),
        ({"cases__0__telemetry": {"before": {"x": "y" * 20_000}}}, "telemetry: .* bytes of JSON"),
        ({"cases__0__warnings": ["careful"] * 33}, "warnings: expected a list of at most 32 texts"),
        ({"cases__0__warnings": ["w" * 2001]}, r"warnings\[0\]: expected a text of at most 2000 characters"),
        ({"measured_by": "my own laptop"}, "is not one of"),
    ],
)
def test_ingest_refuses_figures_it_cannot_believe(tmp_path: Path, change: dict, match: str) -> None:
    db = open_database(tmp_path / "h.duckdb")
    with pytest.raises(SchemaError, match=match):
        ingest_result(db, _bad(**change))
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_sample_counts_must_match_the_protocol(tmp_path: Path) -> None:
    doc = make_result(cases=["1,256"])
    doc["cases"][0]["timings"][0]["samples_us"] = doc["cases"][0]["timings"][0]["samples_us"][:10]
    with pytest.raises(RejectedResult, match="10 samples where the protocol times 50"):
        validate(doc)


def test_strict_json_and_size() -> None:
    with pytest.raises(RejectedResult, match="NaN is not valid JSON"):
        parse('{"a": NaN}')
    with pytest.raises(SchemaError, match="expected a JSON object"):
        parse("[1, 2]")


def test_a_rejected_document_is_stored_with_its_reason_never_as_figures(tmp_path: Path) -> None:
    db = open_database(tmp_path / "h.duckdb")
    doc = _bad(cases__0__timings__0__median_us=1e-9)
    try:
        ingest_result(db, doc, job_id=7)
    except RejectedResult as exc:
        reject(db, doc, str(exc), job_id=7)
    with db.read() as conn:
        rows = conn.execute("SELECT run_id, job_id, reason FROM rejected_runs").fetchall()
        n_runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert n_runs == 0 and rows[0][1] == 7 and "not the median" in rows[0][2]


def test_faster_than_the_speed_of_light_is_quarantined_never_a_record(tmp_path: Path) -> None:
    """Issue 9: a 1e-9 us "pass" became the project record; a sitecustomize-halved run went below the H200's
    speed of light for the suite."""
    db = open_database(tmp_path / "h.duckdb")
    honest = ["c1", "c1b", "c1c"]  # a level of three commits: a record (docs/verdicts.md, "How records are made")
    for i, c in enumerate(honest):
        ingest_result(db, make_result(run_id=f"honest{i}", commit=c))
        judge_run(db, f"honest{i}", ancestry=honest[: i + 1][::-1])
    forged = make_result(run_id="forged", commit="c2", medians={"B1_S256": 0.5 * t_sol_us(256, "H200")})
    ingest_result(db, forged)
    assert "speed of light" in (queries.run_info(db, "forged")["quarantine"] or "")
    out = judge_run(db, "forged", ancestry=["c2", *honest[::-1]])
    assert out.verdict == "quarantined" and "B1_S256" in out.message
    best = queries.records(db)
    best = best[(best["kind"] == "project") & (best["case"] == "B1_S256")]
    assert len(best) == 1 and best["commit"].iloc[0] in honest, best
    later = make_result(run_id="later", commit="c3")
    ingest_result(db, later)
    judge_run(db, "later", ancestry=["c3", "c2", *honest[::-1]])
    assert queries.verdict(db, "later")["level_commits"] == 3, "a quarantined run is no baseline"


def test_a_gpu_of_no_known_model_is_never_judged_for_speed_nor_a_record(tmp_path: Path) -> None:
    """Issue 19, finding 8: a GPU run whose model is unknown has no speed of light to check its figures against;
    a 1e-9 us figure was stored as a pass. It is stored, labelled, judged functional only, and no record."""
    db = open_database(tmp_path / "h.duckdb")
    unknown = dict(gpu_model=None, hardware_label="NVIDIA Mystery GPU", mode="gpu")
    ingest_result(db, make_result(run_id="m1", commit="c1", **unknown))
    forged = make_result(run_id="m2", commit="c2", medians={"B1_S256": 1e-9}, **unknown)
    ingest_result(db, forged)
    for run_id, ancestry in (("m1", ["c1"]), ("m2", ["c2", "c1"])):
        out = judge_run(db, run_id, ancestry=ancestry)
        assert out.verdict == "functional" and "no known model" in out.message, out.message
    assert queries.records(db).query("kind == 'project'").empty
    assert queries.run_info(db, "m2")["hardware_label"] == "NVIDIA Mystery GPU"


def test_a_runner_checks_the_gpu_the_document_claims(tmp_path: Path) -> None:
    db = open_database(tmp_path / "h.duckdb")
    with pytest.raises(RejectedResult, match="this runner measures on 'H200'"):
        ingest_result(db, make_result(hardware_label="NVIDIA B200", gpu_model="B200"), expect_gpu_model="H200")


# ------------------------------------------------------------------------------------------------ sql
@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM read_text('/etc/shadow')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM glob('/*')",
        "EXPLAIN ANALYZE COPY (SELECT 1) TO '{out}'",
        "COPY (SELECT 1) TO '{out}'",
        "SELECT * FROM 'https://example.com/a.parquet'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "ATTACH '{out}' AS other",
        "SET enable_external_access = true",
        "CREATE TABLE x (a INT)",
        "DELETE FROM runs",
    ],
)
def test_sql_reads_the_history_and_nothing_else(tmp_path: Path, query: str) -> None:
    db = open_database(tmp_path / "h.duckdb")
    ingest_result(db, make_result())
    out = tmp_path / "leak.csv"
    with pytest.raises(StorageError, match=r"refused|read-only"):
        queries.run_sql(db, query.format(out=out))
    assert not out.exists()
    assert len(queries.run_sql(db, "SELECT * FROM runs")) == 1


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM read_text('/etc/shadow')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_text('http://127.0.0.1:9/x')",
        "PRAGMA import_database('/etc')",
    ],
)
def test_sql_cli_refusals_are_one_line_and_exit_2(tmp_path: Path, query: str) -> None:
    """Issue 19, finding 4: a table function or pragma that touches a path or URL is refused with one line (DuckDB's
    own error goes on with a 'LINE 1:' and a caret line: the probe counted three)."""
    db = open_database(tmp_path / "h.duckdb")
    ingest_result(db, make_result())
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT)}
    proc = subprocess.run(
        [sys.executable, "-m", "ci.cli", "sql", "--db", str(db.path), query], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and "refused" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_validate_accepts_what_the_harness_writes() -> None:
    doc = make_result()
    assert validate(doc) is doc
    assert math.isfinite(doc["suite"]["geomean_us"])


def test_the_sandbox_binds_the_compiler_but_never_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton builds its driver module with $CC (on the H200: /opt/gcc/bin/gcc): its prefix is bound read-only;
    a PATH folder inside a repository's checkout (its history, its .git) is not."""
    prefix = tmp_path / "opt" / "gcc"
    (prefix / "bin").mkdir(parents=True)
    cc = prefix / "bin" / "gcc"
    cc.write_text("#!/bin/sh\n")
    cc.chmod(0o755)
    repo = make_project_repo(tmp_path / "repo")
    (repo.path / "tools").mkdir()
    env = {"CC": str(cc), "PATH": f"{repo.path / 'tools'}:/usr/bin:/bin"}
    dirs = sandbox.tool_dirs(env)
    assert prefix.resolve() in dirs and not any(str(d).startswith(str(repo.path)) for d in dirs)
    if sandbox.bwrap_path():
        cmd, _ = sandbox.wrap(["true"], candidate=None, scratch=tmp_path / "s", env=env)
        binds = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--ro-bind"]
        assert str(prefix.resolve()) in binds
        assert not any(b.startswith(str(repo.path)) for b in binds)


def test_sql_never_reads_a_folder_of_files_nor_the_network(tmp_path: Path) -> None:
    """Issue 19, finding 4: the statement was parsed on DuckDB's default connection, whose parse expands
    `PRAGMA import_database(...)`: a schema.sql in any readable folder ran and returned rows, errors told whether a
    path exists, and with a URL DuckDB tried an extension install and sent a request to a local listener. Now the
    statement is parsed on the locked connection, and import/export_database are refused before any parse."""
    db = open_database(tmp_path / "h.duckdb")
    ingest_result(db, make_result())
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "schema.sql").write_text("SELECT 42 AS leaked;")
    listener = Listener()
    try:
        for query in (
            f"PRAGMA import_database('{folder}')",
            f"pragma Import_Database('{tmp_path / 'missing'}')",
            f"PRAGMA import_database('http://127.0.0.1:{listener.port}/x')",
            f"EXPORT DATABASE '{tmp_path / 'out'}'",
        ):
            with pytest.raises(StorageError, match="refused") as info:
                queries.run_sql(db, query)
            assert "leaked" not in str(info.value) and "schema.sql" not in str(info.value)
    finally:
        listener.close()
    assert listener.hits == [] and not (tmp_path / "out").exists()


def test_sql_stops_a_long_query_and_caps_its_rows(tmp_path: Path) -> None:
    """Issue 19, finding 5 (the reader's part): a 10-million-row query ran 58 s, took 2.2 GB and printed every row
    while it held the history. A query is interrupted after its time limit; at most --max-rows rows are fetched."""
    db = open_database(tmp_path / "h.duckdb")
    ingest_result(db, make_result())
    with pytest.raises(StorageError, match=r"stopped after 0\.5 s"):
        queries.run_sql(db, "SELECT count(*) FROM range(100000) a, range(100000) b", timeout_s=0.5)
    df = queries.run_sql(db, "SELECT * FROM range(10000000)", max_rows=100)
    assert len(df) == 100 and df.attrs["truncated"]
    whole = queries.run_sql(db, "SELECT * FROM runs", max_rows=100)
    assert len(whole) == 1 and not whole.attrs["truncated"]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROJECT)}
    proc = subprocess.run(
        [sys.executable, "-m", "ci.cli", "sql", "--db", str(db.path), "--max-rows", "3", "SELECT * FROM range(10)"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0 and "(the first 3 rows; --max-rows N for more)" in proc.stdout
