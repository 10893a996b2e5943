"""Judging a stored run: read its series from storage, apply ``ci.verdict.rules``'s rules, store the judgement.

``judge_run(db, run_id, ancestry=..., confirm=...)`` is what the job runner calls after ingesting a run; it
returns a ``RunVerdict``:

1. a run of the CPU interpreter is a functional check: ``functional`` (or ``incorrect`` / ``broken``), never
   judged for speed; a run that failed a case is ``incorrect`` / ``broken``; a quarantined run (faster than
   its hardware's speed of light) is ``quarantined``;
2. otherwise the run is screened against its level (``ci.verdict.rules.Series.screen``); when it moved and
   ``confirm`` is given (``ci.verdict.confirm.Confirmation``: the job runner measures), the commit and its git
   first parent (``ancestry[1]``; the newest commit of its level without an ancestry) are re-measured,
   interleaved, and the pairs decide (``Series.decide``); without ``confirm`` the screen decides (and drift or
   clocks make the verdict ambiguous). A run of a commit that already has a confirmed step joins that step; a
   step that opens withdraws the same change's step wrongly blamed on a descendant
   (``storage.verdicts.record_judgement``);
   A pull request's run (``runs.base``: the merge-base it is judged against) is screened against that
   commit's level on main, confirmed against that commit, and stored in a series of its own: it fixes,
   withdraws and records nothing, and no late step is searched after it;
3. the run's level (its commits since the newest confirmed step, the run's own included) and, for a confirmed
   improvement, the step's paired estimate are offered to the project records (``record_figures``,
   ``storage.records``): only a judging whose verdict is in ``storage.records.RECORD_VERDICTS`` can move a
   record, and only beyond noise; every judging refreshes the series' current level against its records;
4. then the newest level is searched for a step screening missed (``Series.late_candidate``), confirmed the
   same way and stored on its own culprit (it never changes the current run's verdict); not after a run that
   passed because its unjudged parent measured like it (that parent gets the step when it is judged).

Everything judged is stored (``storage.verdicts``); the dashboard and ``solci flags`` only read it.
"""

from __future__ import annotations

import json
import math
import statistics
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from ci.verdict.rules import (
    CONTROL_IMPLS,
    SUITE,
    CaseConfirmation,
    CaseScreen,
    Change,
    ConfirmRuns,
    Decision,
    JudgeConfig,
    Noise,
    Point,
    RunFigures,
    Screen,
    Series,
    Step,
)
from problem.workload import Case, sol_score, t_sol_us
from storage import queries
from storage.db import Database, StorageError
from storage.records import RECORD_VERDICTS, Figure, improvement_figure, level_figure, store_series_records
from storage.result import OVER_BUDGET, UNREPLAYABLE
from storage.verdicts import Judgement, record_judgement, record_step

# confirm(parent commit, commit, cases) -> the runs it measured and stored, in order, as (label "A" | "B", run_id)
# (``ci.verdict.confirm.Confirmation``; a test may script one)
Confirm = Callable[[str, str, list[str]], list[tuple[str, str]]]
THROTTLE_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


@dataclass
class RunVerdict:
    """What judging a run gave: its verdict and message, the step it opened, a late step found meanwhile, and
    the statuses of its cases (what a broken run's job outcome depends on)."""

    run_id: str
    verdict: str
    message: str
    step_id: str | None = None
    late: str | None = None  # a line about a late step stored on an earlier commit
    earlier: str | None = None  # a pass because the change lies at this unjudged parent (or before): judge it
    case_statuses: frozenset[str] = frozenset()  # the statuses of the run's cases (pass, incorrect, error, ...)

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "verdict": self.verdict, "message": self.message, "step_id": self.step_id}


