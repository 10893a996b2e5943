"""The job runner (``solci worker``): take queued commits one at a time (one job per GPU slot), record outcomes.

For each job: claim it, measure the commit with an executor, ingest the result, judge it against its series
(``ci.verdict.apply.judge_run``: a run that moved at screening is re-measured, interleaved with the commit
before it, before any verdict; ``ci.verdict.confirm`` decides those runs, this runner measures and stores each),
finish the job with its outcome and log. Whatever happens to one job (a broken commit, a crash of the
measurement, an error of the runner itself) is recorded and the runner goes on to the next. On start, jobs a
killed runner of the same GPU slot left ``running`` are queued again and what its executor left behind is
removed (only what a dead runner of this history and slot left: ``Executor.cleanup_stale``), so a job interrupted
half-way is retried and stored once.

A reader never makes the runner give up at once: while the history is locked by another process (a ``solci sql``
read, which its ``--timeout`` bounds), the runner keeps the result in its spool and stores it from there with
backoff, and waits out its judging and the record of the outcome the same way, for
up to ``JobRunnerConfig.store_patience_s`` seconds each (``$SOLCI_STORE_PATIENCE``, 300); past that the job ends
``infra_error`` with the result in the spool, and the next runner's look at the queue stores and judges it.

What the runner says goes through one channel (``RunnerLog``): each event to the job's stored log, the
terminal, or both.

Outcomes, and the exit code of ``solci run`` / ``solci watch --once`` (the worst over the jobs wins:
broken > regressed > infrastructure > ok):

- 0: passed (within noise, or the first run of its series), improved, not_reproduced (moved at screening,
  not in the re-measurement), ambiguous (a change the clocks or the in-run baselines explain as well);
- 3: regressed (a slowdown confirmed on the GPU: the only outcome that blames the commit for speed);
- 1: the commit is broken or incorrect: incorrect, build_failed, crashed, timed_out, rejected (its result
  document failed validation), quarantined (faster than the hardware's speed of light);
- 4: the infrastructure failed (infra_error: database locked, disk full, GPU lost; error: the runner could
  not process the job): never the commit's fault.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ci.harness.terminal import visible
from ci.service import fleet, notify
from ci.service.executors import choose_executor, executor_line
from ci.service.executors.base import Execution, Executor, MeasureOptions, clip_log
from ci.service.gitutil import GitError, checkout_source, commit_exists, first_parent_ancestry, is_url, mirror_of
from ci.verdict.apply import judge_run
from ci.verdict.confirm import Confirmation, MeasureCommit, Measured
from ci.verdict.rules import JudgeConfig
from problem.workload import GPU_PEAKS
from storage import jobs, queries, spool
from storage.db import StorageError
from storage.jobs import Job, Lease, LeaseLostError
from storage.result import SchemaError, validate

EXIT_OK, EXIT_BROKEN, EXIT_USAGE, EXIT_REGRESSED, EXIT_INFRA = 0, 1, 2, 3, 4
_EXIT_BY_OUTCOME = {
    "passed": EXIT_OK,
    "improved": EXIT_OK,
    "not_reproduced": EXIT_OK,
    "ambiguous": EXIT_OK,
    "regressed": EXIT_REGRESSED,
    "incorrect": EXIT_BROKEN,
    "build_failed": EXIT_BROKEN,
    "crashed": EXIT_BROKEN,
    "timed_out": EXIT_BROKEN,
    "rejected": EXIT_BROKEN,
    "quarantined": EXIT_BROKEN,
    "infra_error": EXIT_INFRA,
    "error": EXIT_INFRA,
}
_SEVERITY = {EXIT_OK: 0, EXIT_INFRA: 1, EXIT_REGRESSED: 2, EXIT_BROKEN: 3}
# A verdict of judging -> the job's outcome.
_OUTCOME_BY_VERDICT = {
    "baseline": "passed",
    "pass": "passed",
    "functional": "passed",
    "improved": "improved",
    "regressed": "regressed",
    "ambiguous": "ambiguous",
    "not_reproduced": "not_reproduced",
    "incorrect": "incorrect",
    "broken": "crashed",
    "quarantined": "quarantined",
    "rejected": "rejected",
    "suspect": "infra_error",
}


def exit_code_for(outcomes: list[str]) -> int:
    """The worst exit code over the outcomes (broken 1 > regressed 3 > infrastructure 4 > ok 0)."""
    codes = [_EXIT_BY_OUTCOME.get(o, EXIT_INFRA) for o in outcomes]
    return max(codes, key=lambda c: _SEVERITY[c], default=EXIT_OK)


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


STORE_PATIENCE_ENV = "SOLCI_STORE_PATIENCE"
DEFAULT_STORE_PATIENCE_S = 300.0


def store_patience_s() -> float:
    """How long a runner retries a write while another process holds the history (``spool.WAIT_ERRORS``) before the
    job is ``infra_error``: ``$SOLCI_STORE_PATIENCE`` seconds (0: no retry), default 300 (well past the 30 s
    ``solci sql --timeout`` a reader holds the file at most)."""
    text = os.environ.get(STORE_PATIENCE_ENV)
    if not text:
        return DEFAULT_STORE_PATIENCE_S
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"${STORE_PATIENCE_ENV}: expected seconds, got {text!r}") from None
    if not value >= 0:
        raise ValueError(f"${STORE_PATIENCE_ENV}: expected seconds (0 or more), got {text!r}")
    return value


def judged_ancestry(source: Path, job: Job) -> list[str]:
    """The line a job's commit is judged along, newest first: its first-parent ancestry; for a pull request's
    job (``job.base``, its merge-base with the base branch), the commit followed by the merge-base's line."""
    if job.base:
        return [job.commit, *first_parent_ancestry(source, job.base)]
    return first_parent_ancestry(source, job.commit)


