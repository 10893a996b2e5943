"""ci.verdict.rules: the rules of a verdict, on in-memory series (no storage, no GPU).

Each test names the rule (or the hole of issue 8) it holds: the level a commit changed as its baseline, one
step per change with every case it moved, the noise model, the thresholds and the FDR, the interleaved
confirmation, the clock and in-run baseline controls, the lifecycle (fixed), late steps."""

from __future__ import annotations

import importlib.util
import math
import random
import sys

import pytest

from ci.verdict.rules import (
    SUITE,
    JudgeConfig,
    Point,
    RunFigures,
    Series,
    Step,
    bh_qvalues,
    clean_pairs,
    estimate_noise,
    interleave,
    pair_up,
)
from problem.workload import CASES
from tests.support import PROJECT

NAMES = [c.name for c in CASES]
BASE = {n: 10.0 + c.m / 100.0 for n, c in zip(NAMES, CASES, strict=True)}


class Machine:
    """Run figures around BASE x level, with a run-level spread ``sigma`` (log; one for every case, or per case),
    seeded."""

    def __init__(self, sigma: float | dict[str, float] = 0.003, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.sigma = sigma
        self.n = 0

    def run(
        self,
        commit: str,
        level: dict[str, float] | float = 1.0,
        *,
        cases: list[str] | None = None,
        control: float = 1.0,
        clock: float = 1980.0,
        throttled: bool = False,
        purpose: str = "measure",
        job: int | None = None,
        control_impl: str = "cublas",
        controls: dict[str, dict[str, float] | float] | None = None,
    ) -> RunFigures:
        """``controls``: the in-run baselines timed (impl -> level, one for every case or per case); by default
        ``control_impl`` alone at ``control``."""
        self.n += 1
        names = cases or NAMES
        lv = level if isinstance(level, dict) else dict.fromkeys(names, level)
        sd = self.sigma if isinstance(self.sigma, dict) else dict.fromkeys(names, self.sigma)
        kernel = {c: BASE[c] * lv.get(c, 1.0) * math.exp(self.rng.gauss(0, sd[c])) for c in names}
        ctrl = {}
        for impl, at in (controls or {control_impl: control}).items():
            at = at if isinstance(at, dict) else dict.fromkeys(names, at)
            ctrl[impl] = {c: 0.9 * BASE[c] * at.get(c, 1.0) * math.exp(self.rng.gauss(0, sd[c])) for c in names}
        return RunFigures(
            f"r{self.n}",
            commit,
            kernel,
            ctrl,
            dict.fromkeys(names, clock),
            frozenset(names) if throttled else frozenset(),
            purpose,
            job,
        )


def history(m: Machine, n: int, level: float = 1.0, prefix: str = "h", cfg: JudgeConfig | None = None) -> Series:
    s = Series([], [], cfg)
    for i in range(n):
        s.add_run(m.run(f"{prefix}{i}", level))
    return s


def confirm_runs(m: Machine, parent: str, commit: str, lv_a, lv_b, cases=None, pairs=2, **kw):
    """Interleaved re-measurements of commit (B) against parent (A) in one job, labelled, in order."""
    job = m.n + 1000
    runs = []
    for label in interleave(pairs):
        c, lv = (parent, lv_a) if label == "A" else (commit, lv_b)
        runs.append((label, m.run(c, lv, cases=cases, purpose="confirm", job=job, **kw)))
    return runs


def confirm(m: Machine, series: Series, parent: str, commit: str, lv_a, lv_b, cases=None, pairs=2, **kw):
    return pair_up(confirm_runs(m, parent, commit, lv_a, lv_b, cases, pairs, **kw))


def judge(m: Machine, s: Series, run: RunFigures, lv_parent, lv_run, *, confirm_it=True, **kw):
    """What the runner does (Series.judge), the re-measurement on this machine."""

    def runs(parent: str, commit: str, cases: list[str]):
        return confirm_runs(m, parent, commit, lv_parent, lv_run, cases=cases, **kw)

    screen, d, _ = s.judge(run, runs if confirm_it else None, step_id=f"s-{run.commit}")
    return screen, d


# ------------------------------------------------------------------------------------------------ baseline
def test_first_run_of_a_series_is_the_baseline_and_a_quiet_run_passes():
    m = Machine()
    s = Series([], [])
    screen, d = judge(m, s, m.run("c0"), 1.0, 1.0)
    assert screen.baseline and d.verdict == "baseline" and d.step is None
    for i in range(1, 8):
        _, d = judge(m, s, m.run(f"c{i}"), 1.0, 1.0)
        assert d.verdict == "pass", d.message


def test_innocent_commit_after_a_real_slowdown_is_not_blamed_again():
    """Issue 8: the commit pushed right after a real 5 % slowdown was failed again (the pooled baseline of the
    last runs straddled the step). The baseline is the level since the last step, so it passes."""
    m = Machine()
    s = history(m, 8)
    _, d = judge(m, s, m.run("slow", 1.05), 1.0, 1.05)
    assert d.verdict == "regressed" and d.step is not None and d.step.status == "open"
    assert len(d.step.cases) == len(NAMES), "one step holds every case it moved"
    assert d.step.suite is not None and 0.035 < d.step.suite.change < 0.065
    assert d.step.suite.lo < 0.05 < d.step.suite.hi
    for i in range(4):
        screen, d2 = judge(m, s, m.run(f"after{i}", 1.05), 1.05, 1.05)
        assert d2.verdict == "pass", d2.message
        assert screen.level_commits[0] == "slow", "judged against the new level, which starts at the culprit"


def test_the_fix_is_one_suite_wide_recovery_and_closes_the_step():
    """Issue 8: the commit undoing a slowdown showed as one random single-case improvement. It is one step with
    all the cases, and the open step becomes fixed."""
    m = Machine()
    s = history(m, 8)
    _, slow = judge(m, s, m.run("slow", 1.05), 1.0, 1.05)
    for i in range(3):
        judge(m, s, m.run(f"mid{i}", 1.05), 1.05, 1.05)
    _, fix = judge(m, s, m.run("fix", 1.0), 1.05, 1.0)
    assert fix.verdict == "improved" and fix.step is not None
    assert len(fix.step.cases) == len(NAMES)
    assert fix.fixes == [slow.step.step_id]
    assert next(st for st in s.steps if st.step_id == slow.step.step_id).status == "fixed"


def test_a_single_case_slowdown_reports_that_case_only():
    """Issue 8: a single-case slowdown came with a stray "improvement" on an untouched case."""
    m = Machine()
    s = history(m, 8)
    level = dict.fromkeys(NAMES, 1.0) | {"B4_S128": 1.06}
    screen, d = judge(m, s, m.run("one", level), dict.fromkeys(NAMES, 1.0), level)
    assert screen.cases_to_confirm() == ["B4_S128"]
    assert d.verdict == "regressed" and list(d.step.cases) == ["B4_S128"]


def test_baseline_follows_the_ancestry_not_a_fixed_window():
    """A level is cut at every confirmed step; the level a commit is judged against starts at the newest one."""
    m = Machine()
    s = history(m, 6)
    s.steps.append(Step("x", "h3", "h2", "acknowledged", "slower"))
    assert [p.commit for p in s.level_points("new")] == ["h3", "h4", "h5"]
    s.steps.append(Step("y", "h5", "h4", "not_reproduced", "slower"))
    assert [p.commit for p in s.level_points("new")] == ["h3", "h4", "h5"], "unconfirmed steps are no cut"


# ------------------------------------------------------------------------------------------------ noise
def test_noise_model_recovers_the_between_run_spread_and_the_aa_spread():
    m = Machine(sigma=0.01, seed=3)
    s = history(m, 120)
    noise = estimate_noise(s.points, s.steps, NAMES, JudgeConfig())
    for c in NAMES:
        assert 0.007 < noise.screen[c] < 0.014, (c, noise.screen[c])
    for c in NAMES:
        assert 0.007 < noise.settled[c] < 0.014, (c, noise.settled[c])
    # no A/A runs yet: the pair spread is the settled one (one level: the spread between successive runs)
    assert noise.n_pair[NAMES[0]] == 0 and noise.pair[NAMES[0]] == noise.settled[NAMES[0]]
    # A/A: runs of one commit in one job (a confirmation's re-runs), with a smaller spread
    quiet = Machine(sigma=0.002, seed=4)
    for j in range(30):
        for _ in range(2):
            s.add_run(quiet.run(f"h{j}", 1.0, purpose="confirm", job=j))
    noise = estimate_noise(s.points, s.steps, NAMES, JudgeConfig())
    assert noise.n_pair[NAMES[0]] == 30
    assert noise.pair[NAMES[0]] < 0.004 < noise.screen[NAMES[0]]


def test_noise_prior_without_history_and_the_floor():
    cfg = JudgeConfig(prior_sigma=0.02, min_sigma=0.005)
    noise = estimate_noise([], [], NAMES, cfg)
    assert all(v == pytest.approx(0.02) for v in noise.screen.values())
    flat = [Point(f"c{i}", [RunFigures(f"r{i}", f"c{i}", dict.fromkeys(NAMES, 10.0))]) for i in range(50)]
    noise = estimate_noise(flat, [], NAMES, cfg)
    assert all(v >= 0.005 for v in noise.screen.values())


def test_noise_steps_are_not_noise():
    """Successive differences across a confirmed step are left out of the spread."""
    m = Machine(sigma=0.002, seed=5)
    s = history(m, 30)
    for i in range(30):
        s.add_run(m.run(f"g{i}", 1.3))
    with_step = Series(s.points, [Step("x", "g0", "h29", "open", "slower")])
    assert with_step.noise().screen[NAMES[0]] < 0.004


# ------------------------------------------------------------------------------------------------ thresholds
def test_change_below_the_minimum_effect_is_not_moved_however_significant():
    m = Machine(sigma=0.0005)
    s = history(m, 60, cfg=JudgeConfig(prior_sigma=0.0005))
    screen = s.screen(m.run("tiny", 1.009))
    assert screen.suite is not None and screen.suite.z > 5, "0.9 % is far beyond this machine's noise"
    assert not screen.moved, "but below the 1 % minimum effect"


def test_change_above_the_minimum_effect_but_within_k_sigma_is_not_moved():
    m = Machine(sigma=0.02, seed=11)
    s = history(m, 40)
    level = dict.fromkeys(NAMES, 1.0) | {"B1_S256": 1.03}
    screen = s.screen(m.run("noisy", level))
    case = screen.cases["B1_S256"]
    assert case.threshold > math.log1p(0.03), "the threshold is k standard errors of a 2 % spread"
    assert not case.moved, "3 % on a case whose runs spread by 2 % is noise"


def test_benjamini_hochberg_qvalues():
    q = bh_qvalues([0.01, 0.04, 0.03, 0.2])
    assert q == pytest.approx([0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.2])  # sorted: p * n / rank, then step-up
    assert bh_qvalues([0.5]) == [0.5]


def test_neutral_runs_rarely_move_over_sixteen_cases():
    """Each case's spread is the one measured on its series (the prior gives way at once), so a series of ten
    commits moves more often (its spreads stand on nine comparisons; the confirmation decides); from twenty on,
    rarely."""
    m = Machine(sigma=0.004, seed=21)
    s = history(m, 20)
    moved = sum(s.screen(m.run(f"n{i}")).moved for i in range(300))
    assert moved <= 6, f"{moved} of 300 neutral runs moved at screening"


# ------------------------------------------------------------------------------------------------ confirmation
def test_a_screened_change_that_the_pairs_do_not_reproduce_is_not_reproduced():
    m = Machine()
    s = history(m, 8)
    outlier = m.run("flaky", 1.06)  # one slow process; the commit itself is neutral
    screen, d = judge(m, s, outlier, 1.0, 1.0)
    assert screen.moved and d.verdict == "not_reproduced"
    assert d.step is not None and d.step.status == "not_reproduced" and not d.step.is_boundary
    _, d2 = judge(m, s, m.run("next"), 1.0, 1.0)
    assert d2.verdict == "pass", "an unconfirmed step is no new level"


def test_throttled_pairs_are_left_out_and_all_throttled_is_ambiguous():
    m = Machine()
    a, b = m.run("p"), m.run("c", throttled=True)
    assert clean_pairs([(a, b)], NAMES) == []
    s = history(m, 8)
    screen = s.screen(m.run("c", 1.06))
    pairs = confirm(m, s, "h7", "c", 1.0, 1.06, throttled=True)
    d = s.decide(screen, pairs, step_id="t", parent="h7")
    assert d.verdict == "ambiguous" and "throttled" in d.message


def test_unconfirmed_mode_decides_on_the_screen():
    m = Machine()
    s = history(m, 8)
    _, d = judge(m, s, m.run("slow", 1.08), 1.0, 1.08, confirm_it=False)
    assert d.verdict == "regressed" and d.step.detected_by == "screen" and "not re-measured" in d.message


# ------------------------------------------------------------------------------------------------ controls
def test_a_slowdown_that_does_not_hold_in_cycles_is_ambiguous():
    """The SM clock fell 10 % and the kernel took 10 % longer: the same cycles, so no regression."""
    m = Machine()
    s = history(m, 8)
    run = m.run("hot", 1.10, clock=1800.0)
    screen = s.screen(run)
    assert screen.moved and screen.clock
    _, d = judge(m, s, run, 1.0, 1.0, confirm_it=False)
    assert d.verdict == "ambiguous" and "cycles" in d.message


def test_clock_drop_inside_the_confirmation_makes_it_ambiguous():
    m = Machine()
    s = history(m, 8)
    screen = s.screen(m.run("c", 1.1))
    runs = [
        ("A", m.run("h7", 1.0, purpose="confirm", job=1)),
        ("B", m.run("c", 1.1, clock=1800.0, purpose="confirm", job=1)),
        ("B", m.run("c", 1.1, clock=1800.0, purpose="confirm", job=1)),
        ("A", m.run("h7", 1.0, purpose="confirm", job=1)),
    ]
    d = s.decide(screen, pair_up(runs), step_id="k", parent="h7")
    assert d.verdict == "ambiguous"


def test_machine_drift_seen_by_the_in_run_baselines_is_ambiguous_not_a_regression():
    """Issue 8: cuBLAS +12 % in the run where a kernel case looked +12 %: the machine drifted."""
    m = Machine()
    s = history(m, 8)
    run = m.run("drift", 1.12, control=1.12)
    screen = s.screen(run)
    assert screen.drift
    _, d = judge(m, s, run, 1.0, 1.0, confirm_it=False)
    assert d.verdict == "ambiguous" and "drift" in d.message


def test_drift_at_screening_is_decided_by_the_interleaved_pairs():
    """The planted +20 % with cuBLAS +12 % in the same run: the pairs (same GPU, interleaved) show the kernel
    change and not the control's, so it is a regression; a drift alone is not reproduced."""
    m = Machine()
    s = history(m, 8)
    _, d = judge(m, s, m.run("real", 1.20, control=1.12), 1.0, 1.20)
    assert d.verdict == "regressed"
    s2 = history(Machine(seed=8), 8)
    m2 = Machine(seed=9)
    _, d2 = judge(m2, s2, m2.run("drift", 1.12, control=1.12), 1.0, 1.0)
    assert d2.verdict == "not_reproduced" and "drift" in d2.message


def test_one_baseline_jumping_alone_is_not_machine_drift():
    """Seen on the H200 (issue 20): cuBLAS times B8_S128 in two modes (28.9-29.1 us and 30.0-30.6 us, run to
    run). A pull request that made that case 5.9 % slower was confirmed in pairs where cuBLAS sat in its low mode
    for the merge-base (A) and its high one for the head (B), +3.8 %, while eager held: it was called ambiguous
    ("machine drift") and the PR's check passed. Drift moves every kernel of the run: the control is the shift
    both baselines share, so this is a regression, and a drift that both share is still ambiguous."""
    both = {"cublas": 1.0, "eager": 1.0}
    slow = dict.fromkeys(NAMES, 1.0) | {"B8_S128": 1.059}

    def verdict(cublas_a: float, cublas_b: float, eager_b: float) -> str:
        m = Machine(sigma=0.002, seed=31)
        s = Series([], [])
        for i in range(10):
            s.add_run(m.run(f"h{i}", 1.0, controls=both))

        def runs(parent: str, commit: str, cases: list[str]):
            out = []
            for label in interleave(2):
                c, lv, ctl = (parent, 1.0, {"cublas": cublas_a, "eager": 1.0})
                if label == "B":
                    c, lv, ctl = commit, slow, {"cublas": cublas_b, "eager": eager_b}
                out.append((label, m.run(c, lv, cases=cases, controls=ctl, purpose="confirm", job=9)))
            return out

        _, d, _ = s.judge(m.run("pr", slow, controls=both), runs, step_id="st")
        assert d.step is not None and d.step.cases, d.message
        assert set(d.step.cases) == {"B8_S128"}, d.message
        return d.verdict

    assert verdict(cublas_a=0.962, cublas_b=1.0, eager_b=1.0) == "regressed"
    assert verdict(cublas_a=1.0, cublas_b=1.059, eager_b=1.059) == "ambiguous"


# ------------------------------------------------------------------------------------------------ late steps
def test_a_step_missed_at_screening_is_found_later_on_its_commit():
    m = Machine(sigma=0.003, seed=13)
    s = history(m, 10)
    level = dict.fromkeys(NAMES, 1.0) | {"B1_S256": 1.03}
    s.add_run(m.run("culprit", level))  # its screening found nothing (a missed step)
    for i in range(5):
        s.add_run(m.run(f"later{i}", level))
    cand = s.late_candidate()
    assert cand is not None
    culprit, parent, cases, change = cand
    assert (culprit, parent) == ("culprit", "h9") and cases == ["B1_S256"] and change > 0.02
    pairs = confirm(m, s, parent, culprit, dict.fromkeys(NAMES, 1.0), level, cases=cases)
    d = s.decide_late(culprit, parent, cases, change, pairs, step_id="late")
    assert d.verdict == "regressed" and d.step.detected_by == "late" and "late step" in d.message
    s.apply(d)
    assert s.late_candidate() is None


def test_suite_only_confirmation_keeps_every_case_that_moved_its_way():
    m = Machine(sigma=0.004, seed=17)
    s = history(m, 10)
    screen = s.screen(m.run("c", 1.03))
    assert screen.suite is not None and screen.suite.moved
    pairs = confirm(m, s, "h9", "c", 1.0, 1.03, pairs=2)
    d = s.decide(screen, pairs, step_id="q", parent="h9")
    assert d.verdict == "regressed" and d.suite_confirmation is not None and d.suite_confirmation.confirmed
    assert SUITE not in d.step.cases and len(d.step.cases) >= 12


def test_the_verdicts_page_was_made_with_these_rules():
    """docs/verdicts.md quotes the simulation; it names the configuration it ran with, so a change of the rules
    without a new run of scripts/simulate_verdicts.py --write-doc fails here."""
    spec = importlib.util.spec_from_file_location("simulate_verdicts", PROJECT / "scripts" / "simulate_verdicts.py")
    assert spec is not None and spec.loader is not None
    sim = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = sim  # its dataclasses look their module up there
    spec.loader.exec_module(sim)
    text = (PROJECT / "docs" / "verdicts.md").read_text()
    assert f"judge config `{sim.config_hash(JudgeConfig())}`" in text
    assert "| false alarms per 100 neutral commits, suite level |" in text


# ------------------------------------------------------------------------------------------------ review holes
def test_the_aa_spread_comes_from_confirmation_runs_not_the_screened_run_of_the_job():
    """The screened run of a job was re-measured because it moved: counted with its job's confirmation runs,
    it would inflate the A/A spread and weaken every later confirmation."""
    m = Machine(sigma=0.01, seed=3)
    s = history(m, 60)
    quiet = Machine(sigma=0.002, seed=4)
    for j in range(30):
        s.add_run(quiet.run(f"h{j}", 1.05, purpose="measure", job=j))  # the screened run: it moved (+5 %)
        for _ in range(2):
            s.add_run(quiet.run(f"h{j}", 1.0, purpose="confirm", job=j))
    noise = estimate_noise(s.points, s.steps, NAMES, JudgeConfig())
    assert noise.n_pair[NAMES[0]] == 30
    assert noise.pair[NAMES[0]] < 0.005 < noise.screen[NAMES[0]], noise.pair[NAMES[0]]


def test_a_throttled_point_does_not_switch_the_late_search_off():
    m = Machine(sigma=0.003, seed=13)
    s = history(m, 10)
    s.points[3].runs[0] = m.run("h3", 1.0, throttled=True)  # NVML saw throttling in an old run of the level
    level = dict.fromkeys(NAMES, 1.0) | {"B1_S256": 1.03}
    s.add_run(m.run("culprit", level))
    for i in range(5):
        s.add_run(m.run(f"later{i}", level, throttled=i == 2))
    cand = s.late_candidate()
    assert cand is not None
    culprit, parent, cases, change = cand
    assert (culprit, parent) == ("culprit", "h9") and cases == ["B1_S256"] and change > 0.02


def test_a_step_that_does_not_reproduce_keeps_the_way_its_case_moved():
    """One case 8 % slower, the others 1 % faster: the suite leans faster, the step is a slowdown."""
    m = Machine(sigma=0.003, seed=21)
    s = history(m, 10)
    level = dict.fromkeys(NAMES, 0.99) | {"B1_S256": 1.08}
    screen, d = judge(m, s, m.run("c", level), 1.0, 1.0)  # the pairs show nothing: not reproduced
    assert screen.moved_cases == ["B1_S256"] and screen.suite is not None and screen.suite.change < 0
    assert d.verdict == "not_reproduced" and d.step.direction == "slower"
    assert screen.direction == "slower"


def test_a_suite_wide_change_confirms_each_case_its_own_way():
    """A uniform +3 %: each case's change net of the common shift is noise, so the way a case must confirm
    is its own change, not that residual; every case is confirmed, not a random half."""
    m = Machine(sigma=0.003, seed=17)
    s = history(m, 10)
    screen, d = judge(m, s, m.run("c", 1.03), 1.0, 1.03)
    assert screen.suite is not None and screen.suite.moved and d.verdict == "regressed"
    assert len(d.confirmation) == len(NAMES) and all(x.confirmed for x in d.confirmation.values())
    assert len(d.step.cases) == len(NAMES)


def test_series_judge_adds_the_run_its_confirmation_and_its_step():
    """Series.judge is the one flow (the runner's and the simulation's): afterwards the run, the pairs and the
    step are in the series, and the next commit at the new level passes."""
    m = Machine(sigma=0.003, seed=5)
    s = history(m, 10)
    calls: list = []

    def runs(parent: str, commit: str, cases: list[str]):
        calls.append((parent, commit))
        return confirm_runs(m, parent, commit, 1.0, 1.05, cases=cases)

    pending: list = []
    _, d, _ = s.judge(m.run("c", 1.05), runs, step_id="s1", on_suspect=lambda sc, st: pending.append(st))
    assert calls == [("h9", "c")] and [(p.status, p.direction) for p in pending] == [("pending", "slower")]
    assert d.verdict == "regressed" and s.steps[-1].step_id == "s1" and s.steps[-1].status == "open"
    assert len(s.points[s.index_of("c")].runs) == 3  # its run and its two confirmation runs
    _, nxt, _ = s.judge(m.run("d", 1.05), runs, step_id="s2")
    assert nxt.verdict == "pass" and calls == [("h9", "c")]


def test_a_suite_drift_seen_by_eager_alone_is_ambiguous_not_a_regression():
    """Where the in-run cuBLAS was not timed, eager is the control of every check. The suite's confirmation
    read cuBLAS only, so a +3 % drift of the whole machine that eager shared in every pair was confirmed as a
    regression of the commit (a red check on the wrong commit). One control choice (control_shift) now serves
    the screening, the case and the suite confirmations."""
    m = Machine(sigma=0.002, seed=21)
    s = Series([], [])
    for i in range(12):
        s.add_run(m.run(f"h{i}", 1.0, control_impl="eager"))
    run = m.run("x", 1.03, control=1.03, control_impl="eager")

    def runs(parent: str, commit: str, cases: list[str]):
        out = []
        for label in interleave(2):
            c, lv = (parent, 1.0) if label == "A" else (commit, 1.03)
            out.append((label, m.run(c, lv, cases=cases, control=lv, purpose="confirm", job=5, control_impl="eager")))
        return out

    screen, d, _ = s.judge(run, runs, step_id="st")
    assert screen.suite is not None and screen.suite.moved and not screen.moved_cases
    assert d.verdict == "ambiguous" and "machine drift" in d.message, d.message
    assert d.step is None or d.step.status != "open"


# ------------------------------------------------------------------------------------------------ blame
def test_confirmation_is_against_the_git_first_parent_not_the_newest_measured_commit():
    """The culprit ("gap") was not measured yet: the child is re-measured against it, not against the level's
    newest commit; the parent measures like the child, so the child is not blamed (the change lies earlier)."""
    m = Machine(sigma=0.003, seed=5)
    s = history(m, 10)
    calls: list = []

    def runs(parent: str, commit: str, cases: list[str]):
        calls.append((parent, commit))
        return confirm_runs(m, parent, commit, 1.10, 1.10, cases=cases)

    _, d, _ = s.judge(m.run("child", 1.10), runs, step_id="s1", parent="gap")
    assert calls == [("gap", "child")]
    assert d.verdict == "pass" and d.step is None and "gap" in d.message and "earlier" in d.message, d.message
    assert [p.commit for p in s.points[-2:]] == ["gap", "child"], "the parent's runs join the series before it"
    _, own, _ = s.judge(m.run("gap2", 1.0), runs, step_id="s2", parent="h9")  # a flaky child of a quiet parent
    assert own.verdict == "pass"


def test_a_screened_move_the_unmeasured_parent_does_not_share_is_not_reproduced_not_passed():
    m = Machine(sigma=0.003, seed=5)
    s = history(m, 10)

    def runs(parent: str, commit: str, cases: list[str]):
        return confirm_runs(m, parent, commit, 1.0, 1.0, cases=cases)

    _, d, _ = s.judge(m.run("flaky", 1.08), runs, step_id="s1", parent="gap")
    assert d.verdict == "not_reproduced", d.message


def test_a_revert_that_overshoots_the_old_level_fixes_the_step():
    """A regression is fixed when the later level is back at or below its old level; 5 % faster than before the
    slowdown is not "still regressed"."""
    m = Machine()
    s = history(m, 8)
    _, slow = judge(m, s, m.run("slow", 1.05), 1.0, 1.05)
    for i in range(3):
        judge(m, s, m.run(f"mid{i}", 1.05), 1.05, 1.05)
    _, fix = judge(m, s, m.run("fix", 0.95), 1.05, 0.95)
    assert fix.verdict == "improved" and fix.fixes == [slow.step.step_id], fix.message


def test_a_revert_that_stops_short_of_the_old_level_does_not_fix_the_step():
    m = Machine()
    s = history(m, 8)
    judge(m, s, m.run("slow", 1.10), 1.0, 1.10)
    for i in range(3):
        judge(m, s, m.run(f"mid{i}", 1.10), 1.10, 1.10)
    _, part = judge(m, s, m.run("part", 1.05), 1.10, 1.05)
    assert part.verdict == "improved" and part.fixes == [], part.message


def test_a_rerun_of_the_culprit_joins_its_step_in_the_series():
    m = Machine(sigma=0.003, seed=5)
    s = history(m, 10)
    _, d, _ = s.judge(m.run("c", 1.05), lambda p, c, cs: confirm_runs(m, p, c, 1.0, 1.05, cases=cs), step_id="s1")
    assert d.verdict == "regressed"
    _, again, _ = s.judge(m.run("c", 1.05), lambda p, c, cs: confirm_runs(m, p, c, 1.0, 1.05, cases=cs), step_id="s2")
    assert again.verdict == "regressed" and again.step is not None and again.step.step_id == "s1", again.message
    assert again.joined and [st.step_id for st in s.steps] == ["s1"]


def test_a_parent_that_cannot_be_measured_falls_back_to_the_newest_commit_of_the_level():
    """The first parent is broken (its confirmation runs fail, nothing comes back): the run is re-measured
    against the level's newest commit instead, and a real change is still caught."""
    m = Machine(sigma=0.003, seed=5)
    s = history(m, 10)
    calls: list = []

    def runs(parent: str, commit: str, cases: list[str]):
        calls.append((parent, commit))
        return [] if parent == "broken" else confirm_runs(m, parent, commit, 1.0, 1.10, cases=cases)

    _, d, _ = s.judge(m.run("child", 1.10), runs, step_id="s1", parent="broken")
    assert calls == [("broken", "child"), ("h9", "child")]
    assert d.verdict == "regressed" and d.step is not None and d.step.parent == "h9", d.message
    assert s.index_of("broken") is None


# ------------------------------------------------------------------------------------------------ sensitivity
# Issue 20, item 0, on the H200: an 8-case suite whose two M = 8192 cases spread by 0.1-0.2 % between runs
# (the other cases by 0.4-1 %).
QUIET = ["B32_S256", "B64_S128"]
EIGHT = ["B1_S256", "B4_S128", "B1_S1024", "B2_S1024", "B4_S1024", "B16_S256", *QUIET]
H200_SPREAD = {
    "B1_S256": 0.010,
    "B4_S128": 0.008,
    "B1_S1024": 0.006,
    "B2_S1024": 0.004,
    "B4_S1024": 0.005,
    "B16_S256": 0.005,
    "B32_S256": 0.001,
    "B64_S128": 0.002,
}


def eight_case_series(m: Machine, n: int) -> Series:
    s = Series([], [])
    for i in range(n):
        s.add_run(m.run(f"h{i}", cases=EIGHT))
    return s


def test_steps_of_1_4_and_2_percent_on_cases_that_spread_by_0_2_percent_are_a_regression():
    """The commit made the two quiet cases 1.4 % and 2.0 % slower, three runs into the level, and passed (its
    message: "largest change B64_S128 +2.0 %"), and so did the commit after it: the noise table showed 0.86 % for
    every case (the prior, worth three runs, against two comparisons) and the screen's floor was 2 %. Each
    case's spread now follows its runs (the prior gives way at once) and the floor is 1 %: both cases move at
    screening, the interleaved pairs confirm both, and the commit after it passes against the new level."""
    m = Machine(sigma=H200_SPREAD, seed=7)
    s = eight_case_series(m, 3)
    noise = s.noise(EIGHT)
    slower = {"B32_S256": 1.014, "B64_S128": 1.020}
    screen, d = judge(m, s, m.run("slow", slower, cases=EIGHT), 1.0, slower)
    assert sorted(screen.moved_cases) == QUIET, (d.message, {c: noise.sigma(c, 1.0) for c in QUIET})
    assert all(noise.sigma(c, 1.0) < 0.004 for c in QUIET), {c: noise.sigma(c, 1.0) for c in QUIET}
    assert d.verdict == "regressed" and d.step is not None and sorted(d.step.cases) == QUIET, d.message
    assert 0.008 < d.step.cases["B32_S256"].change < 0.02 and 0.014 < d.step.cases["B64_S128"].change < 0.026
    _, after = judge(m, s, m.run("next", slower, cases=EIGHT), slower, slower)
    assert after.verdict == "pass", after.message


def test_neutral_commits_on_that_series_open_no_step_and_leave_the_quiet_cases_alone():
    """The same suite and spreads, ten neutral commits after three: the quiet cases never move (1 % is five to
    ten of their spreads), and whatever the noisy ones show at screening the interleaved pairs do not confirm."""
    m = Machine(sigma=H200_SPREAD, seed=7)
    s = eight_case_series(m, 3)
    for i in range(10):
        screen, d = judge(m, s, m.run(f"n{i}", cases=EIGHT), 1.0, 1.0)
        assert not set(screen.moved_cases) & set(QUIET), (i, screen.moved_cases)
        assert d.step is None or not d.step.is_boundary, (i, d.message)
    assert not any(st.is_boundary for st in s.steps)


def test_the_aa_runs_of_confirmations_count_in_a_case_s_spread():
    """A young series: two comparisons of each case, plus the A/A runs of two confirmations (runs of one commit
    in one job) with the case's spread: the screen's spread stands on both, and follows them."""
    m = Machine(sigma=0.002, seed=3)
    s = history(m, 3)
    alone = s.noise().screen[NAMES[0]]
    for j in range(2):
        for _ in range(2):
            s.add_run(m.run("h2", 1.0, purpose="confirm", job=100 + j))
            s.add_run(m.run("h1", 1.0, purpose="confirm", job=100 + j))
    noise = s.noise()
    assert noise.n_screen[NAMES[0]] == 2 and noise.n_pair[NAMES[0]] == 4
    assert noise.screen[NAMES[0]] != alone and 0.001 < noise.screen[NAMES[0]] < 0.004
    assert noise.pair_dof(NAMES[0]) > 4