# ------------------------------------------------------------------------------------------------ reading
def _telemetry(text: Any) -> tuple[float | None, bool]:
    """(mean SM clock in MHz, throttled) from a results.telemetry JSON (NVML before/after the case)."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return None, False
    try:
        t = json.loads(text) if isinstance(text, str) else text
    except (TypeError, ValueError):
        return None, False
    clocks, throttled = [], False
    for key in ("before", "after"):
        s = (t or {}).get(key) or {}
        if isinstance(s.get("sm_clock_mhz"), (int, float)) and s["sm_clock_mhz"] > 0:
            clocks.append(float(s["sm_clock_mhz"]))
        throttled = throttled or bool(THROTTLE_REASONS & set(s.get("throttle") or []))
    return (sum(clocks) / len(clocks) if clocks else None), throttled


def _num(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def figures_from_rows(rows: pd.DataFrame) -> list[RunFigures]:
    """RunFigures per run of ``series_runs`` / ``run_figures`` rows, in the rows' order."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows.itertuples(index=False):
        d = out.setdefault(
            r.run_id,
            {
                "commit": r.commit,
                "purpose": r.purpose or "measure",
                "job": r.job_id,
                "kernel": {},
                "controls": {impl: {} for impl in CONTROL_IMPLS},
                "clock": {},
                "throttled": set(),
            },
        )
        k = _num(r.median_us)
        if k is not None:
            d["kernel"][r.case] = k
        for impl in CONTROL_IMPLS:
            v = _num(getattr(r, f"{impl}_us"))
            if v is not None:
                d["controls"][impl][r.case] = v
        clock, throttled = _telemetry(r.telemetry)
        if clock:
            d["clock"][r.case] = clock
        if throttled:
            d["throttled"].add(r.case)
    return [
        RunFigures(
            run_id,
            d["commit"],
            d["kernel"],
            d["controls"],
            d["clock"],
            frozenset(d["throttled"]),
            d["purpose"],
            None if pd.isna(d["job"]) else int(d["job"]),
        )
        for run_id, d in out.items()
    ]


def _steps(df: pd.DataFrame) -> list[Step]:
    steps = []
    for s in df.itertuples(index=False):
        cases = {}
        before, after = {}, {}
        for c in s.cases if isinstance(s.cases, (list, tuple, np.ndarray)) else []:
            cases[c["case"]] = Change(c["change"] or 0.0, c["lo"] or 0.0, c["hi"] or 0.0)
            if c.get("before_us"):
                before[c["case"]] = math.log(c["before_us"])
            if c.get("after_us"):
                after[c["case"]] = math.log(c["after_us"])
        suite = None
        if _num(s.suite_change) is not None:
            suite = Change(s.suite_change, _num(s.suite_lo) or 0.0, _num(s.suite_hi) or 0.0)
        steps.append(
            Step(
                s.step_id,
                s.commit,
                s.parent_commit,
                s.status,
                s.direction,
                cases,
                suite,
                s.detected_by,
                before,
                after,
                s.fixed_by,
            )
        )
    return steps


def load_series(
    db: Database, info: dict, ancestry: Sequence[str] | None, cfg: JudgeConfig
) -> tuple[Series, RunFigures]:
    """The series of a stored run (its hardware label and protocol, along ``ancestry``) and the run itself; a
    pull request's run (``runs.base``) sees main's runs and steps and its own commit's against the same base."""
    rows = queries.series_runs(
        db,
        hardware=info["hardware_label"],
        protocol=info["protocol"],
        run_id=info["run_id"],
        ancestry=list(ancestry) if ancestry else None,
        max_runs=cfg.noise_points * 4,
        base=info.get("base"),
    )
    points: dict[str, Point] = {}
    for fig in figures_from_rows(rows):
        points.setdefault(fig.commit, Point(fig.commit)).runs.append(fig)
    order = list(points.values())
    own = figures_from_rows(queries.run_figures(db, info["run_id"]))[0]
    # the run's own commit goes last: its earlier runs (A/A re-runs) are part of the point it joins
    order.sort(key=lambda p: p.commit == own.commit)
    steps = _steps(
        queries.series_steps(
            db,
            hardware=info["hardware_label"],
            protocol=info["protocol"],
            commits=[p.commit for p in order] + [own.commit],
            base=info.get("base"),
            own=own.commit,
        )
    )
    return Series(order, steps, cfg), own


# ------------------------------------------------------------------------------------------------ storing
def _verdict_row(info: dict, verdict: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": info["run_id"],
        "commit": info["commit"],
        "hardware_label": info["hardware_label"],
        "protocol": info["protocol"],
        "branch": info.get("branch"),
        "verdict": verdict,
        "n_cases": info.get("n_cases"),
        "message": message,
        **extra,
    }


