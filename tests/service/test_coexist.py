"""Runners that coexist on one machine (issue 9), on a history file: each hole reproduced, then closed.

- two runners on one GPU slot (a `solci worker` measuring while a `solci run` starts on the same slot, as the
  workflow does without --gpu): the second neither requeues the first's job nor cleans up after it; it waits,
  and both finish;
- a reader holding the history file as a measurement ends (issue 19, finding 5: a long `solci sql` made a
  `solci run` give up after 30 s with exit 4): for less than the runner's store patience, the result waits in the
  spool and is stored from there and judged in the same job (exit 0); held past the patience, the job is
  infra_error (exit 4) with the result in the spool, and the next look at the queue stores it and judges it:
  nothing measured is lost, nothing measured twice; judging and the record of the outcome wait the same way;
- a full disk at the storage boundary (ENOSPC) is infrastructure (exit 4), never a broken commit (exit 1).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import ci.service.runner as runner_mod
import storage.ingest as ingest_mod
from ci.cli.common import wait_for_jobs
from ci.service.executors.local import LocalExecutor, owner_record
from ci.service.runner import EXIT_BROKEN, EXIT_INFRA, EXIT_OK, JobRunner, JobRunnerConfig, exit_code_for
from storage import jobs, spool
from storage.db import Database, DatabaseLockedError, open_database
from tests.support import PROJECT
from tests.support.factories import make_result
from tests.support.fakes import FakeExecutor
from tests.support.postgres import wait_for
from tests.support.repo_factory import small_repo

WORKER = textwrap.dedent("""
    import json, os, sys, time
    from ci.service.executors.base import Execution
    from ci.service.runner import JobRunner, JobRunnerConfig
    from tests.support.factories import make_result
    from storage.db import open_database

    class Slow:
        name = "fake"
        cleaned = 0
        def execute(self, source, commit, *, branch, repo, options):
            open(os.environ["STARTED"], "w").write(commit)
            time.sleep(float(os.environ["FAKE_SLEEP"]))
            return Execution("ok", make_result(commit=commit, cases=["4,128"], n_samples=8, repo=repo), "ok", 0.1)
        def cleanup_stale(self):
            return []

    db = open_database(sys.argv[1], lock_timeout=30)
    reports = JobRunner(db, JobRunnerConfig(worker="worker", gpu="gpu0", confirm=False), executor=Slow()).run(once=True)
    print(json.dumps([[r.job_id, r.outcome] for r in reports]))
""")


@pytest.fixture
def db(tmp_path: Path, monkeypatch) -> Database:
    monkeypatch.setenv("SOLCI_SPOOL", str(tmp_path / "spool"))
    return open_database(tmp_path / "history.duckdb", lock_timeout=20)


@pytest.mark.timeout(120)
def test_two_runners_on_one_slot_both_finish(db: Database, tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=2)
    first, second = repo.head(), repo.commit_file("x.txt", "x", "x")
    busy_id, _ = jobs.enqueue(db, str(repo.path), first, branch="main")
    started = tmp_path / "started"
    env = dict(os.environ, PYTHONPATH=str(PROJECT), STARTED=str(started), FAKE_SLEEP="4")
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(db.path)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        wait_for(started.exists, 60, what="the worker's measurement")
        # `solci run` on the same slot: the worker's job is alive, not a dead runner's
        fake = FakeExecutor({second: "pass"})
        run = JobRunner(db, JobRunnerConfig(worker="run", gpu="gpu0", confirm=False), executor=fake)
        assert run.start() == []
        assert fake.cleaned == 0  # the worker's files were left alone
        job = jobs.get_job(db, busy_id)
        assert (job.status, job.attempts, job.worker) == ("running", 1, "worker")
        mine, _ = jobs.enqueue(db, str(repo.path), second, branch="main", force=True)
        done = wait_for_jobs(db, [mine], run, stop=threading.Event())  # waits for the slot, then runs
        out, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0
    by_worker = [job_id for job_id, outcome in json.loads(out) if outcome == "passed"]
    assert busy_id in by_worker  # the worker's job was not taken from it
    assert done[mine].status == "done" and done[mine].outcome == "passed"
    assert sorted(by_worker + ([mine] if fake.calls else [])) == sorted([busy_id, mine])  # each job run once
    busy = jobs.get_job(db, busy_id)
    assert (busy.status, busy.outcome, busy.attempts) == ("done", "passed", 1)  # measured once, not killed
    assert jobs.get_job(db, mine).attempts == 1
    assert busy.finished_at <= jobs.get_job(db, mine).started_at  # the slot ran one job at a time


HOLDER = textwrap.dedent("""
    import sys, duckdb
    conn = duckdb.connect(sys.argv[1], read_only=True)  # a reader (as solci sql is): holds the file's lock
    print("holding", flush=True)
    sys.stdin.read()  # until the test lets go
    conn.close()
