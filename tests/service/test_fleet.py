"""Several hosts, one lake: runner processes acting as separate hosts (``$SOLCI_HOSTNAME``) drain one queue.

A fake executor fabricates GPU-labelled result documents (tests/support/factories.make_result) after sleeping
``$FAKE_SLEEP`` seconds, so no GPU or interpreter time is needed. Each runner measures for its own GPU model
(``$SOLCI_GPU_MODEL``): one commit gets one measurement per kind of GPU.

- three hosts (two H200, one B200) drain six commits: every (commit, model) measured once, no row lost or
  duplicated, both H200 hosts took work;
- a runner SIGKILLed mid-job: its heartbeats stop, and another host finishes the job once the lease ran out;
- the catalog stopped mid-run: the finished result waits in the spool and is uploaded once it is back.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from storage import jobs, lake_queue
from tests.support import PROJECT
from tests.support.postgres import Lake, new_lake, wait_for
from tests.support.repo_factory import small_repo

RUNNER = textwrap.dedent("""
    import json, os, sys, threading, time
    from pathlib import Path
    from ci.service.executors.base import Execution
    from ci.service.runner import JobRunner, JobRunnerConfig
    from tests.support.factories import make_result
    from storage.db import open_database

    MODEL, HOST, MARKS = os.environ["SOLCI_GPU_MODEL"], os.environ["SOLCI_HOSTNAME"], Path(os.environ["MARKS"])

    class SleepyExecutor:
        name = "fake"

        def execute(self, source, commit, *, branch, repo, options):
            (MARKS / f"{HOST}-{commit[:12]}").write_text(str(os.getpid()))
            time.sleep(float(os.environ.get("FAKE_SLEEP", "0.3")))
            doc = make_result(commit=commit, cases=["4,128", "8,256"], n_samples=8, gpu_model=MODEL,
                              hardware_label=f"NVIDIA {MODEL}", repo=repo, branch=branch)
            doc["hardware"]["hostname"] = HOST
            return Execution("ok", doc, "measured", 0.1)

        def cleanup_stale(self):
            return []

    db = open_database(os.environ["SOLCI_DB"], data_path=os.environ["SOLCI_DATA_PATH"], lock_timeout=60)
    fields = JobRunnerConfig.__dataclass_fields__
    extra = {"gpu_model": MODEL} if "gpu_model" in fields else {}
    cfg = JobRunnerConfig(worker=HOST, gpu="gpu0", confirm=False, poll_interval=0.2, **extra)
    runner = JobRunner(db, cfg, executor=SleepyExecutor(), echo=lambda m: print(f"[{HOST}] {m}", file=sys.stderr,
                                                                                flush=True))
    stop = threading.Event()
    def watch():
        while not (MARKS / "STOP").exists():
            time.sleep(0.1)
        stop.set()
    threading.Thread(target=watch, daemon=True).start()
    reports = runner.run(stop=stop)
    print(json.dumps([[r.job_id, r.commit, r.outcome] for r in reports]), flush=True)