def _step_rows(step: Step, info: dict, run_id: str | None, message: str) -> tuple[dict, list[dict]]:
    row = {
        "step_id": step.step_id,
        "hardware_label": info["hardware_label"],
        "protocol": info["protocol"],
        "branch": info.get("branch"),
        "commit": step.commit,
        "parent_commit": step.parent,
        "run_id": run_id,
        "status": step.status,
        "direction": step.direction,
        "detected_by": step.detected_by,
        "n_cases": info.get("n_cases"),
        "cases_moved": len(step.cases),
        "suite_change": step.suite.change if step.suite else None,
        "suite_lo": step.suite.lo if step.suite else None,
        "suite_hi": step.suite.hi if step.suite else None,
        "fixed_by": step.fixed_by,
        "message": message,
    }
    cases = [
        {
            "case_name": c,
            "change": ch.change,
            "lo": ch.lo,
            "hi": ch.hi,
            "before_us": math.exp(step.before_log[c]) if c in step.before_log else None,
            "after_us": math.exp(step.after_log[c]) if c in step.after_log else None,
        }
        for c, ch in step.cases.items()
    ]
    return row, cases


def _case_rows(screen: Screen | None, decision: Decision | None, statuses: dict[str, str]) -> list[dict]:
    rows = []
    for case, status in statuses.items():
        r: dict[str, Any] = {"case_name": case, "status": status}
        s = screen.cases.get(case) if screen else None
        if s is not None:
            r.update(_screen_fields(s))
        r.update(_confirmed_fields(decision.confirmation.get(case) if decision else None))
        rows.append(r)
    if screen is not None and screen.suite is not None:
        r = {"case_name": SUITE, "status": "pass", **_screen_fields(screen.suite)}
        r.update(_confirmed_fields(decision.suite_confirmation if decision else None))
        rows.append(r)
    return rows


def _screen_fields(s: CaseScreen) -> dict:
    """A verdict row's screening columns from a case's (or the suite's) screen."""
    return {
        "change": math.expm1(s.change),
        "tested_change": math.expm1(s.tested_change),
        "threshold": math.expm1(s.threshold),
        "z": s.z,
        "p_value": s.p_value,
        "q_value": s.q_value,
        "sigma": s.sigma,
        "moved": s.moved,
        "throttled": s.throttled,
        "control_change": None if s.control_change is None else math.expm1(s.control_change),
        "clock_change": None if s.clock_change is None else math.expm1(s.clock_change),
    }


def _confirmed_fields(c: CaseConfirmation | None) -> dict:
    """A verdict row's confirmation columns from a case's (or the suite's) confirmation; none when unconfirmed."""
    if c is None:
        return {}
    return {
        "confirmed": c.confirmed,
        "confirmed_change": c.change.change,
        "confirmed_lo": c.change.lo,
        "confirmed_hi": c.change.hi,
    }


def _noise_rows(noise: Noise) -> list[dict]:
    return [
        {
            "case_name": c,
            "sigma_screen": s,
            "sigma_pair": noise.pair.get(c),
            "sigma_adjusted": noise.adjusted.get(c),
            "n_screen": noise.n_screen.get(c),
            "n_pair": noise.n_pair.get(c),
        }
        for c, s in noise.screen.items()
    ]