""")


class LockingExecutor(FakeExecutor):
    """Measures, and as the measurement ends another process (a reader) takes the history file's lock, until
    ``let_go``."""

    def __init__(self, plan: dict[str, str], path: Path) -> None:
        super().__init__(plan)
        self.path, self.holder = path, None

    def execute(self, source, commit, *, branch, repo, options):
        result = super().execute(source, commit, branch=branch, repo=repo, options=options)
        if self.holder is None:
            self.holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, str(self.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            assert self.holder.stdout.readline().strip() == "holding"
        return result

    def let_go(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.holder.stdin.close()
            self.holder.wait(timeout=30)

    def kill(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait()


@pytest.fixture
def fast_retries(monkeypatch) -> None:
    """The runner's retries of a refused write start at 10 ms (not 0.5 s): the tests stay fast."""
    monkeypatch.setattr(spool, "RETRY_FIRST_S", 0.01, raising=False)
    monkeypatch.setattr(spool, "RETRY_MAX_S", 0.05, raising=False)


@pytest.mark.timeout(120)
def test_a_reader_shorter_than_the_patience_is_waited_out_in_the_same_job(
    db: Database, tmp_path: Path, monkeypatch
) -> None:
    """Finding 5: a reader held the history as the measurement ended; the runner gave up after its lock timeout
    (exit 4) and the commit had no verdict until a flush. Now the result waits in the spool and is stored from
    there, then judged, in the same job: `solci run` exits 0."""
    monkeypatch.setenv("SOLCI_STORE_PATIENCE", "60")  # the runner's patience, far past the reader here
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    job_id, _ = jobs.enqueue(db, str(repo.path), sha, branch="main")
    short = open_database(db.path, lock_timeout=0.5)  # each attempt gives up on the lock long before the reader
    fake = LockingExecutor({sha: "pass"}, db.path)
    said: list[str] = []

    def echo(line: str) -> None:  # the reader lets go once the runner said it waits (no clock in the test)
        said.append(line)
        if "retrying for up to" in line:
            fake.let_go()

    runner = JobRunner(short, JobRunnerConfig(worker="w", confirm=False), executor=fake, echo=echo)
    try:
        report = runner.run_next()  # the job as `solci run` processes it (JobRunner.process)
    finally:
        fake.kill()
    assert report is not None and (report.job_id, report.outcome) == (job_id, "passed"), report.log
    assert exit_code_for([report.exit_outcome]) == EXIT_OK
    job = jobs.get_job(db, job_id)
    assert (job.status, job.outcome, job.attempts) == ("done", "passed", 1), job.log
    assert "history locked by another process; result kept in the spool, retrying for up to 60 s" in job.log
    assert fake.calls == [sha]  # measured once
    assert spool.pending(db) == []  # stored from the spool, nothing left there
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
        assert conn.execute("SELECT verdict FROM verdicts WHERE run_id = ?", [job.run_id]).fetchall() == [("baseline",)]


@pytest.mark.timeout(180)
def test_a_reader_past_the_patience_leaves_the_result_in_the_spool_and_loses_nothing(
    db: Database, tmp_path: Path, monkeypatch, fast_retries
) -> None:
    monkeypatch.setenv("SOLCI_STORE_PATIENCE", "0.5")
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    job_id, _ = jobs.enqueue(db, str(repo.path), sha, branch="main")
    short = open_database(db.path, lock_timeout=0.2)
    fake = LockingExecutor({sha: "pass"}, db.path)  # holds until the runner has given up
    runner = JobRunner(short, JobRunnerConfig(worker="w", confirm=False), executor=fake)
    try:
        first = runner.run_next()
    finally:
        fake.let_go()
    assert first is not None and first.outcome == "infra_error"
    assert exit_code_for([first.outcome]) == EXIT_INFRA  # exit 4: not the commit's fault
    assert "history locked by another process; result kept in the spool, retrying for up to 0.5 s" in first.log
    assert "gave up: the result stays in the spool" in first.log
    pending = spool.pending(db)
    assert [p.run_id for p in pending] and pending[0].job_id == job_id  # the result was kept
    assert jobs.get_job(db, job_id).status in ("failed", "running")
    again = JobRunner(db, JobRunnerConfig(worker="w2", confirm=False), executor=fake)  # the next runner
    reports = again.run(once=True)
    assert [(r.job_id, r.outcome) for r in reports] == [(job_id, "passed")]
    assert fake.calls == [sha]  # measured once: the spooled result was stored and judged, not re-measured
    assert spool.pending(db) == []
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    job = jobs.get_job(db, job_id)
    assert (job.status, job.outcome, job.run_id) == ("done", "passed", pending[0].run_id)