""")


class Hosts:
    """Runner processes on one lake, each its own host."""

    def __init__(self, lake: Lake, tmp: Path) -> None:
        self.lake, self.marks = lake, tmp / "marks"
        self.marks.mkdir(exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def start(self, host: str, model: str, **env: str) -> subprocess.Popen:
        log = self.marks.parent / f"{host}.log"
        e = self.lake.env(
            SOLCI_HOSTNAME=host,
            SOLCI_GPU_MODEL=model,
            MARKS=str(self.marks),
            SOLCI_SPOOL=str(self.marks.parent / f"spool-{host}"),
            **env,
        )
        e.pop("CI", None)
        p = subprocess.Popen(
            [sys.executable, "-c", RUNNER],
            env=e,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            start_new_session=True,
        )
        self.procs[host], self.logs[host] = p, log
        return p

    def stop_all(self, timeout: float = 60) -> dict[str, list]:
        (self.marks / "STOP").write_text("")
        out = {}
        for host, p in self.procs.items():
            if p.poll() is not None and p.returncode < 0:  # killed by the test
                continue
            try:
                stdout, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, _ = p.communicate()
            assert p.returncode == 0, f"{host}: exit {p.returncode}\n{self.log(host)}"
            out[host] = json.loads(stdout.strip().splitlines()[-1])
        return out

    def log(self, host: str) -> str:
        return self.logs[host].read_text()[-4000:]

    def kill_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def lake(pg, tmp_path: Path) -> Lake:
    return new_lake(pg, tmp_path, "fleet")


@pytest.fixture
def hosts(lake: Lake, tmp_path: Path):
    h = Hosts(lake, tmp_path)
    yield h
    h.kill_all()


def _registered(db, n: int) -> bool:
    return len(lake_queue.registered_models(db)) >= n


@pytest.mark.timeout(240)
def test_hosts_drain_one_queue_once_per_gpu_model(lake: Lake, hosts: Hosts, tmp_path: Path) -> None:
    db = lake.db()
    repo = small_repo(tmp_path / "repo", n_commits=1)
    shas = [repo.commit_file("notes.txt", f"{i}\n", f"c{i}") for i in range(6)]
    hosts.start("h200-a", "H200", FAKE_SLEEP="0.5")
    hosts.start("h200-b", "H200", FAKE_SLEEP="0.5")
    hosts.start("b200-a", "B200", FAKE_SLEEP="0.3")
    wait_for(lambda: _registered(db, 3), 60, what="three runners registered")
    for sha in shas:
        jobs.enqueue(db, str(repo.path), sha, branch="main", trigger="push")
    assert len(jobs.list_jobs(db)) == 12  # one job per (commit, GPU model)
    wait_for(lambda: all(j.status == "done" for j in jobs.list_jobs(db)), 180, 0.3, "every job done")
    reports = hosts.stop_all()

    done = jobs.list_jobs(db)
    assert all(j.outcome == "passed" and j.attempts == 1 for j in done), [(j.id, j.outcome, j.log) for j in done]
    assert {(j.commit, j.gpu_model) for j in done} == {(s, m) for s in shas for m in ("H200", "B200")}
    assert all(j.worker.split("-")[0] == j.gpu_model.lower() for j in done)  # each host measures its own model
    assert {j.worker for j in done if j.gpu_model == "H200"} == {"h200-a", "h200-b"}  # both H200 hosts worked
    assert sorted(r[0] for v in reports.values() for r in v) == sorted(j.id for j in done)  # each job by one host
    with db.read() as conn:
        per = conn.execute(
            """SELECT r."commit", r.gpu_model, count(DISTINCT r.run_id), count(x.case_name),
                      count(DISTINCT x.case_name) FROM runs r JOIN results x USING (run_id) GROUP BY 1, 2"""
        ).fetchall()
        n_samples = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
        linked = conn.execute("SELECT count(*) FROM runs WHERE job_id IS NOT NULL").fetchone()[0]
    assert sorted((c, m) for c, m, *_ in per) == sorted((s, m) for s in shas for m in ("H200", "B200"))
    assert all(runs == 1 and cases == 2 and distinct == 2 for _, _, runs, cases, distinct in per), per
    assert n_samples == 12 * 2 * 3 and linked == 12  # no row lost or duplicated
    assert {j.run_id for j in done} == {r for r in _run_ids(db)}


def _run_ids(db) -> set[str]:
    with db.read() as conn:
        return {r[0] for r in conn.execute("SELECT run_id FROM runs").fetchall()}


@pytest.mark.timeout(240)
def test_a_killed_runners_job_is_finished_by_another_host_after_its_lease(
    lake: Lake, hosts: Hosts, tmp_path: Path
) -> None:
    db = lake.db()
    lease = {"SOLCI_LEASE_TIMEOUT": "4", "SOLCI_HEARTBEAT_INTERVAL": "0.5"}
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    victim = hosts.start("h200-a", "H200", FAKE_SLEEP="120", **lease)
    wait_for(lambda: _registered(db, 1), 60, what="the first runner registered")
    job_id, _ = jobs.enqueue(db, str(repo.path), sha, branch="main")
    wait_for(lambda: (hosts.marks / f"h200-a-{sha[:12]}").exists(), 60, what="the measurement started")
    first = jobs.get_job(db, job_id)
    time.sleep(2.0)
    beat = jobs.get_job(db, job_id)
    assert beat.status == "running" and beat.heartbeat_at > first.heartbeat_at  # the lease is renewed
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    killed_at = jobs.get_job(db, job_id).heartbeat_at  # the last heartbeat

    hosts.start("h200-b", "H200", FAKE_SLEEP="0.2", **lease)
    wait_for(lambda: jobs.get_job(db, job_id).status == "done", 90, 0.3, "the other host to finish the job")
    hosts.stop_all()
    job = jobs.get_job(db, job_id)
    assert (job.outcome, job.attempts, job.worker) == ("passed", 2, "h200-b")  # recovered, measured again
    assert (job.started_at - killed_at).total_seconds() >= 3.5  # not before the lease ran out
    with db.read() as conn:
        assert conn.execute('SELECT count(*) FROM runs WHERE "commit" = ?', [sha]).fetchone()[0] == 1


@pytest.mark.timeout(300)
def test_the_catalog_stopped_mid_run_leaves_the_result_in_the_spool_until_it_is_back(
    pg,
    lake: Lake,
    hosts: Hosts,
    tmp_path: Path,
) -> None:
    db = lake.db()
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    hosts.start("h200-a", "H200", FAKE_SLEEP="3", SOLCI_CONNECT_TIMEOUT="2")
    wait_for(lambda: _registered(db, 1), 60, what="the runner registered")
    job_id, _ = jobs.enqueue(db, str(repo.path), sha, branch="main")
    wait_for(lambda: (hosts.marks / f"h200-a-{sha[:12]}").exists(), 60, what="the measurement started")
    spool = tmp_path / "spool-h200-a"
    pg.stop()  # the catalog (and the queue) go away while the runner measures
    try:
        wait_for(lambda: list(spool.glob("*.json")), 60, 0.2, "the result in the spool")
        time.sleep(3.0)  # the runner keeps trying while the catalog is away
        assert hosts.procs["h200-a"].poll() is None, hosts.log("h200-a")  # it waits, it does not die
        assert len(list(spool.glob("*.json"))) == 1
    finally:
        pg.start()
    wait_for(lambda: jobs.get_job(db, job_id).status == "done", 120, 0.5, "the spooled result uploaded and judged")
    reports = hosts.stop_all()
    job = jobs.get_job(db, job_id)
    assert (job.outcome, job.attempts) == ("passed", 2), job.log  # queued again to judge the uploaded run
    assert "of an earlier attempt is stored; judging it" in job.log, job.log  # not measured a second time
    assert not list(spool.glob("*.json"))  # uploaded, once
    with db.read() as conn:
        runs = conn.execute('SELECT run_id FROM runs WHERE "commit" = ?', [sha]).fetchall()
    assert len(runs) == 1 and runs[0][0] == job.run_id
    assert (hosts.marks / f"h200-a-{sha[:12]}").exists()
    assert [r[1] for r in reports["h200-a"]].count(sha) >= 1


# ------------------------------------------------------------------------------------------------ deployment
def test_compose_fleet_profile_runs_two_runners_and_a_dashboard_on_one_lake() -> None:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose (v1) is not installed")
    root = PROJECT
    res = subprocess.run(
        ["docker-compose", "--profile", "fleet", "config"], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    services = yaml.safe_load(res.stdout)["services"]
    fleet = {n: s for n, s in services.items() if n.startswith("fleet-")}
    assert set(fleet) == {"fleet-runner-1", "fleet-runner-2", "fleet-dashboard"} and "postgres" in services
    specs = {s["environment"]["SOLCI_DB"] for s in fleet.values()}
    assert len(specs) == 1 and next(iter(specs)).startswith("ducklake:postgres:")  # one lake
    assert {s["environment"]["SOLCI_DATA_PATH"] for s in fleet.values()} == {"/lake/"}
    gpus = [
        s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for n, s in fleet.items() if "runner" in n
    ]
    assert sorted(gpus) == [["0"], ["1"]]
    for name in (*fleet, "postgres"):  # started only with --profile fleet
        assert services[name]["profiles"] == ["fleet"], name


def test_workflow_measures_each_commit_once_per_gpu_model_into_one_history() -> None:
    wf = yaml.safe_load((PROJECT / ".github" / "workflows" / "solci.yml").read_text())
    job = wf["jobs"]["measure"]
    assert "${{ matrix.gpu }}" in job["runs-on"] and {"self-hosted", "gpu"} <= set(job["runs-on"])
    assert "fromJSON(vars.SOLCI_GPU_MODELS" in job["strategy"]["matrix"]["gpu"]
    assert job["strategy"]["fail-fast"] is False
    env = job["env"]
    assert env["SOLCI_GPU_MODEL"] == "${{ matrix.gpu }}"
    assert "vars.SOLCI_DB" in env["SOLCI_DB"] and "vars.SOLCI_DATA_PATH" in env["SOLCI_DATA_PATH"]
    assert "secrets." in env["PGPASSWORD"]