# ------------------------------------------------------------------------------------------------ judging
def _functional(info: dict, cases: pd.DataFrame) -> tuple[str, str]:
    bad = cases[cases["status"] != "pass"]
    errors = [str(e) for e in bad["error"].fillna("")]
    tampered = [e for e in errors if e.startswith("integrity:")]
    if tampered:  # the harness caught the kernel changing what it measures with: nothing of the run counts
        return "rejected", f"the kernel tampered with the measurement ({len(tampered)} case(s)): {tampered[0][:300]}"
    unreplayable = [e for e in errors if e.startswith(UNREPLAYABLE)]
    if unreplayable:  # what the kernel launches cannot be replayed by the harness: nothing of the run counts
        why = unreplayable[0][len(UNREPLAYABLE) :].strip()
        return "rejected", f"the kernel's launches cannot be replayed ({len(unreplayable)} case(s)): {why[:300]}"
    over = [e for e in errors if e.startswith(OVER_BUDGET)]
    if over:  # the commit wrote past what its sandbox may hold: refused, never merely broken
        why = over[0][len(OVER_BUDGET) :].strip()
        return "rejected", f"the kernel wrote past its write budget ({len(over)} case(s)): {why[:300]}"
    if bad.empty:
        if info["mode"] != "gpu":
            return "functional", f"{len(cases)} cases correct ({info['mode']}: a functional check, not a speed figure)"
        if not info.get("gpu_model"):  # no speed of light to check the figures against: never judged for speed
            return "functional", (
                f"{len(cases)} cases correct on {info.get('hardware_label') or 'a GPU'} of no known model (no speed "
                "of light to check its figures against: a functional check, not a speed figure)"
            )
        return "pass", ""
    incorrect = bad[bad["status"] == "incorrect"]
    first = bad.iloc[0]
    err = str(first["error"] or "").strip().splitlines()
    detail = f"{first['case']}: {err[0][:200] if err else first['status']}"
    if not incorrect.empty and len(incorrect) == len(bad):
        return "incorrect", f"{len(incorrect)} of {len(cases)} cases incorrect; first {detail}"
    return (
        "broken",
        f"{len(bad)} of {len(cases)} cases failed ({', '.join(sorted(set(bad['status'])))}); first {detail}",
    )


def new_step_id() -> str:
    return uuid.uuid4().hex[:16]


def judge_run(
    db: Database,
    run_id: str,
    *,
    ancestry: Sequence[str] | None = None,
    confirm: Confirm | None = None,
    cfg: JudgeConfig | None = None,
    late: bool = True,
) -> RunVerdict:
    """Judge one stored run and store the judgement (see the module docstring); returns its verdict.

    ``ancestry``: the run's commit and its first-parent ancestors, newest first (``git rev-list
    --first-parent``); without it the series is the same branch in time order."""
    cfg = cfg or JudgeConfig()
    info = queries.run_info(db, run_id)
    if info is None:
        raise StorageError(f"{db.path}: no run {run_id!r} to judge")
    cases = queries.run_cases(db, run_id)
    statuses = dict(zip(cases["case"], cases["status"], strict=True)) if not cases.empty else {}
    seen = frozenset(cases["status"]) if not cases.empty else frozenset()
    if info.get("quarantine"):
        msg = f"quarantined: {info['quarantine']}"
        record_judgement(db, Judgement(_verdict_row(info, "quarantined", msg), _case_rows(None, None, statuses)))
        return RunVerdict(run_id, "quarantined", msg, case_statuses=seen)
    verdict, msg = _functional(info, cases) if not cases.empty else ("broken", "no cases in the run")
    if verdict != "pass":
        record_judgement(db, Judgement(_verdict_row(info, verdict, msg), _case_rows(None, None, statuses)))
        return RunVerdict(run_id, verdict, msg, case_statuses=seen)

    base = info.get("base")
    chain = list(ancestry or [])
    if base is not None and chain[1:2] != [base]:
        raise StorageError(
            f"judging {run_id}: a pull request's run is judged along its merge-base {base[:12]}'s line, got "
            f"{chain[1][:12] if len(chain) > 1 else 'no ancestry'}"
        )
    series, own = load_series(db, info, ancestry, cfg)
    step_id = f"{run_id[:16]}-step"  # one per run: a run judged again (its runner died) replaces its step
    # its git first parent; for a pull request's run, its merge-base (the confirmation pairs the two)
    parent = chain[1] if len(chain) > 1 and chain[0] == info["commit"] else None

    def on_suspect(screen: Screen, pending: Step) -> None:
        against = (pending.parent or "?")[:12]
        row, _ = _step_rows(pending, info, run_id, f"moved at screening; confirming against {against}")
        verdict = _verdict_row(
            info, "suspect", f"moved at screening; re-measuring it against {against}", step_id=step_id
        )
        record_judgement(db, Judgement(verdict, _case_rows(screen, None, statuses), row))

    runs = _confirm_runs(db, confirm) if confirm is not None else None
    screen, decision, noise = series.judge(own, runs, step_id=step_id, on_suspect=on_suspect, parent=parent)
    if base is not None and decision.fixes:  # main's steps stay open until a change on main fixes them
        decision = replace(
            decision, fixes=[], message=decision.message.replace("; fixes the step(s)", "; would fix the step(s)")
        )
    judgement = _judgement(info, run_id, screen, decision, statuses, noise)
    out = RunVerdict(
        run_id,
        decision.verdict,
        decision.message,
        decision.step.step_id if decision.step else None,
        earlier=decision.earlier,
        case_statuses=seen,
    )
    if base is not None:  # a pull request's series never moves main's: no fixes, withdrawals, records or levels
        record_judgement(db, judgement)
        return out
    if judgement.step is not None and parent is not None:
        judgement.ancestors = chain[1:]
    record_judgement(db, judgement)
    candidates, levels = record_figures(series, own, decision, info.get("gpu_model"), run_id=run_id)
    store_series_records(
        db,
        hardware_label=info["hardware_label"],
        gpu_model=info.get("gpu_model"),
        protocol=info["protocol"],
        candidates=candidates if decision.verdict in RECORD_VERDICTS else [],
        levels=levels,
        k=cfg.k,
        min_effect=cfg.min_effect,
        observed_at=info.get("started_at"),
    )
    if late and runs is not None and decision.earlier is None:  # not while the change waits for its culprit
        out.late = _late_step(db, info, series, runs)
    return out


