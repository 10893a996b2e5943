"""The worker loop: take queued commits one at a time (one job per GPU slot) and record their outcome.

For each job: claim it, measure the commit with an executor, ingest the result, judge it against its series
(``ci.judging.judge_run``: a run that moved at screening is re-measured here, interleaved with the commit
before it, before any verdict), finish the job with its outcome and log. Whatever happens to one job (a
broken commit, a crash of the measurement, an error of the runner itself) is recorded and the loop goes on
to the next. On start, jobs a killed runner of the same GPU slot left ``running`` are queued again and what
its executor left behind is removed, so a job interrupted half-way is retried and stored once.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.executors import Execution, Executor, MeasureOptions, choose_executor, clip_log
from ci.gitutil import GitError, checkout_source, commit_exists, first_parent_ancestry, is_url, mirror_of

if TYPE_CHECKING:
    from storage.jobs import Lease

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


@dataclass
class RunnerConfig:
    gpu: str = "gpu0"
    worker: str = field(default_factory=default_worker_name)
    executor: str | None = None  # auto | docker | local (None: $SOLCI_EXECUTOR or auto)
    executor_options: dict[str, Any] = field(default_factory=dict)
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    judge: dict[str, Any] = field(default_factory=dict)  # fields of ci.judge.JudgeConfig
    confirm: bool = True  # re-measure a run that moved, interleaved with its parent, before any verdict
    poll_interval: float = 5.0
    gpu_model: str | None = None  # the GPU model this runner measures on; None: detected (ci.fleet)
    # a lake: compact it every N jobs (0: never; `solci compact` by hand or from cron); $SOLCI_COMPACT_EVERY
    compact_every: int = field(default_factory=lambda: int(os.environ.get("SOLCI_COMPACT_EVERY") or 0))


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


def outcome_of(verdict: str, case_statuses: set[str]) -> str:
    """The job outcome of a verdict (a broken run: timed_out when only timeouts failed it, else crashed)."""
    if verdict == "broken":
        return "timed_out" if "timeout" in case_statuses and "error" not in case_statuses else "crashed"
    return _OUTCOME_BY_VERDICT.get(verdict, "error")


class Runner:
    """Processes the queue of one GPU slot. ``executor`` may be given (tests) or is chosen on first use."""

    def __init__(
        self,
        db: Any,
        config: RunnerConfig | None = None,
        *,
        executor: Executor | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.db = db
        self.config = config or RunnerConfig()
        self._executor = executor
        self.echo = echo or (lambda _msg: None)
        self._started = False
        self._lines: list[str] = []

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = choose_executor(self.config.executor, gpu=self.config.gpu, **self.config.executor_options)
        return self._executor

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> list[int]:
        """Store what the spool holds; queue again the jobs whose runner is gone (leases: a live runner's job on
        this slot is left alone, and so are its files); clean up after a dead runner."""
        from ci import fleet
        from storage.jobs import recover_stale, slot_owner

        if self.config.gpu_model is None:
            self.config.gpu_model = fleet.detect_gpu_model(self.config.gpu)
        fleet.flush_spool(self.db, self.echo)  # results an earlier attempt could not store
        requeued = recover_stale(self.db, gpu=self.config.gpu)  # only jobs whose owner is gone (leases)
        if requeued:
            self.echo(f"requeued job(s) {', '.join(map(str, requeued))} left running by a stopped runner")
        busy = slot_owner(self.db, self.config.gpu)
        if busy is not None:  # another live runner measures on this slot: wait for it, leave its files alone
            removed: list = []
            self.echo(f"{self.config.gpu} runs job {busy.id} for a live runner ({busy.lease_owner}); waiting for it")
        else:
            try:
                removed = self.executor.cleanup_stale()
            except Exception as exc:  # a cleanup problem must not stop the worker
                removed = []
                self.echo(f"cleanup after a stopped runner failed: {exc}")
        if removed:
            self.echo(f"removed {len(removed)} leftover(s) of a stopped runner")
        self._started = True
        return requeued

    def claim(self, job_id: int | None = None) -> Any:
        """Move the oldest queued job of this runner's GPU model (or, with ``job_id``, that job) to running on
        its slot, leased to this process: the one way a runner takes a job (``run_next``, and
        ``ci.common.wait_for_jobs`` for ``solci run`` / ``up`` / ``watch --once``). None when there is none
        queued (of its model), it is no longer queued, or the slot runs another live runner's job."""
        from storage.jobs import claim_next

        if not self._started:
            self.start()  # detects the GPU model: a claim never leaves the model to guess
        return claim_next(self.db, self.config.worker, self.config.gpu, job_id=job_id, gpu_model=self.config.gpu_model)

    def run_next(self) -> JobReport | None:
        """Claim the oldest queued job of this slot and process it; None when the queue is empty."""
        from ci.fleet import flush_spool

        if not self._started:
            self.start()
        flush_spool(self.db, self.echo)
        job = self.claim()
        return None if job is None else self.process(job)

    def run(
        self, *, once: bool = False, max_jobs: int | None = None, stop: threading.Event | None = None
    ) -> list[JobReport]:
        """Process jobs until the queue is empty (``once``), ``max_jobs`` are done, or ``stop`` is set. A queue
        that cannot be reached (locked, full, catalog unreachable) is tried again after ``poll_interval``."""
        from ci.fleet import Compaction
        from storage.db import StorageError

        if not self._started:
            self.start()
        reports: list[JobReport] = []
        stop = stop or threading.Event()
        compaction = Compaction(self.config.compact_every)
        while not stop.is_set() and (max_jobs is None or len(reports) < max_jobs):
            try:
                report = self.run_next()
            except StorageError as exc:
                if once:
                    raise
                self.echo(f"cannot reach the queue: {exc}")
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
    def process(self, job: Any) -> JobReport:
        """Measure, ingest, judge and finish one claimed job, holding its lease (a heartbeat thread) meanwhile.
        Never raises for a problem of the job."""
        from ci.fleet import hold

        with hold(self.db, job, echo=self.echo) as lease:
            return self._process(job, lease)

    def _process(self, job: Any, lease: Lease) -> JobReport:
        from storage.jobs import finish

        start = time.monotonic()
        self.echo(f"job {job.id}: measuring {job.commit[:12]} of {job.repo} ({job.branch or 'no branch'})")
        report = JobReport(job.id, job.repo, job.commit, job.branch, "error", "failed")
        lines: list[str] = []
        self._lines = lines
        try:
            stored = self._stored_run(job)
            source = self._source(job)
            if stored is not None:  # an earlier attempt stored its run, then its runner died: judge, not re-run
                lines.append(f"[solci] run {stored['run_id']} of an earlier attempt is stored; judging it")
                report.run_id, report.outcome, report.verdict, report.message = self._judge(
                    job, stored["run_id"], source, lines=lines
                )
            else:
                execution = self._execute(job, lines, source)
                lines.append(execution.log)
                report.outcome = execution.status
                if execution.status == "ok" and execution.doc is not None:
                    report.run_id, report.outcome, report.verdict, report.message = self._record(job, execution, source)
                    report.run_id = report.run_id or None
            report.status = "failed" if report.outcome in ("error", "infra_error") else "done"
        except Exception as exc:
            from storage.db import StorageError

            lines.append(f"[solci] runner error: {exc.__class__.__name__}: {exc}")
            lines.append(traceback.format_exc(limit=8))
            report.outcome = "infra_error" if isinstance(exc, (StorageError, OSError)) else "error"
            report.status = "failed"
        report.wall_s = time.monotonic() - start
        if report.message:
            lines.append(f"[solci] verdict: {report.verdict}: {report.message}")
        lines.append(f"[solci] outcome: {report.outcome} ({report.wall_s:.1f} s)")
        report.log = clip_log("\n".join(x for x in lines if x))
        lease.closing()  # recording the outcome ends the job: a heartbeat after it is no takeover
        if self._finish(finish, report, owner=lease.owner):
            self.echo(report.summary)
        return report

    def _source(self, job: Any) -> Path | None:
        """A local repository holding the job's commit (a mirror for a URL); None when there is none."""
        try:
            source = checkout_source(job.repo)
            if not commit_exists(source, job.commit) and is_url(job.repo):
                source = mirror_of(job.repo, fetch=True)
        except GitError:
            return None
        return Path(source) if commit_exists(source, job.commit) else None

    def _execute(self, job: Any, lines: list[str], source: Path | None) -> Execution:
        if source is None:
            return Execution("error", None, f"[solci] commit {job.commit} not found in {job.repo}")
        lines.append(f"[solci] worker {self.config.worker}, {self.config.gpu}, {self.executor.name} executor")
        options = replace(self.config.measure, progress=self._progress(job))
        return self.executor.execute(source, job.commit, branch=job.branch, repo=job.repo, options=options)

    def _progress(self, job: Any) -> Callable[[str], None]:
        """Where a measurement's progress lines go (``MeasureOptions.progress``): the engineer's terminal."""
        return lambda line: self.echo(f"job {job.id}:   {line}")

    def expected_gpu_model(self) -> str | None:
        """The GPU model a result of this runner must say it ran on (a model the workload knows), else None."""
        from kernel.workload import GPU_PEAKS

        model = self.config.gpu_model
        return model if model in GPU_PEAKS else None

    def _record(self, job: Any, execution: Execution, source: Path | None) -> tuple[str, str, str, str]:
        from storage.spool import store

        doc = execution.doc
        assert doc is not None
        ancestry = first_parent_ancestry(source, job.commit) if source is not None else []
        kept = store(
            self.db,
            doc,
            job_id=job.id,
            parent=ancestry[1] if len(ancestry) > 1 else None,
            expect_gpu_model=self.expected_gpu_model(),
            expect_commit=job.commit,
        )
        if kept.rejected is not None:  # nothing it says is believed: stored as a rejected run, with the reason
            self._lines.append(f"[solci] result rejected: {kept.rejected}")
            return "", "rejected", "rejected", f"the result document was rejected: {kept.rejected}"
        return self._judge(job, kept.run_id, source, ancestry)

    def _judge(
        self,
        job: Any,
        run_id: str,
        source: Path | None,
        ancestry: list[str] | None = None,
        lines: list[str] | None = None,
    ) -> tuple[str, str, str, str]:
        """Judge a stored run (confirming on the GPU when it moved); (run_id, outcome, verdict, message)."""
        from ci.judge import JudgeConfig
        from ci.judging import judge_run
        from storage.queries import run_cases

        if ancestry is None and source is not None:
            ancestry = first_parent_ancestry(source, job.commit)
        confirm = (
            self._confirmer(job, source, lines if lines is not None else self._lines)
            if (self.config.confirm and source is not None)
            else None
        )
        cfg = JudgeConfig(**self.config.judge)
        result = judge_run(self.db, run_id, ancestry=ancestry or None, confirm=confirm, cfg=cfg)
        if result.late:
            self._lines.append(f"[solci] {result.late}")
        if result.earlier:  # the change is the parent's (or older): make sure that commit is measured and judged
            from storage.jobs import enqueue

            parent_job, created = enqueue(self.db, job.repo, result.earlier, branch=job.branch, trigger="blame")
            self._lines.append(
                f"[solci] the change lies at {result.earlier[:12]} or before: "
                + (f"queued it (job {parent_job})" if created else f"its job {parent_job} judges it")
            )
        statuses = set(run_cases(self.db, run_id)["status"])
        return run_id, outcome_of(result.verdict, statuses), result.verdict, result.message

    def _confirmer(self, job: Any, source: Path, lines: list[str]) -> Callable[[str, str, list[str]], list]:
        """The confirmation of a moved run: interleaved runs of the parent (A) and the commit (B), each a
        fresh measurement of only the cases in question, until ``pairs`` pairs are free of throttling (two
        pairs more at most). Each run is stored (purpose confirm) under this job. A run that failed, whose
        document fails validation (stored as a rejected run) or whose suite did not pass stops the
        confirmation there: the runs so far decide, as for any confirmation cut short."""
        from ci.judge import JudgeConfig, clean_pairs, interleave, pair_up
        from ci.judging import figures_from_rows
        from storage.queries import run_figures

        cfg = JudgeConfig(**self.config.judge)

        def confirm(parent: str, commit: str, cases: list[str]) -> list[tuple[str, str]]:
            order = interleave(cfg.pairs + 2)
            options = replace(
                self.config.measure,
                cases=";".join(cases),
                extra_args=[a for a in self.config.measure.extra_args],
                progress=self._progress(job),
            )
            done: list[tuple[str, str]] = []
            figs: list[tuple[str, Any]] = []
            lines.append(
                f"[solci] confirming: {commit[:12]} (B) against {parent[:12]} (A), "
                f"{cfg.pairs} interleaved pairs, cases {', '.join(cases)}"
            )
            while len(done) < len(order):
                for label in order[len(done) : len(done) + 2]:
                    sha = parent if label == "A" else commit
                    self.echo(f"job {job.id}: confirmation run {len(done) + 1} ({label}: {sha[:12]})")
                    ex = self.executor.execute(source, sha, branch=job.branch, repo=job.repo, options=options)
                    run_id, why = self._store_confirmation(job, ex, sha)
                    if run_id is None:
                        lines.append(f"[solci] confirmation run of {sha[:12]} failed ({why}):")
                        lines.append(ex.log[-4000:])
                        return done
                    done.append((label, run_id))
                    figs.append((label, figures_from_rows(run_figures(self.db, run_id))[0]))
                if len(clean_pairs(pair_up(figs), cases)) >= cfg.pairs:
                    break
            return done

        return confirm

    def _store_confirmation(self, job: Any, ex: Execution, commit: str) -> tuple[str | None, str]:
        """Store one confirmation run: (its run_id, "") or (None, why it failed). Nothing of the document is
        read before validation; a document that fails it is stored as a rejected run (``storage.spool.store``),
        and a valid one whose suite did not pass is not stored (it is no re-measurement of the change)."""
        from storage.result import SchemaError, validate
        from storage.spool import store

        if ex.status != "ok" or ex.doc is None:
            return None, ex.status
        try:
            validate(ex.doc)
        except SchemaError:
            pass  # the store below keeps it as a rejected run, with the reason
        else:
            if ex.doc["suite"]["status"] != "pass":
                return None, f"suite {ex.doc['suite']['status']}"
        kept = store(
            self.db,
            ex.doc,
            job_id=job.id,
            purpose="confirm",
            expect_gpu_model=self.expected_gpu_model(),
            expect_commit=commit,
        )
        if kept.rejected is not None:
            return None, f"rejected: {kept.rejected[:300]}"
        return kept.run_id, ""

    def _stored_run(self, job: Any) -> dict | None:
        """The run an earlier attempt of this job stored (ingest links it to the job); None when there is
        none."""
        from storage.queries import run_info

        if not job.run_id or job.attempts <= 1:
            return None
        return run_info(self.db, job.run_id)

    def _finish(self, finish: Callable[..., None], report: JobReport, *, owner: str, attempts: int = 3) -> bool:
        """Record the job's outcome under its lease ``owner``; False when it could not be recorded (the report
        then says so): the lease was taken over, or storage kept failing (the job is then recovered once its
        heartbeat is older than the lease timeout, and measured again)."""
        from storage.jobs import LeaseLostError

        for attempt in range(attempts):
            try:
                finish(
                    self.db,
                    report.job_id,
                    status=report.status,
                    outcome=report.outcome,
                    log=report.log,
                    run_id=report.run_id,
                    owner=owner,
                )
                return True
            except LeaseLostError as exc:
                report.recorded, report.message = False, str(exc)
                self.echo(f"{exc} [this runner measured {report.outcome}]")
                return False
            except Exception as exc:  # e.g. the file stayed locked
                self.echo(f"job {report.job_id}: could not record its outcome ({exc})")
                if attempt + 1 < attempts:
                    time.sleep(2.0 * (attempt + 1))
        report.recorded = False
        report.message = f"its outcome ({report.outcome}) could not be recorded; the job is measured again"
        self.echo(
            f"job {report.job_id}: {report.commit[:12]} measured {report.outcome}, but the outcome was not recorded; "
            "the job goes back to the queue once its lease times out"
        )
        return False
