"""The worker loop: take queued commits one at a time (one job per GPU slot) and record their outcome.

For each job: claim it, measure the commit with an executor, ingest the result, judge it against the
history (``ci.regression.judge_run``), finish the job with its outcome and log. Whatever happens to one job
(a broken commit, a crash of the measurement, an error of the runner itself) is recorded and the loop goes on
to the next. On start, jobs a killed runner of the same GPU slot left ``running`` are queued again and what
its executor left behind is removed, so a job interrupted half-way is retried and stored once.

Outcomes: passed, regressed (passed but a regression flag), incorrect, build_failed, crashed, timed_out,
error (the runner could not process the job: unknown commit, storage error, ...).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.executors import Execution, Executor, MeasureOptions, choose_executor, clip_log
from ci.gitutil import GitError, checkout_source, commit_exists, is_url, mirror_of

# Exit codes of `solci run` / `solci watch --once` by outcome (worst wins).
EXIT_OK, EXIT_BROKEN, EXIT_USAGE, EXIT_REGRESSED = 0, 1, 2, 3
_EXIT_BY_OUTCOME = {
    "passed": EXIT_OK, "regressed": EXIT_REGRESSED, "incorrect": EXIT_BROKEN, "build_failed": EXIT_BROKEN,
    "crashed": EXIT_BROKEN, "timed_out": EXIT_BROKEN, "error": EXIT_BROKEN,
}  # fmt: skip
_SEVERITY = {EXIT_OK: 0, EXIT_REGRESSED: 1, EXIT_BROKEN: 2}


def exit_code_for(outcomes: list[str]) -> int:
    """0 when every outcome passed, 1 when one is broken/incorrect, else 3 when one regressed."""
    codes = [_EXIT_BY_OUTCOME.get(o, EXIT_BROKEN) for o in outcomes]
    return max(codes, key=lambda c: _SEVERITY[c], default=EXIT_OK)


def claim_job(db: Any, job_id: int, worker: str, gpu: str) -> Any:
    """Move one given queued job to running on ``gpu``; None when it is no longer queued or the slot is busy."""
    from storage.jobs import claim_next

    return claim_next(db, worker, gpu, job_id=job_id)


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class RunnerConfig:
    gpu: str = "gpu0"
    worker: str = field(default_factory=default_worker_name)
    executor: str | None = None  # auto | docker | local (None: $SOLCI_EXECUTOR or auto)
    executor_options: dict[str, Any] = field(default_factory=dict)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    judge: dict[str, Any] = field(default_factory=dict)  # keyword arguments of judge_run
    poll_interval: float = 5.0


@dataclass
class JobReport:
    job_id: int
    repo: str
    commit: str
    branch: str | None
    outcome: str
    status: str
    run_id: str | None = None
    flags: list[dict] = field(default_factory=list)
    log: str = ""
    wall_s: float = 0.0

    @property
    def summary(self) -> str:
        text = f"job {self.job_id}: {self.commit[:12]} {self.outcome}"
        notable = [f for f in self.flags if f.get("kind") in ("regression", "incorrect", "error", "new_record")]
        if notable:
            text += " (" + "; ".join(_flag_text(f) for f in notable[:4]) + ")"
        return text + f" [{self.wall_s:.0f} s]"


def _flag_text(flag: dict) -> str:
    msg = flag.get("message")
    if msg:
        return str(msg)
    return f"{flag.get('kind')} {flag.get('case_name') or flag.get('case') or ''}".strip()


def classify(doc: dict, flags: list[dict]) -> str:
    """The job outcome of a result document and the flags judging it stored."""
    status = doc["suite"]["status"]
    if status == "pass":
        return "regressed" if any(f.get("kind") == "regression" for f in flags) else "passed"
    if status == "incorrect":
        return "incorrect"
    case_statuses = {c["status"] for c in doc["cases"]}
    if "timeout" in case_statuses and "error" not in case_statuses:
        return "timed_out"
    return "crashed"


class Runner:
    """Processes the queue of one GPU slot. ``executor`` may be given (tests) or is chosen on first use."""

    def __init__(
        self, db: Any, config: RunnerConfig | None = None, *, executor: Executor | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:  # fmt: skip
        self.db = db
        self.config = config or RunnerConfig()
        self._executor = executor
        self.echo = echo or (lambda _msg: None)
        self._started = False

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = choose_executor(self.config.executor, gpu=self.config.gpu, **self.config.executor_options)
        return self._executor

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> list[int]:
        """Queue again the jobs a dead runner of this GPU slot left running; clean up after it."""
        from storage.jobs import recover_stale

        requeued = recover_stale(self.db, gpu=self.config.gpu)
        if requeued:
            self.echo(f"requeued job(s) {', '.join(map(str, requeued))} left running by a stopped runner")
        try:
            removed = self.executor.cleanup_stale()
        except Exception as exc:  # a cleanup problem must not stop the worker
            removed = []
            self.echo(f"cleanup after a stopped runner failed: {exc}")
        if removed:
            self.echo(f"removed {len(removed)} leftover(s) of a stopped runner")
        self._started = True
        return requeued

    def run_next(self) -> JobReport | None:
        """Claim the oldest queued job of this slot and process it; None when the queue is empty."""
        from storage.jobs import claim_next

        if not self._started:
            self.start()
        job = claim_next(self.db, self.config.worker, self.config.gpu)
        return None if job is None else self.process(job)

    def run(
        self, *, once: bool = False, max_jobs: int | None = None, stop: threading.Event | None = None
    ) -> list[JobReport]:
        """Process jobs until the queue is empty (``once``), ``max_jobs`` are done, or ``stop`` is set."""
        if not self._started:
            self.start()
        reports: list[JobReport] = []
        stop = stop or threading.Event()
        while not stop.is_set() and (max_jobs is None or len(reports) < max_jobs):
            report = self.run_next()
            if report is None:
                if once:
                    break
                stop.wait(self.config.poll_interval)
                continue
            reports.append(report)
        return reports

    # ------------------------------------------------------------------------------------------ one job
    def process(self, job: Any) -> JobReport:
        """Measure, ingest, judge and finish one claimed job. Never raises for a problem of the job."""
        from storage.jobs import finish

        start = time.monotonic()
        self.echo(f"job {job.id}: measuring {job.commit[:12]} of {job.repo} ({job.branch or 'no branch'})")
        report = JobReport(job.id, job.repo, job.commit, job.branch, "error", "failed")
        lines: list[str] = []
        try:
            stored = self._stored_run(job)
            if stored is not None:  # an earlier attempt stored its run, then its runner died: judge, not re-run
                lines.append(f"[solci] run {stored['run_id']} of an earlier attempt is stored; judging it")
                report.run_id, report.flags, report.outcome = self._judge(stored["run_id"], stored)
            else:
                execution = self._execute(job, lines)
                lines.append(execution.log)
                report.outcome = execution.status
                if execution.status == "ok" and execution.doc is not None:
                    report.run_id, report.flags, report.outcome = self._record(job, execution)
            report.status = "failed" if report.outcome == "error" else "done"
        except Exception as exc:
            lines.append(f"[solci] runner error: {exc.__class__.__name__}: {exc}")
            lines.append(traceback.format_exc(limit=8))
            report.outcome, report.status = "error", "failed"
        report.wall_s = time.monotonic() - start
        if report.flags:
            lines.append("[solci] flags: " + "; ".join(_flag_text(f) for f in report.flags))
        lines.append(f"[solci] outcome: {report.outcome} ({report.wall_s:.1f} s)")
        report.log = clip_log("\n".join(x for x in lines if x))
        self._finish(finish, report)
        self.echo(report.summary)
        return report

    def _execute(self, job: Any, lines: list[str]) -> Execution:
        try:
            source = checkout_source(job.repo)
            if not commit_exists(source, job.commit) and is_url(job.repo):
                source = mirror_of(job.repo, fetch=True)
        except GitError as exc:
            return Execution("error", None, f"[solci] {exc}")
        if not commit_exists(source, job.commit):
            return Execution("error", None, f"[solci] commit {job.commit} not found in {job.repo}")
        lines.append(f"[solci] worker {self.config.worker}, {self.config.gpu}, {self.executor.name} executor")
        return self.executor.execute(
            Path(source), job.commit, branch=job.branch, repo=job.repo, options=self.config.measure
        )

    def _record(self, job: Any, execution: Execution) -> tuple[str, list[dict], str]:
        from storage.ingest import ingest_result

        doc = execution.doc
        assert doc is not None
        ingest_result(self.db, doc, job_id=job.id)
        return self._judge(doc["run_id"], doc)

    def _judge(self, run_id: str, doc: dict) -> tuple[str, list[dict], str]:
        from ci.regression import judge_run

        flags = list(judge_run(self.db, run_id, **self.config.judge) or [])
        return run_id, flags, classify(doc, flags)

    def _stored_run(self, job: Any) -> dict | None:
        """The run an earlier attempt of this job stored (ingest links it to the job), as much of a result
        document as ``classify`` needs; None when there is none."""
        from storage.queries import run_cases, run_info

        if not job.run_id or job.attempts <= 1:
            return None
        info = run_info(self.db, job.run_id)
        if info is None:
            return None
        cases = run_cases(self.db, job.run_id)
        return {"run_id": job.run_id, "suite": {"status": info["status"]},
                "cases": [{"status": st} for st in cases["status"]]}  # fmt: skip

    def _finish(self, finish: Callable[..., None], report: JobReport, attempts: int = 3) -> None:
        for attempt in range(attempts):
            try:
                finish(self.db, report.job_id, status=report.status, outcome=report.outcome, log=report.log,
                       run_id=report.run_id)  # fmt: skip
                return
            except Exception as exc:  # e.g. the file stayed locked: the job is retried after a restart
                self.echo(f"job {report.job_id}: could not record its outcome ({exc})")
                time.sleep(2.0 * (attempt + 1))