def _judgement(
    info: dict, run_id: str, screen: Screen, decision: Decision, statuses: dict[str, str], noise: Noise
) -> Judgement:
    moved = [c for c, s in screen.cases.items() if s.moved]
    # the worst case as the verdict states it: its confirmed change when the step holds cases, else the screen's
    confirmed = decision.step.cases if decision.step is not None and not decision.joined else {}
    if confirmed:
        worst_case, worst_change = max(((c, x.change) for c, x in confirmed.items()), key=lambda cx: abs(cx[1]))
    else:
        worst = max(screen.cases.values(), key=lambda s: abs(s.change), default=None)
        worst_case, worst_change = (worst.case, math.expm1(worst.change)) if worst else (None, None)
    extra: dict[str, Any] = {
        "cases_moved": len(decision.step.cases) if decision.step and decision.step.is_boundary else len(moved),
        "worst_case": worst_case,
        "worst_change": worst_change,
        "drift": screen.drift,
        "clock": screen.clock,
        "level_commits": len(screen.level_commits),
        "baseline_commit": screen.level_commits[-1] if screen.level_commits else None,
        "step_id": decision.step.step_id if decision.step else None,
    }
    if decision.step is not None and decision.step.suite is not None and not decision.joined:
        extra.update(
            suite_change=decision.step.suite.change, suite_lo=decision.step.suite.lo, suite_hi=decision.step.suite.hi
        )
    elif screen.suite is not None:
        ch = screen.suite.interval()  # 95 %: change ± 1.96 se (not ± the threshold it was tested against)
        extra.update(suite_change=ch.change, suite_lo=ch.lo, suite_hi=ch.hi)
    j = Judgement(
        _verdict_row(info, decision.verdict, decision.message, **extra),
        _case_rows(screen, decision, statuses),
        noise=_noise_rows(noise),
    )
    if decision.step is not None and not decision.joined:  # a joined step is the culprit's, stored already
        j.step, j.step_cases = _step_rows(decision.step, info, run_id, decision.message)
        j.fixes = list(decision.fixes)
    return j


# ------------------------------------------------------------------------------------------------ records
RecordFigures = list[tuple[str, int | None, Figure]]  # (case, n_cases for the suite else None, figure)


def _pct_sol(case: str, latency_us: float, eager_log: float | None, gpu_model: str | None) -> float | None:
    """The SOL score (in percent) of a case's figure against its level's eager baseline; None when undefined."""
    if eager_log is None:
        return None
    score = sol_score(latency_us, t_sol_us(Case.parse(case).m, gpu_model), math.exp(eager_log))
    return None if score is None else 100.0 * score