@pytest.mark.timeout(120)
def test_judging_and_the_outcome_wait_out_a_locked_history_too(
    db: Database, tmp_path: Path, monkeypatch, fast_retries
) -> None:
    """The run is stored, then the history is refused while it is judged and while its outcome is recorded
    (more times than the three attempts the runner used to make): both are waited out, in the same job."""
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    job_id, _ = jobs.enqueue(db, str(repo.path), sha, branch="main")
    refusals = {"judge": 2, "finish": 5}

    def refused_first(what: str, real):
        def call(*args, **kwargs):
            if refusals[what]:
                refusals[what] -= 1
                raise DatabaseLockedError(f"{what}: another process holds this database file")
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(runner_mod, "judge_run", refused_first("judge", runner_mod.judge_run))
    monkeypatch.setattr(jobs, "finish", refused_first("finish", jobs.finish))
    monkeypatch.setenv("SOLCI_STORE_PATIENCE", "60")
    said: list[str] = []
    report = JobRunner(
        db, JobRunnerConfig(worker="w", confirm=False), executor=FakeExecutor({sha: "pass"}), echo=said.append
    ).run_next()
    assert report is not None and (report.outcome, report.recorded) == ("passed", True), report.log
    assert refusals == {"judge": 0, "finish": 0}
    assert "history locked by another process while judging; retrying for up to 60 s" in report.log
    assert any("while recording its outcome; retrying for up to 60 s" in line for line in said), said
    job = jobs.get_job(db, job_id)
    assert (job.status, job.outcome) == ("done", "passed")


def _run_with_a_full_disk(db: Database, tmp_path: Path, monkeypatch, where: object, name: str):
    """One queued commit measured while ``where.name`` fails with ENOSPC (the disk is full): the job's report."""
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    jobs.enqueue(db, str(repo.path), sha, branch="main")

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(where, name, full)
    return JobRunner(db, JobRunnerConfig(worker="w", confirm=False), executor=FakeExecutor({sha: "pass"})).run_next()


@pytest.mark.timeout(120)
def test_a_full_disk_is_infrastructure_not_a_broken_commit(db: Database, tmp_path: Path, monkeypatch) -> None:
    # the write fails inside ingest's transaction
    report = _run_with_a_full_disk(db, tmp_path, monkeypatch, ingest_mod, "_insert_samples")
    assert report.outcome == "infra_error" and "disk is full" in report.log
    assert exit_code_for([report.outcome]) == EXIT_INFRA != EXIT_BROKEN
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0  # rolled back whole


@pytest.mark.timeout(120)
def test_a_full_spool_disk_is_infrastructure_too(db: Database, tmp_path: Path, monkeypatch) -> None:
    report = _run_with_a_full_disk(db, tmp_path, monkeypatch, spool.os, "fsync")
    assert exit_code_for([report.outcome]) == EXIT_INFRA
    assert not list((tmp_path / "spool").glob("*"))  # no half-written file left behind


# ------------------------------------------------------------------------------------------------ finding 7
# Two checkouts on one host (issue 19, finding 7): the work folder was shared per user, and a runner of another
# history removed a live runner's `gpu0-*` folder as "a leftover of a stopped runner" (that run ended infra_error).
# Work folders are now keyed by history and slot and removed only when their recorded owner is dead.
def _local_config() -> JobRunnerConfig:
    return JobRunnerConfig(
        worker="w", gpu="gpu0", confirm=False, executor="local", executor_options={"sandbox": "none"}
    )


