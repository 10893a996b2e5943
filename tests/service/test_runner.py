"""The runner: outcomes, judging, going on after failures, recovery after a kill.

Fast tests use a fake executor (fabricated result documents). The slow ones build a real repository from this
project with a neutral, a slow (kernel launched twice), a wrong (grad_weight x 1.5) and an unimportable
commit, and run ``solci run`` / ``solci worker`` (local executor, Triton's interpreter, case 1,7) on a real
DuckDB file.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import ci.cli.commands
from ci.cli.common import wait_for_jobs
from ci.cli.main import main
from ci.harness.args import dispatch
from ci.service.executors.base import Execution, MeasureOptions, Progress
from ci.service.executors.docker import harness_files, harness_tag
from ci.service.executors.local import LocalExecutor
from ci.service.runner import (
    EXIT_BROKEN,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REGRESSED,
    JobRunner,
    JobRunnerConfig,
    exit_code_for,
    outcome_of,
)
from storage import jobs, queries
from storage.db import Database, DatabaseLockedError, open_database
from storage.ingest import ingest_result
from storage.jobs import claim_next, enqueue, get_job, list_jobs
from tests.support import PROJECT
from tests.support.factories import make_result
from tests.support.fakes import FakeExecutor
from tests.support.repo_factory import BROKEN, SLOW, WRONG, git, make_project_repo, small_repo

# Interpreter timings are real, and noisy when the machine is busy: six samples a run. CPU-interpreter runs
# are functional checks (never judged for speed), so a slow commit passes there.
MEASURE = ["--cases", "1,7", "--rounds", "1", "--warmup", "0", "--iters", "6"]


# ------------------------------------------------------------------------------------------------ fast
def queued_commits(db: Database, tmp_path: Path, n: int = 5) -> tuple[Any, list[str]]:
    """``n`` new commits of a small repository, queued on main oldest first: (the repository, their shas)."""
    repo = small_repo(tmp_path / "repo", n_commits=1)
    shas = [repo.commit_file("notes.txt", f"{i}\n", f"c{i}") for i in range(n)]
    for sha in shas:
        enqueue(db, str(repo.path), sha, branch="main")
    return repo, shas


def test_exit_codes() -> None:
    """0 ok, 3 a confirmed regression, 1 the commit is broken, 4 the infrastructure; the worst wins."""
    assert exit_code_for([]) == EXIT_OK
    for ok in ("passed", "improved", "not_reproduced", "ambiguous"):
        assert exit_code_for([ok]) == EXIT_OK
    assert exit_code_for(["passed", "regressed"]) == EXIT_REGRESSED
    assert exit_code_for(["regressed", "incorrect"]) == EXIT_BROKEN
    for outcome in ("build_failed", "crashed", "timed_out", "incorrect", "rejected", "quarantined"):
        assert exit_code_for([outcome]) == EXIT_BROKEN
    for outcome in ("infra_error", "error"):
        assert exit_code_for([outcome]) == EXIT_INFRA
    assert exit_code_for(["infra_error", "regressed"]) == EXIT_REGRESSED
    assert exit_code_for(["infra_error", "crashed"]) == EXIT_BROKEN


def test_every_command_entry_point_says_interrupted_and_exits_130(capsys) -> None:
    """solci and python -m ci.harness.measure share ci.harness.args.dispatch: the handler's code, or 130 on Ctrl-C."""
    import argparse

    assert dispatch(argparse.Namespace(func=lambda a: 4)) == 4
    assert dispatch(argparse.Namespace(func=lambda a: None)) == 0

    def interrupted(args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    assert dispatch(argparse.Namespace(func=interrupted)) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_outcome_of_verdicts() -> None:
    assert outcome_of("pass", {"pass"}) == "passed"
    assert outcome_of("baseline", {"pass"}) == "passed"
    assert outcome_of("functional", {"pass"}) == "passed"
    assert outcome_of("regressed", {"pass"}) == "regressed"
    assert outcome_of("incorrect", {"incorrect"}) == "incorrect"
    assert outcome_of("broken", {"error", "pass"}) == "crashed"
    assert outcome_of("broken", {"timeout"}) == "timed_out"
    assert outcome_of("quarantined", {"pass"}) == "quarantined"
    assert outcome_of("rejected", {"error"}) == "rejected"


def test_runner_records_every_outcome_and_goes_on(db: Database, tmp_path: Path) -> None:
    # the last commit keeps the slow level: judged against the new level, it passes
    plan_kinds = [
        "pass",
        "pass",
        "pass",
        "slow",
        "incorrect",
        "build_failed",
        "raise",
        "timed_out",
        "crashed",
        "error-case",
        "timeout-case",
        "slow",
    ]
    repo, shas = queued_commits(db, tmp_path, len(plan_kinds))
    plan = dict(zip(shas, plan_kinds, strict=True))
    enqueue(db, str(repo.path), "0" * 40, branch="main")  # a commit the repository does not have
    fake = FakeExecutor(plan)
    reports = JobRunner(db, JobRunnerConfig(worker="w1"), executor=fake).run(once=True)

    assert fake.cleaned == 1
    # in queue order, and on after each failure; the slow commit moved, so it was re-measured with its
    # parent, interleaved A B B A, before its verdict
    slow_at = plan_kinds.index("slow")
    confirmation = [shas[slow_at - 1], shas[slow_at], shas[slow_at], shas[slow_at - 1]]
    assert fake.calls == shas[: slow_at + 1] + confirmation + shas[slow_at + 1 :]
    got = [r.outcome for r in reports]
    assert got == [
        "passed",
        "passed",
        "passed",
        "regressed",
        "incorrect",
        "build_failed",
        "error",
        "timed_out",
        "crashed",
        "crashed",
        "timed_out",
        "passed",
        "error",
    ]
    jobs = {j.commit: j for j in list_jobs(db)}
    assert all(j.status in ("done", "failed") for j in jobs.values())
    assert jobs[shas[6]].status == "failed" and "the executor blew up" in jobs[shas[6]].log
    assert jobs["0" * 40].status == "failed" and "not found" in jobs["0" * 40].log
    assert jobs[shas[3]].run_id and jobs[shas[5]].run_id is None
    steps = queries.changes(db)
    assert list(steps["commit"]) == [shas[3]] and list(steps["status"]) == ["open"]
    assert queries.verdict(db, jobs[shas[3]].run_id)["verdict"] == "regressed"
    assert queries.verdict(db, jobs[shas[11]].run_id)["verdict"] == "pass", "the next commit is not blamed"
    assert exit_code_for(got) == EXIT_BROKEN


def test_a_fix_closes_the_open_step(db: Database, tmp_path: Path) -> None:
    kinds = ["pass", "pass", "pass", "slow", "slow", "pass"]
    _, shas = queued_commits(db, tmp_path, len(kinds))
    reports = JobRunner(
        db, JobRunnerConfig(worker="w"), executor=FakeExecutor(dict(zip(shas, kinds, strict=True)))
    ).run(once=True)
    assert [r.outcome for r in reports] == ["passed", "passed", "passed", "regressed", "passed", "improved"]
    steps = queries.changes(db).set_index("commit")
    assert steps.loc[shas[3], "status"] == "fixed" and steps.loc[shas[5], "status"] == "improvement"
    assert steps.loc[shas[3], "fixed_by"] == steps.loc[shas[5], "step_id"]
    assert "fixes the step" in reports[-1].message


def test_a_change_not_reproduced_in_the_confirmation_passes(db: Database, tmp_path: Path) -> None:
    """The commit's first run was slow, its re-measurements are not: not reproduced, exit 0."""
    _, shas = queued_commits(db, tmp_path)
    plan = dict.fromkeys(shas, "pass") | {shas[4]: "slow"}
    fake = FakeExecutor(plan)
    runner = JobRunner(db, JobRunnerConfig(worker="w"), executor=fake)
    reports = runner.run(once=True, max_jobs=4)
    fake.plan[shas[4]] = "pass"  # the slow process was a one-off: the re-runs are at the usual level
    fake.execute = _first_slow(fake.execute, shas[4])  # type: ignore[method-assign]
    reports += runner.run(once=True)
    assert reports[-1].outcome == "not_reproduced", reports[-1].log[-2000:]
    assert exit_code_for([r.outcome for r in reports]) == EXIT_OK
    steps = queries.changes(db)
    assert list(steps["status"]) == ["not_reproduced"]


def _first_slow(execute, commit: str):
    state = {"done": False}

    def wrapped(source, sha, **kw):
        ex = execute(source, sha, **kw)
        if sha == commit and not state["done"]:
            state["done"] = True
            doc = ex.doc
            return Execution(
                "ok",
                make_result(
                    commit=sha, cases=["B1_S256", "B4_S128"], scale=2.0, started_at=doc["started_at"], repo=doc["repo"]
                ),
                "slow",
                1.0,
            )
        return ex

    return wrapped


def test_no_confirm_decides_on_the_screen(db: Database, tmp_path: Path) -> None:
    _, shas = queued_commits(db, tmp_path, 4)
    plan = dict.fromkeys(shas, "pass") | {shas[3]: "slow"}
    fake = FakeExecutor(plan)
    reports = JobRunner(db, JobRunnerConfig(worker="w", confirm=False), executor=fake).run(once=True)
    assert fake.calls == shas
    assert reports[-1].outcome == "regressed" and "not re-measured" in reports[-1].message


def test_start_requeues_jobs_of_a_dead_runner(db: Database, tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=2)
    sha = repo.head()
    job_id, _ = enqueue(db, str(repo.path), sha)
    assert claim_next(db, "dead-worker", "gpu0").id == job_id
    other, _ = enqueue(db, str(repo.path), repo.commit_file("x.txt", "x", "x"))
    assert claim_next(db, "other-gpu-worker", "gpu1").id == other  # another slot's job: left alone
    fake = FakeExecutor({sha: "pass"})
    runner = JobRunner(db, JobRunnerConfig(worker="w2", gpu="gpu0"), executor=fake)
    assert runner.start() == [job_id]
    report = runner.run_next()
    assert report is not None and report.job_id == job_id and report.outcome == "passed"
    assert get_job(db, job_id).attempts == 2
    assert get_job(db, other).status == "running"


def test_a_run_stored_before_the_runner_died_is_judged_not_measured_again(db: Database, tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    job_id, _ = enqueue(db, str(repo.path), sha)
    claim_next(db, "dies-after-ingest", "gpu0")
    ingest_result(db, make_result(commit=sha, cases=["1,256"], status={"B1_S256": "incorrect"}), job_id=job_id)
    fake = FakeExecutor({})
    reports = JobRunner(db, JobRunnerConfig(worker="w3"), executor=fake).run(once=True)
    assert fake.calls == []
    assert [(r.job_id, r.outcome) for r in reports] == [(job_id, "incorrect")]
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    assert get_job(db, job_id).status == "done"


def test_claim_takes_a_given_job(db: Database, tmp_path: Path) -> None:
    repo = small_repo(tmp_path / "repo", n_commits=3)
    first, _ = enqueue(db, str(repo.path), repo.head())
    second, _ = enqueue(db, str(repo.path), repo.commit_file("y.txt", "y", "y"))
    runner = JobRunner(db, JobRunnerConfig(worker="w", gpu_model="H200"), executor=FakeExecutor({}))
    job = runner.claim(job_id=second)
    assert job is not None and job.id == second and job.status == "running"
    assert runner.claim(job_id=first) is None  # the slot is busy
    other = JobRunner(db, JobRunnerConfig(worker="w", gpu="gpu1", gpu_model="H200"), executor=FakeExecutor({}))
    assert other.claim(job_id=second) is None  # no longer queued


def test_solci_run_and_watch_claim_with_the_runners_gpu_model(db: Database, tmp_path: Path) -> None:
    """wait_for_jobs (solci run / up / watch --once) claims as the job runner does, with the runner's GPU
    model: on a lake a claim without it guesses the model (a fresh host: a NULL insert; else a job that
    never matches, and the command waits for ever). Here the model is written into the claimed job."""
    import threading

    repo = small_repo(tmp_path / "repo", n_commits=2)
    sha = repo.head()
    queued_for, _ = enqueue(db, str(repo.path), sha, branch="main", gpu_model="H200")
    unlabelled, _ = enqueue(db, str(repo.path), repo.commit_file("z.txt", "z", "z"), branch="main")
    fake = FakeExecutor(dict.fromkeys([sha, get_job(db, unlabelled).commit], "pass"))
    runner = JobRunner(db, JobRunnerConfig(worker="run", gpu_model="H200", confirm=False), executor=fake)
    runner.start()
    done = wait_for_jobs(db, [queued_for, unlabelled], runner, stop=threading.Event())
    assert {j: (job.status, job.outcome) for j, job in done.items()} == {
        queued_for: ("done", "passed"),
        unlabelled: ("done", "passed"),
    }
    assert get_job(db, queued_for).gpu_model == "H200"
    assert get_job(db, unlabelled).gpu_model == "H200", "claimed without the runner's GPU model"


def test_a_job_finished_after_a_stop_signal_counts_as_finished(db: Database, tmp_path: Path) -> None:
    """A stop signal during a job lets it finish (``stopping after the current job``); that job is then done,
    not "still queued for a worker": seen on the H200, where `solci watch --once` under `timeout` stored its
    verdict and still said the job was left unfinished (exit 130). The next queued job is what stays queued."""
    import threading

    from ci.cli.common import jobs_exit_code, unfinished

    repo = small_repo(tmp_path / "repo", n_commits=1)
    first_sha = repo.head()
    second_sha = repo.commit_file("z.txt", "z", "z")
    first, _ = enqueue(db, str(repo.path), first_sha, branch="main", gpu_model="H200")
    second, _ = enqueue(db, str(repo.path), second_sha, branch="main", gpu_model="H200")
    stop = threading.Event()

    class StoppedDuringTheJob(FakeExecutor):
        def execute(self, *args: Any, **kwargs: Any) -> Execution:
            stop.set()  # SIGTERM arrives while the job is measured
            return super().execute(*args, **kwargs)

    fake = StoppedDuringTheJob(dict.fromkeys([first_sha, second_sha], "pass"))
    runner = JobRunner(db, JobRunnerConfig(worker="run", gpu_model="H200", confirm=False), executor=fake)
    runner.start()
    done = wait_for_jobs(db, [first, second], runner, stop=stop)
    assert fake.calls == [first_sha], "the job after the stop signal was started"
    assert {j: (job.status, job.outcome) for j, job in done.items()} == {first: ("done", "passed")}
    assert unfinished([first, second], done) == [second]
    assert get_job(db, second).status == "queued"
    assert jobs_exit_code([first], done) == 0, "the finished job was called unfinished"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--iters", "0"], "argument --iters: must be >= 1, got 0"),
        (["run", "--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
        (["run", "--warmup", "-1"], "argument --warmup: must be >= 0, got -1"),
        (["run", "--timeout", "0"], "argument --timeout: must be > 0.0, got 0.0"),
        (["run", "--case-timeout", "nan"], "argument --case-timeout: 'nan' is not a finite number"),
        (["worker", "--once", "--iters", "two"], "argument --iters: 'two' is not an integer"),
        (["watch", ".", "--once", "--iters", "0"], "argument --iters: must be >= 1, got 0"),
        (["watch", ".", "--once", "--max-commits", "0"], "argument --max-commits: must be >= 1, got 0"),
        (["up", "--no-serve", "--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
    ],
)
def test_bad_runner_options_are_refused_never_blamed_on_the_commit(
    argv: list[str], message: str, tmp_path: Path, capsys
) -> None:
    """--iters 0 used to reach `solci measure` (exit 2), and the job was recorded crashed: exit 1, "the
    commit is broken". Now the command refuses it in one line (exit 2) before anything is queued."""
    path = tmp_path / "history.duckdb"
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--db", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not path.exists(), "nothing is queued"


def test_a_stop_signal_during_watch_once_exits_130_not_0(tmp_path: Path, monkeypatch, capsys) -> None:
    """SIGTERM while `solci watch --once` measures the first of three new commits: that job finishes, the
    other two stay queued, and the exit code says the run was cut short (130), as `solci run` and `solci up`
    do, instead of 0 over the one finished job."""
    repo = small_repo(tmp_path / "repo", n_commits=3)
    path = tmp_path / "history.duckdb"
    fake = FakeExecutor(dict.fromkeys(git(repo.path, "rev-list", "HEAD").split(), "pass"))
    execute = fake.execute

    def execute_then_sigterm(source, commit, **kw):
        if not fake.calls:
            os.kill(os.getpid(), signal.SIGTERM)  # what `docker stop` / systemd sends
        return execute(source, commit, **kw)

    fake.execute = execute_then_sigterm  # type: ignore[method-assign]
    monkeypatch.setattr(
        ci.cli.commands,
        "JobRunner",
        lambda db, config, echo: JobRunner(db, replace(config, gpu_model="H200"), executor=fake, echo=echo),
    )
    old = signal.getsignal(signal.SIGTERM)
    try:
        code = main(["watch", str(repo.path), "--once", "--backfill", "3", "--no-confirm", "--db", str(path)])
    finally:
        signal.signal(signal.SIGTERM, old)
    err = capsys.readouterr().err
    assert code == 130, err
    assert "got SIGTERM: stopping after the current job" in err and "still queued" in err
    assert len(fake.calls) == 1
    jobs = list_jobs(open_database(path))
    assert sorted(j.status for j in jobs) == ["done", "queued", "queued"]


def test_measurement_and_confirmation_runs_show_their_progress(db: Database, tmp_path: Path) -> None:
    """One progress line format (JobRunner._progress) for the measurement and each confirmation run."""
    _, shas = queued_commits(db, tmp_path)

    class Chatty(FakeExecutor):
        def execute(self, source, commit, *, branch, repo, options):
            options.progress(f"case of {commit[:7]} {'confirm' if options.cases else 'measure'}")
            return super().execute(source, commit, branch=branch, repo=repo, options=options)

    said: list[str] = []
    plan = dict.fromkeys(shas, "pass") | {shas[4]: "slow"}
    reports = JobRunner(db, JobRunnerConfig(worker="w"), executor=Chatty(plan), echo=said.append).run(once=True)
    last = reports[-1].job_id
    assert f"job {last}:   case of {shas[4][:7]} measure" in said
    assert (
        f"job {last}:   case of {shas[3][:7]} confirm" in said
        and f"job {last}:   case of {shas[4][:7]} confirm" in said
    )


def test_a_job_the_runner_finished_itself_is_never_reported_as_a_lost_lease(
    db: Database, tmp_path: Path, monkeypatch
) -> None:
    """Seen on the H200 (docs/h200/e2e_verdicts_run_b.log, 2026-12-01): the lease's heartbeat fired between the runner
    recording the job's outcome and releasing the lease, found the job no longer running, and said "lease lost
    (another runner took the job over)" with no other runner anywhere. Here every beat can land in that window."""
    monkeypatch.setenv(jobs.HEARTBEAT_ENV, "0.02")
    _, shas = queued_commits(db, tmp_path, n=2)
    real_finish = jobs.finish

    def finish_then_linger(*args, **kwargs):  # the summary and the release come after finish: make that slow
        real_finish(*args, **kwargs)
        time.sleep(0.3)

    monkeypatch.setattr(jobs, "finish", finish_then_linger)
    said: list[str] = []
    reports = JobRunner(
        db, JobRunnerConfig(worker="w"), executor=FakeExecutor(dict.fromkeys(shas, "pass")), echo=said.append
    )
    done = reports.run(once=True)
    assert [r.outcome for r in done] == ["passed", "passed"], [r.log for r in done]
    assert not [line for line in said if "lease lost" in line], said
    assert [get_job(db, r.job_id).status for r in done] == ["done", "done"]


def test_a_lease_taken_over_by_another_runner_is_still_reported(db: Database, tmp_path: Path, monkeypatch) -> None:
    """The other side of the test above: while the job runs, another owner taking it over is said."""
    monkeypatch.setenv(jobs.HEARTBEAT_ENV, "0.02")
    _, shas = queued_commits(db, tmp_path, n=1)

    class Usurped(FakeExecutor):
        def execute(self, source, commit, *, branch, repo, options):
            with db.transaction() as conn:
                conn.execute("UPDATE jobs SET lease_owner = 'other:1:1' WHERE status = 'running'")
            time.sleep(0.3)
            return super().execute(source, commit, branch=branch, repo=repo, options=options)

    said: list[str] = []
    done = JobRunner(
        db, JobRunnerConfig(worker="w"), executor=Usurped(dict.fromkeys(shas, "pass")), echo=said.append
    ).run(once=True)
    assert [line for line in said if "lease lost (another runner took the job over)" in line], said
    # ... and the runner that lost it never overwrites the job the other runner now holds (audit, stop 16)
    job = get_job(db, done[0].job_id)
    assert (job.status, job.lease_owner, job.outcome) == ("running", "other:1:1", None)
    assert not done[0].recorded and done[0].exit_outcome == "infra_error"
    assert [line for line in said if "its outcome was not recorded" in line and "other:1:1" in line], said


def test_a_job_whose_outcome_could_not_be_recorded_is_measured_again_by_the_same_runner(
    db: Database, tmp_path: Path, monkeypatch
) -> None:
    """Audit (stop 16): when recording the outcome kept failing (the file locked for long, the disk full), the job
    stayed 'running' under this very process and no claim of this process ever took it back: the runner's slot
    was busy until a restart, and every later commit waited. Now the job goes back to the queue once its
    heartbeat is older than the lease timeout, and the same runner measures it again."""
    monkeypatch.setenv(jobs.LEASE_TIMEOUT_ENV, "1")
    monkeypatch.setenv(jobs.HEARTBEAT_ENV, "0.2")
    monkeypatch.setenv("SOLCI_STORE_PATIENCE", "0.2")  # the lock outlasts the runner's patience
    _, shas = queued_commits(db, tmp_path, n=1)
    real_finish, failing = jobs.finish, [True]

    def flaky_finish(*args, **kwargs):
        if failing[0]:
            raise DatabaseLockedError("another process held the file for the whole lock timeout")
        return real_finish(*args, **kwargs)

    monkeypatch.setattr(jobs, "finish", flaky_finish)
    said: list[str] = []
    runner = JobRunner(
        db, JobRunnerConfig(worker="w"), executor=FakeExecutor(dict.fromkeys(shas, "pass")), echo=said.append
    )
    first = runner.run(once=True)
    assert [(r.outcome, r.recorded, r.exit_outcome) for r in first] == [("passed", False, "infra_error")]
    assert get_job(db, first[0].job_id).status == "running"
    failing[0] = False
    deadline = time.monotonic() + 30
    again: list = []
    while not again and time.monotonic() < deadline:  # the lease times out after 1 s
        time.sleep(0.3)
        again = runner.run(once=True)
    assert [(r.job_id, r.outcome, r.recorded) for r in again] == [(first[0].job_id, "passed", True)], said
    assert get_job(db, first[0].job_id).status == "done"


def test_measure_options_to_cli() -> None:
    opts = MeasureOptions(cases="1,7", rounds=1, warmup=0, iters=4, extra_args=["--no-cupti"])
    assert opts.cli_args() == ["--cases", "1,7", "--rounds", "1", "--warmup", "0", "--iters", "4", "--no-cupti"]


# ------------------------------------------------------------------------------------------------ slow
def solci(args: list[str], env: dict[str, str], *, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ci.cli", *args],
        env=env,
        cwd=env["SOLCI_TEST_CWD"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_progress_passes_the_harness_lines_as_they_come_and_nothing_else() -> None:
    """Chunks cut anywhere (mid-line, mid-character) give whole lines; what the commit's kernel printed, and
    terminal escapes in a look-alike line, never reach the engineer's terminal."""
    seen: list[str] = []
    follow = Progress(seen.append)
    text = (
        "solci measure: 2 cases on NVIDIA H200 (gpu), impl triton, protocol cupti [abc]\n"
        "kernel says: \x1b]0;owned\x07 rm -rf ~\n"
        "      B1_S7  pass       kernel 12.5 us  eager 20.1 us  cublas 13.0 us  score 0.41  (1.2 s)\n"
        "measure:  50%|#####     | 1/2 [00:01<00:01]\r    B2_S50  incorrect  kernel 13.0 us  µ\x1b[2J  (1.1 s)\n"
        "    B4_S128  pass  kernel 1.0 us (unfinished line"
    ).encode()
    for i in range(0, len(text), 7):  # 7-byte chunks split the line ends and the two-byte µ
        follow.feed(text[i : i + 7])
    assert seen == [
        "solci measure: 2 cases on NVIDIA H200 (gpu), impl triton, protocol cupti [abc]",
        "B1_S7 pass kernel 12.5 us eager 20.1 us cublas 13.0 us score 0.41 (1.2 s)",
        "B2_S50 incorrect kernel 13.0 us µ[2J (1.1 s)",
    ]


def cli_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "TRITON_INTERPRET"}
    env.update(
        SOLCI_DB=str(tmp / "history.duckdb"),
        SOLCI_WORK=str(tmp / "work"),
        SOLCI_EXECUTOR="local",
        SOLCI_CACHE=str(tmp / "cache"),
        SOLCI_TEST_CWD=str(tmp),
        PYTHONPATH=str(PROJECT),
    )
    return env


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Three neutral commits (queued, `solci worker --once`), a slow one (`solci run`), then a wrong, a broken
    and a neutral one found by `solci watch --once`. Linear history; each mutation starts from n3's tree."""
    tmp = tmp_path_factory.mktemp("runner")
    repo = make_project_repo(tmp / "repo")
    env = cli_env(tmp)
    db = open_database(tmp / "history.duckdb", lock_timeout=60)
    shas = {"n1": repo.head(), "n2": repo.neutral(2), "n3": repo.neutral(3)}
    for key in ("n1", "n2", "n3"):
        enqueue(db, str(repo.path), shas[key], branch="main")
    t = time.monotonic()
    first = solci(["worker", "--once", *MEASURE], env)
    seen = solci(["watch", str(repo.path), "--once", "--queue-only"], env)  # the watcher starts at n3
    base = shas["n3"]
    shas["slow"] = repo.mutate_from(base, SLOW, "slow: the kernel runs twice")
    slow = solci(["run", "--repo", str(repo.path), "--commit", shas["slow"], *MEASURE], env)
    shas["wrong"] = repo.mutate_from(base, WRONG, "wrong: grad_weight x 1.5")
    shas["broken"] = repo.mutate_from(base, BROKEN, "broken: syntax error")
    shas["n4"] = repo.mutate_from(base, "", "neutral again")
    last = solci(["watch", str(repo.path), "--once", *MEASURE], env)
    return {
        "db": db,
        "repo": repo,
        "env": env,
        "shas": shas,
        "first": first,
        "seen": seen,
        "slow": slow,
        "last": last,
        "wall_s": time.monotonic() - t,
    }


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_worker_and_run_exit_codes(history: dict) -> None:
    first, seen, slow, last = history["first"], history["seen"], history["slow"], history["last"]
    shas = history["shas"]
    assert first.returncode == EXIT_OK, first.stderr[-3000:]
    assert seen.returncode == EXIT_OK and "already queued or measured" in seen.stderr, seen.stderr
    # the interpreter's timings are a functional check: a slower kernel passes there (GPU runs judge speed)
    assert slow.returncode == EXIT_OK, slow.stdout[-3000:] + slow.stderr[-3000:]
    assert "PASSED" in slow.stdout and "not a speed figure" in slow.stdout
    # while it measured, the cases went by on the terminal (the hardware first), not a silent minute
    progress = [ln for ln in slow.stderr.splitlines() if ":   " in ln]
    assert re.search(r"job \d+:   solci measure: \d+ cases on cpu-interpreter", progress[0]), slow.stderr
    assert any(re.search(r"job \d+:   B1_S7 pass kernel \d", ln) for ln in progress), slow.stderr
    # watch --once: the four commits since n3, in order; the slow one was measured already (not again)
    assert last.returncode == EXIT_BROKEN, last.stderr[-3000:]
    lines = [ln.split()[:2] for ln in last.stdout.splitlines() if ln[:40] in shas.values()]
    expect = [
        [shas["slow"], "PASSED"],
        [shas["wrong"], "INCORRECT"],
        [shas["broken"], "CRASHED"],
        [shas["n4"], "PASSED"],
    ]
    assert sorted(lines) == sorted(expect), last.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_outcomes_per_commit(history: dict) -> None:
    db, shas = history["db"], history["shas"]
    jobs = {j.commit: j for j in list_jobs(db)}
    outcome = {key: jobs[sha].outcome for key, sha in shas.items()}
    assert outcome == {
        "n1": "passed",
        "n2": "passed",
        "n3": "passed",
        "slow": "passed",
        "wrong": "incorrect",
        "broken": "crashed",
        "n4": "passed",
    }, outcome
    assert all(j.status == "done" and j.attempts == 1 for j in jobs.values())
    assert "SyntaxError" in jobs[shas["broken"]].log
    assert "incorrect" in jobs[shas["wrong"]].log


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_interpreter_runs_open_no_step_and_every_commit_is_stored_once(history: dict) -> None:
    db, shas = history["db"], history["shas"]
    assert queries.changes(db).empty, "interpreter timings are never judged for speed"
    with db.read() as conn:
        runs = dict(conn.execute("""SELECT "commit", count(*) FROM runs GROUP BY 1""").fetchall())
        verdicts = dict(conn.execute("""SELECT "commit", verdict FROM verdicts""").fetchall())
    # one stored run per measured commit; the unimportable one is stored too, every case an error
    assert runs == {sha: 1 for sha in shas.values()}
    assert verdicts[shas["slow"]] == "functional" and verdicts[shas["wrong"]] == "incorrect"
    assert verdicts[shas["broken"]] == "broken"
    with db.read() as conn:
        broken = conn.execute(
            """SELECT DISTINCT x.status FROM runs r JOIN results x USING (run_id)
                                 WHERE r."commit" = ?""",
            [shas["broken"]],
        ).fetchall()
    assert broken == [("error",)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_commits_own_code_is_measured(history: dict) -> None:
    """The commit's kernel is what the trusted harness checked: the wrong commit (grad_weight x 1.5) fails on
    grad_weight alone in every case, while the neutral commit of the same tree passes them all. (Interpreter
    timings are functional, never compared: CI saw the slow commit's "about 2x" drown in a busy machine's noise,
    so no figure of them is asserted.)"""
    db, shas = history["db"], history["shas"]
    with db.read() as conn:
        rows = conn.execute(
            """SELECT r."commit", x.status, coalesce(x.error, '') FROM runs r JOIN results x USING (run_id)
               WHERE r."commit" IN (?, ?)""",
            [shas["wrong"], shas["n4"]],
        ).fetchall()
    wrong = [(status, error) for commit, status, error in rows if commit == shas["wrong"]]
    neutral = [status for commit, status, _ in rows if commit == shas["n4"]]
    assert wrong and all(status == "incorrect" for status, _ in wrong), wrong
    assert all("grad_weight" in error and "grad_attn_output" not in error for _, error in wrong), wrong
    assert neutral and set(neutral) == {"pass"} and len(neutral) == len(wrong)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_killed_worker_job_is_retried_and_stored_once(history: dict, tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    db = open_database(tmp_path / "history.duckdb", lock_timeout=60)
    repo, sha = history["repo"], history["shas"]["n3"]
    job_id, _ = enqueue(db, str(repo.path), sha, branch="main")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ci.cli", "worker", "--interval", "0.5", *MEASURE],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    work = tmp_path / "work"
    try:
        deadline = time.monotonic() + 60
        pid_files: list[Path] = []
        while time.monotonic() < deadline and not pid_files:
            time.sleep(0.3)
            pid_files = list(work.glob("*/gpu0/run-*/pid"))  # <work>/<history>/<slot>/run-XXXX
        assert pid_files, "the worker never started a measurement"
        time.sleep(3.0)  # mid-measurement
        assert get_job(db, job_id).status == "running"
        measure_pid = int(pid_files[0].read_text())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 10  # the measurement dies with its runner
    while Path(f"/proc/{measure_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{measure_pid}").exists() or "zombie" in _proc_state(measure_pid)
    assert get_job(db, job_id).status == "running"  # left behind by the killed runner

    again = solci(["worker", "--once", *MEASURE], env)
    assert again.returncode == EXIT_OK, again.stderr[-3000:]
    assert "requeued job(s)" in again.stderr
    job = get_job(db, job_id)
    assert (job.status, job.outcome, job.attempts) == ("done", "passed", 2)
    with db.read() as conn:
        n_runs = conn.execute('SELECT count(*) FROM runs WHERE "commit" = ?', [sha]).fetchone()[0]
        n_jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    assert (n_runs, n_jobs) == (1, 1)
    assert not list(work.glob("*/gpu0/run-*")), "the killed run's work folder was not cleaned up"


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


@pytest.mark.timeout(120)
def test_local_executor_timeout_kills_and_cleans_up(tmp_path: Path) -> None:
    repo = make_project_repo(tmp_path / "repo")
    ex = LocalExecutor(gpu="gpu7", work_root=tmp_path / "work")
    opts = MeasureOptions(cases="1,7", rounds=1, warmup=0, iters=50, timeout=4)
    res = ex.execute(repo.path, repo.head(), branch="main", repo=str(repo.path), options=opts)
    assert res.status == "timed_out" and res.doc is None, res.log[-2000:]
    assert "killed after 4 s" in res.log  # its own limit ended it (a hang is the test's timeout)
    assert list((tmp_path / "work").glob("*/gpu7/triton-cache"))  # the commit's Triton cache stays, keyed too
    assert not list((tmp_path / "work").glob("*/gpu7/run-*"))  # work folder removed
    assert len(git(repo.path, "worktree", "list").splitlines()) == 1  # no worktree: the tree is an export


def test_a_document_that_fails_validation_is_a_rejected_run(db: Database, tmp_path: Path) -> None:
    """Nothing a measurement writes is believed without validation: a forged median makes the job rejected
    (exit 1) and a rejected_runs row, never figures."""
    repo = small_repo(tmp_path / "repo", n_commits=1)
    sha = repo.head()
    enqueue(db, str(repo.path), sha)

    class Forger(FakeExecutor):
        def execute(self, source, commit, **kw):
            ex = super().execute(source, commit, **kw)
            ex.doc["cases"][0]["median_us"] = 0.001  # not the median of its samples
            return ex

    report = JobRunner(db, JobRunnerConfig(worker="w"), executor=Forger({sha: "pass"})).run(once=True)[0]
    assert report.outcome == "rejected" and exit_code_for([report.outcome]) == EXIT_BROKEN
    with db.read() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        reason = conn.execute("SELECT reason FROM rejected_runs").fetchone()[0]
    assert "median_us" in reason
    assert get_job(db, report.job_id).status == "done"


def test_the_harness_image_tag_is_a_hash_of_every_file_it_copies(tmp_path: Path) -> None:
    """The Docker harness image used to be tagged with the timing files' hash alone: a change in any other
    harness file (the correctness loop, storage's validation) kept the stale image, and Docker measured with
    other code than the runner has. The tag now hashes every copied file and the base image."""
    root = tmp_path / "ci"
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("x = 1\n")
    (root / "sub" / "b.py").write_text("y = 2\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"junk")
    files = harness_files([root])
    assert sorted(files) == ["solci/ci/a.py", "solci/ci/sub/b.py"]
    tag = harness_tag(files, "sha256:base1")
    assert harness_tag(harness_files([root]), "sha256:base1") == tag  # the same files: the same image
    (root / "sub" / "b.py").write_text("y = 3\n")  # not a timing file: still a new image
    changed = harness_files([root])
    assert changed["solci/ci/sub/b.py"] == b"y = 3\n" and harness_tag(changed, "sha256:base1") != tag
    assert harness_tag(files, "sha256:base2") != tag  # a rebuilt dependency image too


def test_the_harness_entry_point_loads_no_runner(tmp_path: Path) -> None:
    """`python -m ci.harness.measure` (what runs inside the sandbox) must not load the runner, the judge, pandas or
    the executors (slower start, and more of the runner's code
    within reach of the commit's process)."""
    code = (
        "import sys, ci.harness.measure\n"
        "heavy = sorted(m for m in ('ci.service.runner', 'ci.verdict.rules', 'ci.verdict.apply', "
        "'ci.service.executors', 'ci.cli.common', 'pandas') if m in sys.modules)\n"
        "print(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.parametrize("forgery", ["no_suite", "suite_not_a_dict", "bad_run_id"])
def test_a_forged_confirmation_document_is_a_rejected_run_not_a_runner_crash(
    db: Database, tmp_path: Path, forgery: str
) -> None:
    """A commit measured in a confirmation run writes the document; it used to be read (``doc["suite"]``)
    before validation, so a forged one raised in the runner (KeyError / SchemaError: the job an infrastructure
    error, exit 4, and no verdict). Now it is validated first, stored as a rejected run, and the confirmation
    stops there: the job finishes with a verdict."""
    _, shas = queued_commits(db, tmp_path)

    class Forger(FakeExecutor):
        def execute(self, source, commit, *, branch, repo, options):
            ex = super().execute(source, commit, branch=branch, repo=repo, options=options)
            if options.cases and commit == shas[4] and ex.doc is not None:  # a confirmation run of the culprit
                doc = dict(ex.doc)
                if forgery == "no_suite":
                    del doc["suite"]
                elif forgery == "suite_not_a_dict":
                    doc["suite"] = "pass"
                else:
                    doc["run_id"] = "../../etc/passwd"
                return Execution("ok", doc, ex.log, ex.wall_s)
            return ex

    plan = dict.fromkeys(shas, "pass") | {shas[4]: "slow"}
    reports = JobRunner(db, JobRunnerConfig(worker="w"), executor=Forger(plan)).run(once=True)
    last = reports[-1]
    assert last.outcome != "error" and get_job(db, last.job_id).status == "done", last.log[-2000:]
    assert "[solci] confirmation run of" in last.log and "rejected" in last.log
    with db.read() as conn:
        n = conn.execute("SELECT count(*) FROM rejected_runs WHERE job_id = ?", [last.job_id]).fetchone()[0]
    assert n == 1


def test_a_result_document_of_another_commit_is_rejected_never_stored_for_it(db: Database, tmp_path: Path) -> None:
    """Audit (stop 16): nothing tied a result document to the job that produced it. A kernel that can write the
    document (the Docker executor's harness shares its container) could plant a run of its parent, or reuse an
    existing run's id so that its job was linked to, and judged on, another commit's run."""
    _, shas = queued_commits(db, tmp_path, n=3)

    class Forging(FakeExecutor):
        def execute(self, source, commit, *, branch, repo, options):
            execution = super().execute(source, commit, branch=branch, repo=repo, options=options)
            if commit == shas[1]:  # claims to be its parent, with a fast figure
                execution.doc = make_result(commit=shas[0], cases=list(self.cases), repo=repo, scale=0.5)
            if commit == shas[2]:  # reuses the run id of the first commit's stored run
                execution.doc["run_id"] = first_run_id[0]
            return execution

    first_run_id: list[str] = []
    runner = JobRunner(
        db, JobRunnerConfig(worker="w"), executor=Forging(dict.fromkeys(shas, "pass")), echo=lambda _m: None
    )
    first = runner.run(once=True, max_jobs=1)
    first_run_id.append(first[0].run_id)
    rest = runner.run(once=True)
    assert [r.outcome for r in first + rest] == ["passed", "rejected", "rejected"]
    assert "this runner measured" in rest[0].message and "already stored" in rest[1].message
    with db.read() as conn:
        stored = conn.execute('SELECT "commit", count(*) FROM runs GROUP BY 1').fetchall()
        linked = conn.execute("SELECT id, run_id FROM jobs ORDER BY id").fetchall()
    assert stored == [(shas[0], 1)]  # nothing planted for the parent
    assert [run_id for _id, run_id in linked] == [first_run_id[0], None, None]


def test_a_child_measured_before_its_culprit_passes_and_queues_the_culprit(db: Database, tmp_path: Path) -> None:
    """Audit (stop 16): the child of an unmeasured culprit (its job ran first: a retried job, another runner, a
    push queued out of order) was re-measured against the newest measured commit and blamed. Now it is re-measured
    against its git parent, passes when that measures like it, and the parent is queued (if it was not) to be
    judged: the one step lands on the culprit."""
    repo = small_repo(tmp_path / "repo", n_commits=1)
    shas = [repo.commit_file("notes.txt", f"{i}\n", f"c{i}") for i in range(6)]
    plan = dict(zip(shas, ["pass"] * 4 + ["slow", "slow"], strict=True))
    for sha in shas[:4] + shas[5:]:  # the culprit shas[4] is not queued
        enqueue(db, str(repo.path), sha, branch="main")
    fake = FakeExecutor(plan)
    said: list[str] = []
    first = JobRunner(db, JobRunnerConfig(worker="w"), executor=fake, echo=said.append).run(once=True)
    assert [r.commit for r in first] == [*shas[:4], shas[5], shas[4]]  # the culprit was queued, and measured
    assert [r.outcome for r in first] == ["passed"] * 4 + ["passed", "regressed"]
    assert "lies at" in first[4].log and shas[4][:12] in first[4].log
    steps = queries.changes(db)
    assert list(zip(steps["commit"], steps["status"], strict=True)) == [(shas[4], "open")]
    assert {j.commit: j.trigger for j in list_jobs(db)}[shas[4]] == "blame"