def record_figures(
    series: Series, own: RunFigures, decision: Decision, gpu_model: str | None, *, run_id: str
) -> tuple[RecordFigures, RecordFigures]:
    """(the candidates for the project records, the series' current level) after ``own`` was judged and joined
    ``series``: per case and for the suite (its log geometric mean over ``own``'s cases), the level ``own``
    joined (``storage.records.level_figure``: the median of its commits, with the noise judging used; its first
    commit named), and for a confirmed improvement of ``own``'s commit each case it moved (the suite too when
    the suite's change was confirmed) as its paired estimate (``improvement_figure``). The level is a candidate
    too: ``storage.records.beats`` lets it count from ``LEVEL_RECORD_RUNS`` commits on."""
    idx = series.index_of(own.commit)
    if idx is None:
        return [], []
    cfg = series.cfg
    start = series.level_start(idx + 1)
    level = [p for p in series.points[start : idx + 1] if p.runs]
    noise = series.noise(own.kernel)
    cases = [c for c in own.kernel if own.log(c) is not None]
    first = series.points[start].commit

    def eager(case: str) -> float | None:
        vals = [v for v in (p.control("eager", case) for p in level) if v is not None]
        return statistics.median(vals) if vals else None

    def suite_pct(scores: list[float | None]) -> float | None:
        return statistics.fmean(scores) if scores and all(x is not None for x in scores) else None  # type: ignore[arg-type]

    levels: RecordFigures = []
    for case in cases:
        fig = level_figure(
            [p.value(case) for p in level], noise.sigma(case, cfg.prior_sigma), commit=first, run_id=run_id
        )
        if fig is not None:
            fig = replace(fig, pct_sol=_pct_sol(case, fig.latency_us, eager(case), gpu_model))
            levels.append((case, None, fig))
    suite = level_figure(
        [p.suite_value(cases) for p in level], noise.sigma(SUITE, cfg.prior_sigma), commit=first, run_id=run_id
    )
    if suite is not None and cases:
        suite = replace(suite, pct_sol=suite_pct([f.pct_sol for _, _, f in levels]))
        levels.append((SUITE, len(cases), suite))
    improved: RecordFigures = []
    step = decision.step
    if step is not None and not decision.joined and step.status == "improvement" and step.detected_by == "confirmed":
        for case in step.cases:
            conf, before = decision.confirmation.get(case), step.before_log.get(case)
            if conf is None or before is None or conf.log_mean >= 0:  # a case the step moved, faster
                continue
            fig = improvement_figure(
                before, conf.log_mean, conf.se, commit=step.commit, run_id=run_id, step_id=step.step_id
            )
            improved.append((case, None, replace(fig, pct_sol=_pct_sol(case, fig.latency_us, eager(case), gpu_model))))
        sc = decision.suite_confirmation
        previous = series.level_points(step.commit)
        if sc is not None and sc.confirmed and sc.log_mean < 0 and step.parent in {p.commit for p in previous}:
            vals = [v for v in (p.suite_value(cases) for p in previous) if v is not None]
            if vals:
                fig = improvement_figure(
                    statistics.median(vals), sc.log_mean, sc.se, commit=step.commit, run_id=run_id, step_id=step.step_id
                )
                improved.append((SUITE, len(cases), fig))
    return improved + levels, levels


def _confirm_runs(db: Database, confirm: Confirm) -> ConfirmRuns:
    """``confirm`` (which measures and stores runs) as the judging reads it: the stored runs' figures."""

    def runs(parent: str, commit: str, cases: list[str]) -> list[tuple[str, RunFigures]]:
        out = []
        for label, rid in confirm(parent, commit, cases):
            figs = figures_from_rows(queries.run_figures(db, rid))
            if figs:
                out.append((label, figs[0]))
        return out

    return runs


def _late_step(db: Database, info: dict, series: Series, runs: ConfirmRuns) -> str | None:
    """A late step in the series the run just joined (``Series.late``), stored on the culprit's run."""
    d = series.late(runs, step_id=lambda culprit: f"late-{culprit[:12]}-{new_step_id()[:6]}")
    if d is None or d.step is None:
        return None
    idx = series.index_of(d.step.commit)
    culprit_run = next((r.run_id for r in series.points[idx or 0].runs if r.purpose == "measure"), None)
    row, step_cases = _step_rows(d.step, info, culprit_run, d.message)
    record_step(db, row, step_cases, d.fixes)
    return f"late step at {d.step.commit[:12]}: {d.message}"