@dataclass
class JobRunnerConfig:
    gpu: str = "gpu0"
    worker: str = field(default_factory=default_worker_name)
    executor: str | None = None  # auto | docker | local (None: $SOLCI_EXECUTOR or auto)
    executor_options: dict[str, Any] = field(default_factory=dict)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    judge: dict[str, Any] = field(default_factory=dict)  # fields of ci.verdict.rules.JudgeConfig
    confirm: bool = True  # re-measure a run that moved, interleaved with its parent, before any verdict
    poll_interval: float = 5.0
    gpu_model: str | None = None  # the GPU model this runner measures on; None: detected (ci.service.fleet)
    # a lake: compact it every N jobs (0: never; `solci compact` by hand or from cron); $SOLCI_COMPACT_EVERY
    compact_every: int = field(default_factory=lambda: int(os.environ.get("SOLCI_COMPACT_EVERY") or 0))
    # seconds a write is retried while another process holds the history (a reader), from the spool for a
    # result, before the job is infra_error; $SOLCI_STORE_PATIENCE
    store_patience_s: float = field(default_factory=store_patience_s)
    # where a step opened, fixed, or a broken commit is posted (ci.service.notify); $SOLCI_NOTIFY
    notify: str | None = field(default_factory=notify.notify_url)


@dataclass
class JobReport:
    job_id: int
    repo: str
    commit: str
    branch: str | None
    outcome: str
    status: str
    run_id: str | None = None
    verdict: str | None = None
    message: str = ""
    log: str = ""
    wall_s: float = 0.0
    recorded: bool = True  # False: the outcome could not be stored (lease taken over, storage failing)

    def take(self, judged: JudgedRun) -> None:
        """The run, outcome, verdict and message of the job's judged run."""
        self.run_id, self.outcome = judged.run_id, judged.outcome
        self.verdict, self.message = judged.verdict, judged.message

    @property
    def exit_outcome(self) -> str:
        """The outcome an exit code reflects: infra_error when this runner could not record it."""
        return self.outcome if self.recorded else "infra_error"

    @property
    def summary(self) -> str:
        text = f"job {self.job_id}: {self.commit[:12]} {self.outcome}"
        if self.message and self.outcome not in ("passed",):
            text += f" ({self.message[:300]})"
        return text + f" [{self.wall_s:.0f} s]"


def outcome_of(verdict: str, case_statuses: AbstractSet[str]) -> str:
    """The job outcome of a verdict (a broken run: timed_out when only timeouts failed it, else crashed)."""
    if verdict == "broken":
        return "timed_out" if "timeout" in case_statuses and "error" not in case_statuses else "crashed"
    return _OUTCOME_BY_VERDICT.get(verdict, "error")


@dataclass(frozen=True)
class JudgedRun:
    """What storing and judging a job's run gave: the stored run (None: none was stored), the job's outcome,
    the verdict and its message."""

    run_id: str | None
    outcome: str
    verdict: str
    message: str