@pytest.mark.timeout(120)
def test_a_runner_of_another_history_leaves_a_live_runners_work_folder_alone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SOLCI_WORK", str(tmp_path / "work"))  # one work root for the user, as by default
    monkeypatch.setenv("SOLCI_SPOOL", str(tmp_path / "spool"))
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    first = open_database(tmp_path / "first" / "history.duckdb", lock_timeout=20)  # one checkout's history
    second = open_database(tmp_path / "second" / "history.duckdb", lock_timeout=20)  # a newcomer's, same host
    job_id, _ = jobs.enqueue(first, str(repo.path), sha, branch="main")
    measuring, go, folders = threading.Event(), threading.Event(), []

    def paused_measurement(self, cmd, cwd, log_path, workdir, options):  # LocalExecutor._run, held mid-way
        folders.append(workdir)
        measuring.set()
        assert go.wait(60)
        at = cmd.index("--commit")
        doc = make_result(commit=cmd[at + 1], cases=["4,128"], n_samples=8, repo=cmd[cmd.index("--repo") + 1])
        (workdir / "result.json").write_text(json.dumps(doc))
        return "ok", 0, "measured"

    monkeypatch.setattr(LocalExecutor, "_run", paused_measurement)
    runner = JobRunner(first, _local_config())
    reports: list = []
    worker = threading.Thread(target=lambda: reports.append(runner.run_next()), daemon=True)
    worker.start()
    try:
        assert measuring.wait(60), "the first runner never started measuring"
        said: list[str] = []
        newcomer = JobRunner(second, _local_config(), echo=said.append)
        newcomer.start()  # `./dev up` in the other checkout: same user, same slot, another history
        assert folders[0].is_dir(), "the newcomer removed the live runner's work folder"
        assert not [line for line in said if "leftover" in line], said
    finally:
        go.set()
        worker.join(timeout=60)
    assert [(r.job_id, r.outcome) for r in reports] == [(job_id, "passed")], reports[0].log if reports else None
    assert not folders[0].exists()  # removed by its own runner when the run ended


def _dead_process() -> tuple[int, str]:
    """The pid and start time of a process that has ended."""
    proc = subprocess.Popen(["sleep", "60"])
    start = jobs.process_start(proc.pid)
    proc.kill()
    proc.wait()
    assert start is not None and jobs.process_start(proc.pid) is None
    return proc.pid, start


def test_a_runner_removes_only_what_its_own_dead_predecessors_left(tmp_path: Path) -> None:
    """Of the run folders in a work root, a starting runner removes those whose owner record names a runner of
    this host, history and slot that is gone (pid gone, or reused by another process); a live owner's, another
    host's, another history's or slot's, and a folder with no owner record stay."""
    work = tmp_path / "work"
    ex = LocalExecutor(gpu="gpu0", work_root=work, sandbox="none", history="h1")
    dead_pid, dead_start = _dead_process()
    me = owner_record("h1", "gpu0")

    def folder(history: str, slot: str, name: str, owner: dict | None) -> Path:
        path = work / history / slot / f"run-{name}"
        (path / "tree").mkdir(parents=True)
        if owner is not None:
            (path / "owner.json").write_text(json.dumps(owner))
        return path

    dead = {**me, "pid": dead_pid, "start": dead_start}
    gone = folder("h1", "gpu0", "dead", dead)
    reused = folder("h1", "gpu0", "reused", {**me, "start": str(int(me["start"]) + 1)})  # our pid, not us
    kept = [
        folder("h1", "gpu0", "live", me),
        folder("h1", "gpu0", "nobody", None),
        folder("h1", "gpu0", "elsewhere", {**dead, "host": "another-host"}),
        folder("h1", "gpu0", "mislabelled", {**dead, "history": "h2"}),
        folder("h2", "gpu0", "other-history", {**dead, "history": "h2"}),
        folder("h1", "gpu1", "other-slot", {**dead, "slot": "gpu1"}),
    ]
    assert sorted(ex.cleanup_stale()) == sorted([str(gone), str(reused)])
    assert not gone.exists() and not reused.exists()
    assert all(p.is_dir() for p in kept)
    assert ex.cleanup_stale() == []
    # the commit's Triton cache is keyed the same way
    assert ex.triton_cache("c" * 40) == work / "h1" / "gpu0" / "triton-cache" / ("c" * 20)


def test_the_runner_keys_its_work_folders_by_its_history(tmp_path: Path, monkeypatch) -> None:
    """The executor a runner chooses works in a folder of the runner's history (the spool's key) and slot."""
    monkeypatch.setenv("SOLCI_WORK", str(tmp_path / "work"))
    one = JobRunner(open_database(tmp_path / "a" / "history.duckdb"), _local_config()).executor
    two = JobRunner(open_database(tmp_path / "b" / "history.duckdb"), _local_config()).executor
    assert one.history == spool.history_key(open_database(tmp_path / "a" / "history.duckdb"))
    assert one.slot_root != two.slot_root and one.slot_root.parent.parent == two.slot_root.parent.parent
    assert one.slot_root == tmp_path / "work" / one.history / "gpu0"