Where = Literal["both", "log", "terminal"]


class RunnerLog:
    """The runner's one channel: an event goes to the job's stored log (``[solci] <event>``), to the terminal
    (``job N: <event>``), or both. ``detail`` (a traceback, a log tail) goes with the event into the stored log
    only, and so does ``output`` (a measurement's own log). Outside a job (``job_id`` None) there is no stored
    log: every event goes to the terminal, as it is."""

    def __init__(self, echo: Callable[[str], None], job_id: int | None = None) -> None:
        self.echo = echo
        self.job_id = job_id
        self.lines: list[str] = []  # the job's stored log

    def for_job(self, job_id: int) -> RunnerLog:
        """A fresh log of one job, saying on the same terminal."""
        return RunnerLog(self.echo, job_id)

    def __call__(self, event: str, *, to: Where = "both", detail: str = "") -> None:
        if self.job_id is None:
            self.echo(visible(event))
            return
        if to != "terminal":
            self.lines.append(f"[solci] {event}")
            if detail:
                self.lines.append(detail)
        if to != "log":
            self.echo(visible(f"job {self.job_id}: {event}"))

    def output(self, text: str) -> None:
        """A measurement's own log, into the job's stored log as it is."""
        self.lines.append(text)

    def text(self) -> str:
        """The job's stored log, clipped (``clip_log``)."""
        return clip_log("\n".join(x for x in self.lines if x))


class JobRunner:
    """Processes the queue of one GPU slot. ``executor`` may be given (tests) or is chosen on first use; ``echo``
    is the terminal (``RunnerLog`` says there)."""

    def __init__(
        self,
        db: Any,
        config: JobRunnerConfig | None = None,
        *,
        executor: Executor | None = None,
        echo: Callable[[str], None] | None = None,
        notifier: notify.Notifier | None = None,
    ) -> None:
        self.db = db
        self.config = config or JobRunnerConfig()
        self._executor = executor
        self.echo = echo or (lambda _msg: None)
        self.log = RunnerLog(self.echo)  # the runner's own events (not a job's): the terminal
        self._started = False
        if notifier is None and self.config.notify:
            notifier = notify.Notifier(self.config.notify, say=self.log)
        self.notifier = notifier  # None: no notifications

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            options = {"history": spool.history_key(self.db), **self.config.executor_options}
            self._executor = choose_executor(self.config.executor, gpu=self.config.gpu, **options)
        return self._executor

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> list[int]:
        """Store what the spool holds; queue again the jobs whose runner is gone (leases: a live runner's job on
        this slot is left alone, and so are its files); clean up after a dead runner."""
        if self.config.gpu_model is None:
            self.config.gpu_model = fleet.detect_gpu_model(self.config.gpu)
        fleet.flush_spool(self.db, self.echo)  # results an earlier attempt could not store
        requeued = jobs.recover_stale(self.db, gpu=self.config.gpu)  # only jobs whose owner is gone (leases)
        if requeued:
            self.log(f"requeued job(s) {', '.join(map(str, requeued))} left running by a stopped runner")
        busy = jobs.slot_owner(self.db, self.config.gpu)
        if busy is not None:  # another live runner measures on this slot: wait for it, leave its files alone
            removed: list = []
            self.log(f"{self.config.gpu} runs job {busy.id} for a live runner ({busy.lease_owner}); waiting for it")
        else:
            try:
                removed = self.executor.cleanup_stale()
            except Exception as exc:  # a cleanup problem must not stop the runner
                removed = []
                self.log(f"cleanup after a stopped runner failed: {exc}")
        if removed:
            self.log(f"removed {len(removed)} leftover(s) of a stopped runner of this history and slot")
        try:
            self.log(executor_line(self.executor))  # which executor measures, and why: on every start
        except Exception as exc:  # said here; each job then records it as its runner's error
            self.log(f"executor: unavailable ({exc})")
        self._started = True
        return requeued

    def claim(self, job_id: int | None = None) -> Job | None:
        """Move the oldest queued job of this runner's GPU model (or, with ``job_id``, that job) to running on
        its slot, leased to this process: the one way a runner takes a job (``run_next``, and
        ``ci.cli.common.wait_for_jobs`` for ``solci run`` / ``up`` / ``watch --once``). None when there is none
        queued (of its model), it is no longer queued, or the slot runs another live runner's job."""
        if not self._started:
            self.start()  # detects the GPU model: a claim never leaves the model to guess
        return jobs.claim_next(
            self.db, self.config.worker, self.config.gpu, job_id=job_id, gpu_model=self.config.gpu_model
        )

    def run_next(self) -> JobReport | None:
        """Claim the oldest queued job of this slot and process it; None when the queue is empty."""
        if not self._started:
            self.start()
        fleet.flush_spool(self.db, self.echo)
        job = self.claim()
        return None if job is None else self.process(job)

    def run(
        self, *, once: bool = False, max_jobs: int | None = None, stop: threading.Event | None = None
    ) -> list[JobReport]:
        """Process jobs until the queue is empty (``once``), ``max_jobs`` are done, or ``stop`` is set. A queue
        that cannot be reached (locked, full, catalog unreachable) is tried again after ``poll_interval``."""
        if not self._started:
            self.start()
        reports: list[JobReport] = []
        stop = stop or threading.Event()
        compaction = fleet.Compaction(self.config.compact_every)
        while not stop.is_set() and (max_jobs is None or len(reports) < max_jobs):
            try:
                report = self.run_next()
            except StorageError as exc:
                if once:
                    raise
                self.log(f"cannot reach the queue: {exc}")
                stop.wait(self.config.poll_interval)
                continue
            if report is not None:
                compaction.after_job(self.db, self.echo)
            if report is None:
                if once:
                    break
                stop.wait(self.config.poll_interval)
                continue
            reports.append(report)
        return reports

    # ------------------------------------------------------------------------------------------ one job
    def process(self, job: Job) -> JobReport:
        """Measure, ingest, judge and finish one claimed job, holding its lease (a heartbeat thread) meanwhile.
        Never raises for a problem of the job."""
        with fleet.hold(self.db, job, echo=self.echo) as lease:
            return self._process(job, lease)

    def _process(self, job: Job, lease: Lease) -> JobReport:
        start = time.monotonic()
        log = self.log.for_job(job.id)
        against = f", judged against its merge-base {job.base[:12]}" if job.base else ""
        log(f"measuring {job.commit[:12]} of {job.repo} ({job.branch or 'no branch'}{against})", to="terminal")
        report = JobReport(job.id, job.repo, job.commit, job.branch, "error", "failed")
        try:
            stored = self._stored_run(job)
            source = self._source(job)
            if stored is not None:  # an earlier attempt stored its run, then its runner died: judge, not re-run
                log(f"run {stored['run_id']} of an earlier attempt is stored; judging it", to="log")
                report.take(self._judge(job, stored["run_id"], source, log))
            else:
                execution = self._execute(job, log, source)
                log.output(execution.log)
                report.outcome = execution.status
                if execution.status == "ok" and execution.doc is not None:
                    report.take(self._record(job, execution, source, log))
            report.status = "failed" if report.outcome in ("error", "infra_error") else "done"
        except Exception as exc:
            log(f"runner error: {exc.__class__.__name__}: {exc}", to="log", detail=traceback.format_exc(limit=8))
            report.outcome = "infra_error" if isinstance(exc, (StorageError, OSError)) else "error"
            report.status = "failed"
        report.wall_s = time.monotonic() - start
        if report.message:
            log(f"verdict: {report.verdict}: {report.message}", to="log")
        log(f"outcome: {report.outcome} ({report.wall_s:.1f} s)", to="log")
        report.log = log.text()
        lease.closing()  # recording the outcome ends the job: a heartbeat after it is no takeover
        if self._finish(report, log, owner=lease.owner):
            self.log(report.summary)
        self._notify(report)
        return report

    def _notify(self, report: JobReport) -> None:
        """Post the job's notification in the background (``ci.service.notify``): a step opened or fixed, or a
        broken commit; never raises, never waits for the post."""
        if self.notifier is None:
            return
        try:
            s = notify.summary(self.db, report)
            if s is not None:
                self.notifier.send(notify.payload(s))
        except Exception as exc:  # a notification never fails a job
            self.log(f"notification not sent: {exc.__class__.__name__}: {exc}")

    def _source(self, job: Job) -> Path | None:
        """A local repository holding the job's commit (a mirror for a URL); None when there is none."""
        try:
            source = checkout_source(job.repo)
            if not commit_exists(source, job.commit) and is_url(job.repo):
                source = mirror_of(job.repo, fetch=True)
        except GitError:
            return None
        return Path(source) if commit_exists(source, job.commit) else None

    def _execute(self, job: Job, log: RunnerLog, source: Path | None) -> Execution:
        if source is None:
            return Execution("error", None, f"[solci] commit {job.commit} not found in {job.repo}")
        log(f"worker {self.config.worker}, {self.config.gpu}, {self.executor.name} executor", to="log")
        options = replace(self.config.measure, progress=self._progress(log))
        return self.executor.execute(source, job.commit, branch=job.branch, repo=job.repo, options=options)

    def _progress(self, log: RunnerLog) -> Callable[[str], None]:
        """Where a measurement's progress lines go (``MeasureOptions.progress``): the engineer's terminal."""
        return lambda line: log(f"  {line}", to="terminal")

    def expected_gpu_model(self) -> str | None:
        """The GPU model a result of this runner must say it ran on (a model the workload knows), else None."""
        model = self.config.gpu_model
        return model if model in GPU_PEAKS else None

    def _record(self, job: Job, execution: Execution, source: Path | None, log: RunnerLog) -> JudgedRun:
        """Store the job's run and judge it; a document that fails validation is a rejected run, not judged."""
        doc = execution.doc
        assert doc is not None
        ancestry = first_parent_ancestry(source, job.commit) if source is not None else []
        kept = self._store(
            log,
            doc,
            job_id=job.id,
            parent=ancestry[1] if len(ancestry) > 1 else None,
            expect_gpu_model=self.expected_gpu_model(),
            expect_commit=job.commit,
            base=job.base,
        )
        if kept.rejected is not None:  # nothing it says is believed: stored as a rejected run, with the reason
            log(f"result rejected: {kept.rejected}", to="log")
            return JudgedRun(None, "rejected", "rejected", f"the result document was rejected: {kept.rejected}")
        return self._judge(job, kept.run_id, source, log, None if job.base else ancestry)

    def _store(self, log: RunnerLog, doc: dict, **how: Any) -> spool.Stored:
        """``spool.store`` with this runner's patience: while another process holds the history the result
        stays in the spool and is stored from there with backoff (said once in the job's log); past the patience
        the error goes up (the job is infra_error) and the file stays for the next runner's flush."""
        patience = self.config.store_patience_s

        def waiting(exc: BaseException) -> None:
            log(f"{_refused(exc)}; result kept in the spool, retrying for up to {patience:g} s")

        try:
            return spool.store(self.db, doc, patience_s=patience, on_wait=waiting, **how)
        except spool.WAIT_ERRORS as exc:
            log(
                f"{_refused(exc)} for {patience:g} s; gave up: the result stays in the spool, and the next look at "
                "the queue stores and judges it",
                to="log",
            )
            raise

    def _patiently(self, what: str, action: Callable[[], Any], log: RunnerLog, *, to: Where = "both") -> Any:
        """``action()`` (judging, recording an outcome, queueing) with this runner's patience (``spool.patiently``):
        a history another process holds is waited out, said once."""
        patience = self.config.store_patience_s

        def waiting(exc: BaseException) -> None:
            log(f"{_refused(exc)} while {what}; retrying for up to {patience:g} s", to=to)

        return spool.patiently(action, patience_s=patience, on_wait=waiting)

    def _judge(
        self, job: Job, run_id: str, source: Path | None, log: RunnerLog, ancestry: list[str] | None = None
    ) -> JudgedRun:
        """Judge a stored run, confirming on the GPU when it moved (``ci.verdict.confirm``: this runner measures
        and stores each confirmation run); a change that lies at an unjudged parent queues that parent."""
        if ancestry is None and source is not None:
            ancestry = judged_ancestry(source, job)
        cfg = JudgeConfig(**self.config.judge)
        confirm = (
            Confirmation(self.db, self._confirmation_measure(job, source, log), cfg.pairs, say=log)
            if (self.config.confirm and source is not None)
            else None
        )
        # judging again after a refused write is safe: a run judged again replaces its judgement and its step
        result = self._patiently(
            "judging",
            lambda: judge_run(self.db, run_id, ancestry=ancestry or None, confirm=confirm, cfg=cfg),
            log,
        )
        if result.late:
            log(result.late, to="log")
        if result.earlier:  # the change is the parent's (or older): make sure that commit is measured and judged
            earlier = result.earlier
            branch = None if job.base else job.branch  # a pull request's merge-base is main's commit
            parent_job, created = self._patiently(
                "queueing the parent",
                lambda: jobs.enqueue(self.db, job.repo, earlier, branch=branch, trigger="blame"),
                log,
            )
            log(
                f"the change lies at {result.earlier[:12]} or before: "
                + (f"queued it (job {parent_job})" if created else f"its job {parent_job} judges it"),
                to="log",
            )
        return JudgedRun(run_id, outcome_of(result.verdict, result.case_statuses), result.verdict, result.message)

    def _confirmation_measure(self, job: Job, source: Path, log: RunnerLog) -> MeasureCommit:
        """How this runner measures one confirmation run (``ci.verdict.confirm.MeasureCommit``): a fresh
        measurement of only the cases in question, stored (purpose confirm) under this job."""

        def measure(commit: str, cases: list[str]) -> Measured:
            options = replace(
                self.config.measure,
                cases=";".join(cases),
                extra_args=list(self.config.measure.extra_args),
                progress=self._progress(log),
            )
            ex = self.executor.execute(source, commit, branch=job.branch, repo=job.repo, options=options)
            return self._store_confirmation(job, ex, commit, log)

        return measure

    def _store_confirmation(self, job: Job, ex: Execution, commit: str, log: RunnerLog) -> Measured:
        """Store one confirmation run: its run id, or why it failed. Nothing of the document is read before
        validation; a document that fails it is stored as a rejected run (``storage.spool.store``), and a valid
        one whose suite did not pass is not stored (it is no re-measurement of the change)."""
        if ex.status != "ok" or ex.doc is None:
            return Measured(None, ex.status, ex.log)
        try:
            validate(ex.doc)
        except SchemaError:
            pass  # the store below keeps it as a rejected run, with the reason
        else:
            if ex.doc["suite"]["status"] != "pass":
                return Measured(None, f"suite {ex.doc['suite']['status']}", ex.log)
        kept = self._store(
            log,
            ex.doc,
            job_id=job.id,
            purpose="confirm",
            expect_gpu_model=self.expected_gpu_model(),
            expect_commit=commit,
            base=job.base if commit != job.base else None,  # the merge-base's re-measurements are main's
        )
        if kept.rejected is not None:
            return Measured(None, f"rejected: {kept.rejected[:300]}", ex.log)
        return Measured(kept.run_id, "", ex.log)

    def _stored_run(self, job: Job) -> dict | None:
        """The run an earlier attempt of this job stored (ingest links it to the job); None when there is
        none."""
        if not job.run_id or job.attempts <= 1:
            return None
        return queries.run_info(self.db, job.run_id)

    def _finish(self, report: JobReport, log: RunnerLog, *, owner: str, attempts: int = 3) -> bool:
        """Record the job's outcome under its lease ``owner``; False when it could not be recorded (the report
        then says so): the lease was taken over, or storage kept failing (the job is then recovered once its
        heartbeat is older than the lease timeout, and measured again). A history another process holds is
        waited out for the runner's patience; another failure is tried ``attempts`` times."""

        def record() -> None:
            jobs.finish(  # looked up at each call: tests replace storage.jobs.finish
                self.db,
                report.job_id,
                status=report.status,
                outcome=report.outcome,
                log=report.log,
                run_id=report.run_id,
                owner=owner,
            )

        for attempt in range(attempts):
            try:
                self._patiently("recording its outcome", record, log, to="terminal")
                return True
            except LeaseLostError as exc:
                report.recorded, report.message = False, str(exc)
                self.log(f"{exc} [this runner measured {report.outcome}]")
                return False
            except spool.WAIT_ERRORS as exc:  # refused for the whole patience: no more attempts
                log(f"could not record its outcome ({exc})", to="terminal")
                break
            except Exception as exc:  # e.g. the disk full
                log(f"could not record its outcome ({exc})", to="terminal")
                if attempt + 1 < attempts:
                    time.sleep(2.0 * (attempt + 1))
        report.recorded = False
        report.message = f"its outcome ({report.outcome}) could not be recorded; the job is measured again"
        log(
            f"{report.commit[:12]} measured {report.outcome}, but the outcome was not recorded; "
            "the job goes back to the queue once its lease times out",
            to="terminal",
        )
        return False


def _refused(exc: BaseException) -> str:
    """What a write the history refused for now (``spool.WAIT_ERRORS``) says in a job's log."""
    return "history locked by another process"
