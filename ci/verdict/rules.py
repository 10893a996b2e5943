"""How a verdict is reached: the pure logic of judging a run against its series (no storage, no GPU).

The unit that varies between commits is the *run* (a process: its compile, its allocations, the clocks it
met), so every figure here is run-level: one number per run and case, the median of that run's timed
samples, taken on a log scale. Raw samples never enter a test as independent observations.

Series and levels
    A series is one hardware label and one protocol (whose hash includes the harness version), followed
    along a commit's first-parent ancestry. Its *points* are commits, each with one or more runs. Confirmed
    steps (status open, fixed, acknowledged, improvement) cut the series into *levels*; a commit is judged
    against the points of the level it would change: those since the newest confirmed step before it (the
    culprit of that step is the first point of the new level). So after a confirmed step nobody is blamed
    for it again, and a baseline never straddles a step.

Noise model (``estimate_noise``), per case and for the suite, per series (docs/verdicts.md, "The noise model")
    ``screen``: the spread of what screening tests, measured on the series itself: each commit's first run
    against the median of the points of its level before it, in units of screening's standard error factor
    (outliers beyond five robust spreads left out), with the A/A spreads below as more observations.
    ``adjusted``: the same net of each run's common shift. ``settled``: the same on the levels before the
    newest (a step screening missed inflates the newest's), with the spread between successive commits' runs
    (a step is one outlier there) as its prior: the late search's. ``pair``: between runs of one commit in one
    job (A/A re-runs: every confirmation measures the commit and its parent twice), with ``settled`` as a
    prior worth at most three observations; it carries the observations it stands on,
    which set the Student t quantile of the confirmation. Each is pooled with a prior
    (``JudgeConfig.prior_sigma``, worth a tenth of an observation: it gives way to the first comparison) and
    floored.

Screening a run (``Series.screen``)
    Per case, the change is the run's log median minus the level's median (over points); its standard error
    includes the level's own uncertainty. From six cases on, the run's common shift (``_common_shift``: the
    median change of the cases that did not move on their own, shrunk towards 0 by its own noise) is taken out
    of the case tests, which read the ``adjusted`` spread. A case *moved* when |change| >= max(log(1 +
    min_effect), k_case * se) and its Benjamini-Hochberg q-value over the run's cases (p-values under tails
    like Student's t with ``tail_dof`` degrees of freedom) is <= ``fdr``. The suite (mean over cases of the log
    medians, i.e. the log geometric mean; near normal) moved when its change passes max(log(1 + min_effect),
    k * se) with its own spread (which includes the machine drift that all cases share). The eager and cuBLAS
    baselines, timed in the same run, are the control: when the shift they share (``shared_shift``) is at least
    half the kernel's change, the same way, the run is marked ``drift``. The SM clock (NVML, sampled around each
    case) is the other control: a change that does not hold in cycles (time x clock) is marked ``clock``.

Confirming (``Series.decide``)
    A run that moved is re-measured with its parent (its git first parent; the newest commit of its level when
    the ancestry is not known) in one job, interleaved A B B A ... on the same GPU; each pair gives a paired
    log ratio per case. A case is confirmed when the (Bonferroni over the tested cases; Student t with the
    observations its A/A spread stands on) confidence interval of the mean ratio excludes 0 in the screened
    direction and the mean exceeds half the minimum effect; the suite likewise when every case was tested (a
    confirmed suite change takes each case that moved its way beyond its own interval and half the minimum
    effect). A confirmed change that the in-run controls share, or that does not hold in cycles, is
    *ambiguous*; otherwise slower cases make the run
    *regressed* (a step opens, the only verdict that fails CI), faster ones *improved*; nothing confirmed is
    *not reproduced*. One step carries every case it moved, with its interval. When the parent was not measured
    yet (not in the level) and its re-measurement moved against the level as the run did, the change lies in
    an earlier commit: the run passes, and that commit gets the step when it is judged.

Lifecycle of a step: pending -> open (slower) | improvement (faster) | ambiguous | not_reproduced; an open step
becomes fixed when a later confirmed step brings every case it moved back to its old level or beyond (a revert
that overshoots fixes it too), or acknowledged (``solci ack``). A step is its culprit's, judged once: a later
run of that commit joins it (``Series.judge``) and its status stands. Late steps (``Series.late_candidate``):
within the current level, a split of the series (ruptures' binary segmentation) whose two sides differ beyond
``k_late`` standard errors and ``late_min_effect`` names an earlier culprit that screening missed; it is
confirmed the same way (culprit against its parent).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from storage.schema import BOUNDARY_STATUSES, SUITE

MIN_CASES_FOR_COMMON = 6  # a run's common shift (median over cases) is taken out of case tests from this many

# Step statuses (storage.schema.STEP_STATUSES): a confirmed step cuts the series into levels.
VERDICTS = (
    "baseline",  # first run of its series: nothing to compare with
    "pass",  # within noise of its level
    "suspect",  # moved at screening; confirmation pending
    "regressed",  # a confirmed slowdown (the only verdict that fails CI)
    "improved",  # a confirmed speed-up
    "ambiguous",  # a change the controls (clocks, in-run baselines) explain as well
    "not_reproduced",  # moved at screening, not in the interleaved re-measurement
    "functional",  # CPU interpreter: correctness only, never judged for speed
    "incorrect",  # a case failed the correctness check
    "broken",  # a case errored or timed out
    "quarantined",  # faster than physics allows (below the speed of light): never a record or a baseline
    "rejected",  # the kernel tampered with the harness, or its launches cannot be replayed: nothing of the run counts
)


@dataclass(frozen=True)
class JudgeConfig:
    """The rules' constants. Defaults were chosen with ``scripts/simulate_verdicts.py`` (docs/verdicts.md)."""

    min_effect: float = 0.01  # smallest relative change reported, per case and for the suite
    k: float = 3.0  # screening: change >= k standard errors (a case's: as rare a change under tail_dof)
    tail_dof: float = 5.0  # a case's run figures have tails like Student's t with this many degrees of freedom
    fdr: float = 0.05  # Benjamini-Hochberg level over a run's cases
    alpha_confirm: float = 0.01  # family-wise error of the confirmation (Bonferroni over tested cases)
    pairs: int = 2  # interleaved pairs in a confirmation (A B B A)
    level_points: int = 10  # the level's median uses at most the newest N points since the step
    noise_points: int = 200  # points of history the noise model reads
    prior_sigma: float = 0.01  # between-run spread assumed before any history (1 %)
    prior_weight: float = 0.1  # pseudo-observations of the prior: it decides only until a case has runs to compare
    pair_prior_weight: float = 3.0  # the prior of the A/A and the settled spreads counts at most this many runs
    min_sigma: float = 0.0015  # floor of every spread (0.15 %)
    k_late: float = 5.0  # late steps: split difference >= k_late standard errors
    late_min_effect: float = 0.02  # late steps: and >= this (smaller steps are the screen's, where noise allows)
    late_min_points: int = 3  # points needed on each side of a late split
    control_share: float = 0.5  # controls moving >= this share of the kernel's change mean drift
    clock_change: float = 0.01  # clock moves smaller than this are ignored

    def __post_init__(self) -> None:
        if not self.tail_dof > 2.0:
            raise ValueError(f"tail_dof must exceed 2 (a finite variance), got {self.tail_dof}")

    @property
    def log_min_effect(self) -> float:
        return math.log1p(self.min_effect)

    @property
    def k_case(self) -> float:
        """A case's bar in its standard errors: as rare a change as ``k`` normal standard errors under tails like
        Student's t with ``tail_dof`` degrees of freedom (4.27 for k 3 and 5 degrees of freedom)."""
        return _tail_quantile(_norm_cdf(self.k), self.tail_dof)


# ------------------------------------------------------------------------------------------------ data
@dataclass(frozen=True)
class RunFigures:
    """One run, reduced to what judging reads: per case the median (us) of the kernel, of the in-run
    controls (eager, cuBLAS), the SM clock (MHz) and whether NVML saw throttling."""

    run_id: str
    commit: str
    kernel: Mapping[str, float]
    controls: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    clock_mhz: Mapping[str, float] = field(default_factory=dict)
    throttled: frozenset[str] = frozenset()
    purpose: str = "measure"  # measure | confirm
    job_id: int | None = None

    def log(self, case: str) -> float | None:
        v = self.kernel.get(case)
        return math.log(v) if v is not None and v > 0 else None

    def suite_log(self, cases: Iterable[str]) -> float | None:
        """Mean over ``cases`` of the log medians (log geometric mean); None when a case is missing."""
        logs = [self.log(c) for c in cases]
        return None if not logs or any(x is None for x in logs) else statistics.fmean(logs)  # type: ignore[arg-type]

    def control_log(self, impl: str, case: str) -> float | None:
        v = self.controls.get(impl, {}).get(case)
        return math.log(v) if v is not None and v > 0 else None


@dataclass
class Point:
    """One commit of a series and its runs (oldest first)."""

    commit: str
    runs: list[RunFigures] = field(default_factory=list)

    @property
    def first(self) -> RunFigures:
        """The first unthrottled screening run (else the first run): the one-run figure of this commit that
        successive commits' figures are exchangeable with."""
        calm = [r for r in self.runs if not r.throttled]
        return next((r for r in calm if r.purpose == "measure"), calm[0] if calm else self.runs[0])

    def value(self, case: str) -> float | None:
        """Mean over the commit's runs of the log median of ``case``."""
        logs = [x for x in (r.log(case) for r in self.runs) if x is not None]
        return statistics.fmean(logs) if logs else None

    def suite_value(self, cases: Sequence[str]) -> float | None:
        logs = [x for x in (r.suite_log(cases) for r in self.runs) if x is not None]
        return statistics.fmean(logs) if logs else None

    def control(self, impl: str, case: str) -> float | None:
        logs = [x for x in (r.control_log(impl, case) for r in self.runs) if x is not None]
        return statistics.fmean(logs) if logs else None

    def clock(self, case: str) -> float | None:
        vals = [r.clock_mhz[case] for r in self.runs if r.clock_mhz.get(case)]
        return statistics.fmean(vals) if vals else None


@dataclass(frozen=True)
class Change:
    """A relative change (new / old - 1) and its interval, both as ratios minus one."""

    change: float
    lo: float
    hi: float

    @classmethod
    def from_log(cls, d: float, half_width: float) -> Change:
        return cls(math.expm1(d), math.expm1(d - half_width), math.expm1(d + half_width))


@dataclass
class Step:
    """A change of level at ``commit`` (its first commit), with every case it moved."""

    step_id: str
    commit: str
    parent: str | None
    status: str
    direction: str  # slower | faster
    cases: dict[str, Change] = field(default_factory=dict)
    suite: Change | None = None
    detected_by: str = "screen"  # screen | confirmed | late
    before_log: dict[str, float] = field(default_factory=dict)  # the level before, per case (log us)
    after_log: dict[str, float] = field(default_factory=dict)  # the level after (log us)
    fixed_by: str | None = None
    note: str = ""

    @property
    def is_boundary(self) -> bool:
        return self.status in BOUNDARY_STATUSES


# ------------------------------------------------------------------------------------------------ noise
@dataclass(frozen=True)
class Noise:
    """Between-run spreads (standard deviations of log medians) per case and for the suite."""

    screen: Mapping[str, float]
    pair: Mapping[str, float]
    n_screen: Mapping[str, int] = field(default_factory=dict)
    n_pair: Mapping[str, int] = field(default_factory=dict)
    adjusted: Mapping[str, float] = field(default_factory=dict)  # spread of a case net of the run's common shift
    dof_pair: Mapping[str, float] = field(default_factory=dict)  # observations the pair spread stands on
    settled: Mapping[str, float] = field(default_factory=dict)  # of the levels before the newest (the late search's)

    def sigma(self, case: str, default: float) -> float:
        return self.screen.get(case, default)

    def sigma_adjusted(self, case: str, default: float) -> float:
        return self.adjusted.get(case, self.screen.get(case, default))

    def sigma_pair(self, case: str, default: float) -> float:
        return self.pair.get(case, self.screen.get(case, default))

    def sigma_settled(self, case: str, default: float) -> float:
        return self.settled.get(case, self.screen.get(case, default))

    def pair_dof(self, case: str) -> float:
        """The observations behind ``sigma_pair`` (the degrees of freedom of its Student t quantile)."""
        return self.dof_pair.get(case, math.inf)


OUTLIER_SPREADS = 5.0  # a residual beyond this many robust spreads is an outlier (a throttled run, an unseen step)


def _spread(values: Sequence[float]) -> tuple[float, float] | None:
    """(spread, observations) of values centred on 0: the root mean square of those within ``OUTLIER_SPREADS``
    robust spreads (1.4826 x the median absolute value) of 0, each worth one observation; None for no values."""
    if not values:
        return None
    robust = 1.4826 * statistics.median(abs(v) for v in values)
    kept = [v for v in values if abs(v) <= OUTLIER_SPREADS * robust] if robust > 0 else list(values)
    return math.sqrt(math.fsum(v * v for v in kept) / len(kept)), float(len(kept))


def _pooled(prior: float, weight: float, estimates: Iterable[tuple[float, float]], floor: float) -> float:
    """sqrt of the dof-weighted mean of variances, the prior counted as ``weight`` pseudo-observations."""
    num, den = weight * prior * prior, weight
    for s, dof in estimates:
        if dof > 0:
            num += dof * s * s
            den += dof
    return max(floor, math.sqrt(num / den))


def _se_factor(n: int) -> float:
    """A run's change against the median of ``n`` points, in between-run spreads: sqrt(1 + (pi / 2) / n)."""
    return math.sqrt(1.0 + (math.pi / 2.0) / n)


def _common_shift(changes: Mapping[str, float], ses: Mapping[str, float], cfg: JudgeConfig) -> float | None:
    """A run's common shift (machine drift, or a change of every case), None under ``MIN_CASES_FOR_COMMON``
    cases: the median change over its cases, leaving out those that moved on their own (beyond the minimum
    effect and ``k_case`` standard errors) unless they are half the cases or more; shrunk towards 0 by its own
    noise (times max(0, 1 - se^2 / shift^2), the se of a median from the cases' spread about it), so that a
    shift within the noise of estimating it is not taken out of cases much quieter than that noise."""
    if len(changes) < MIN_CASES_FOR_COMMON:
        return None
    calm = [d for c, d in changes.items() if abs(d) < max(cfg.log_min_effect, cfg.k_case * ses[c])]
    used = calm if 2 * len(calm) > len(changes) else list(changes.values())
    shift = statistics.median(used)
    se = 1.2533 * 1.4826 * statistics.median(abs(d - shift) for d in used) / math.sqrt(len(used))
    return shift * max(0.0, 1.0 - (se / shift) ** 2) if shift else 0.0


def _screen_residuals(
    segments: Sequence[Sequence[Point]], cases: Sequence[str], cfg: JudgeConfig
) -> tuple[dict[str, list[float]], list[dict[str, tuple[float, float]]], dict[str, int]]:
    """What screening would have seen, for every point of a level after its first: the change of its first run
    against the median of the level's points before it (at most ``level_points``). Per case and for the suite,
    the changes in units of the screen's factor (``_se_factor``), oldest first, and how many of them lie in the
    levels before the newest; and per point the cases' (change, factor)."""
    raw: dict[str, list[float]] = {c: [] for c in [SUITE, *cases]}
    per_point: list[dict[str, tuple[float, float]]] = []
    older: dict[str, int] = {}
    for k, seg in enumerate(segments):
        if k == len(segments) - 1:
            older = {c: len(v) for c, v in raw.items()}
        values = [{c: p.value(c) for c in cases} for p in seg]
        suite = [p.suite_value(cases) for p in seg]
        with_runs = [i for i, p in enumerate(seg) if p.runs]
        for j in range(1, len(seg)):
            before = [i for i in with_runs if i < j][-cfg.level_points :]
            run = seg[j].first
            row: dict[str, tuple[float, float]] = {}
            for c in cases:
                x = _figure(run, c, cases)
                level = [v for v in (values[i][c] for i in before) if v is not None]
                if x is not None and level:
                    row[c] = (x - statistics.median(level), _se_factor(len(level)))
                    raw[c].append(row[c][0] / row[c][1])
            per_point.append(row)
            x = _figure(run, SUITE, cases)
            level = [v for v in (suite[i] for i in before) if v is not None]
            if x is not None and level:
                raw[SUITE].append((x - statistics.median(level)) / _se_factor(len(level)))
    return raw, per_point, older


def _aa_spreads(
    points: Sequence[Point], cases: Sequence[str], cfg: JudgeConfig
) -> dict[str, list[tuple[float, float]]]:
    """Per case and for the suite, (spread, dof) of each group of runs of one commit in one job (a confirmation's
    A/A re-runs; not the screened run of the job: it was picked for moving)."""
    groups: dict[str, dict[tuple[str, int], list[float]]] = {c: {} for c in [SUITE, *cases]}
    for p in points[-cfg.noise_points :]:
        for r in p.runs:
            if r.job_id is None or r.purpose != "confirm":
                continue
            for case, by_job in groups.items():
                v = _figure(r, case, cases)
                if v is not None:
                    by_job.setdefault((p.commit, r.job_id), []).append(v)
    out: dict[str, list[tuple[float, float]]] = {}
    for case, by_job in groups.items():
        out[case] = []
        for g in by_job.values():
            if len(g) >= 2:
                mean = math.fsum(g) / len(g)
                out[case].append((math.sqrt(math.fsum((v - mean) ** 2 for v in g) / (len(g) - 1)), len(g) - 1.0))
    return out


def estimate_noise(
    points: Sequence[Point],
    steps: Sequence[Step],
    cases: Iterable[str],
    cfg: JudgeConfig,
    *,
    judged: Collection[str] = (),
) -> Noise:
    """The noise model of a series from its points (oldest first) and steps; every spread is pooled with the
    prior (``prior_weight`` observations) and floored.

    screen: the spread of screening's own changes on the series (each point's first run against the median of
    its level's points before it, in units of ``_se_factor``; ``_spread``), with the A/A spreads below as more
    observations; adjusted: the same, net of each point's common shift; settled: the screen's spread on the
    levels before the newest (a step screening missed in the newest inflates the newest's changes until it is
    found), with the spread of the first runs of successive points of one level as its prior worth at most
    ``pair_prior_weight`` observations (a difference of two runs has twice the variance of one; a step is one
    outlier there); pair: the A/A spreads of runs of one commit measured in the same job (confirmation
    re-runs, deviations from their job's mean), with the settled spread as a prior worth at most
    ``pair_prior_weight`` observations; dof_pair: the observations behind the pair spread (the settled
    spread's and the A/A runs'). ``judged``: the commits under test (the one being judged, and an unjudged
    parent it was re-measured against), whose confirmation runs are in ``points``: their A/A runs count, their
    figures are no part of a level (they hold the change under test)."""
    boundaries = {s.commit for s in steps if s.is_boundary}
    segments: list[list[Point]] = [[]]
    for p in points[-cfg.noise_points :]:
        if p.commit in judged:
            continue
        if p.commit in boundaries and segments[-1]:
            segments.append([])
        segments[-1].append(p)
    case_list = list(dict.fromkeys(cases))
    raw, per_point, older = _screen_residuals(segments, case_list, cfg)
    aa = _aa_spreads(points, case_list, cfg)

    def pooled(prior: float, *estimates: tuple[float, float] | None) -> float:
        return _pooled(prior, cfg.prior_weight, [e for e in estimates if e is not None], cfg.min_sigma)

    screen: dict[str, float] = {}
    settled: dict[str, float] = {}
    pair: dict[str, float] = {}
    dof_pair: dict[str, float] = {}
    for case in [SUITE, *case_list]:
        screen[case] = pooled(cfg.prior_sigma, _spread(raw[case]), *aa[case])
        diffs: list[float] = []
        for seg in segments:
            vals = [v for v in (_figure(p.first, case, case_list) for p in seg) if v is not None]
            diffs += [(b - a) / math.sqrt(2.0) for a, b in itertools.pairwise(vals)]
        succ = _spread(diffs)
        dof = cfg.prior_weight + (succ[1] if succ else 0.0)
        old = _spread(raw[case][: older[case]])
        settled[case] = _pooled(
            pooled(cfg.prior_sigma, succ), min(cfg.pair_prior_weight, dof), [old] if old else [], cfg.min_sigma
        )
        dof += old[1] if old else 0.0
        pair[case] = _pooled(settled[case], min(cfg.pair_prior_weight, dof), aa[case], cfg.min_sigma)
        dof_pair[case] = dof + math.fsum(d for _, d in aa[case])
    net: dict[str, list[float]] = {c: [] for c in case_list}
    for row in per_point:
        shift = _common_shift({c: d for c, (d, _) in row.items()}, {c: f * screen[c] for c, (_, f) in row.items()}, cfg)
        if shift is not None:
            for c, (d, f) in row.items():
                net[c].append((d - shift) / f)
    adjusted = {c: pooled(screen[c], _spread(net[c]), *aa[c]) for c in case_list}
    n_screen = {c: len(v) for c, v in raw.items()}
    n_pair = {c: int(sum(d for _, d in v)) for c, v in aa.items()}
    return Noise(screen, pair, n_screen, n_pair, adjusted, dof_pair, settled)


def _figure(run: RunFigures, case: str, cases: Sequence[str]) -> float | None:
    """A run's log figure for ``case`` (the suite: its log geometric mean); None where NVML saw throttling."""
    if run.throttled and (case == SUITE or case in run.throttled):
        return None
    return run.suite_log(cases) if case == SUITE else run.log(case)


CONTROL_IMPLS = ("cublas", "eager")  # the in-run baselines a change is held against


def shared_shift(shifts: Sequence[float]) -> float | None:
    """The shift all the in-run baselines share: the smallest when they all moved the same way, else 0 (machine
    drift moves every kernel of the run; a jump of one baseline alone, such as cuBLAS switching between its two
    timings of one shape, is not drift); None when no baseline was timed."""
    if not shifts:
        return None
    if all(x > 0 for x in shifts):
        return min(shifts)
    if all(x < 0 for x in shifts):
        return max(shifts)
    return 0.0


def control_shift(a: RunFigures, b: RunFigures, case: str) -> float | None:
    """The in-run controls' shared log change from run ``a`` to run ``b`` on ``case`` (``shared_shift`` over the
    baselines both runs timed); None when they timed none."""
    shifts = []
    for impl in CONTROL_IMPLS:
        ca, cb = a.control_log(impl, case), b.control_log(impl, case)
        if ca is not None and cb is not None:
            shifts.append(cb - ca)
    return shared_shift(shifts)


# ------------------------------------------------------------------------------------------------ screening
@dataclass(frozen=True)
class CaseScreen:
    case: str
    change: float  # log change against the level
    se: float
    z: float
    p_value: float
    q_value: float
    threshold: float  # log
    moved: bool
    sigma: float
    control_change: float | None = None  # log change the in-run baselines share against their level
    clock_change: float | None = None  # log change of the SM clock against the level's
    throttled: bool = False
    tested: float | None = None  # the figure tested: the change net of the run's common shift (cases)

    @property
    def tested_change(self) -> float:
        return self.change if self.tested is None else self.tested

    def interval(self, level: float = 0.95) -> Change:
        """The change with its two-sided ``level`` confidence interval (change ± z·se, on the log scale): what
        a verdict row stores as the screened suite change; the threshold is the bar it is tested against, not
        its uncertainty."""
        return Change.from_log(self.change, _norm_ppf(0.5 + level / 2.0) * self.se)


@dataclass
class Screen:
    run: RunFigures
    level_commits: list[str]
    cases: dict[str, CaseScreen]
    suite: CaseScreen | None
    drift: bool = False
    clock: bool = False

    @property
    def moved_cases(self) -> list[str]:
        return [c for c, s in self.cases.items() if s.moved]

    @property
    def moved(self) -> bool:
        return bool(self.moved_cases) or bool(self.suite and self.suite.moved)

    @property
    def baseline(self) -> bool:
        return not self.level_commits

    @property
    def direction(self) -> str:
        """slower | faster: the suite's way when the suite moved, else the way of the case that moved most."""
        if self.suite is not None and self.suite.moved:
            return "slower" if self.suite.change > 0 else "faster"
        moved = [self.cases[c] for c in self.moved_cases]
        if moved:
            return "slower" if max(moved, key=lambda s: abs(s.tested_change)).tested_change > 0 else "faster"
        return "slower" if self.suite is not None and self.suite.change > 0 else "faster"

    def screened_change(self, case: str) -> float:
        """The change a case's confirmation must show the same way: the case's own change when the whole suite
        moved (its change net of the common shift is then noise), else the change net of that shift."""
        s = self.cases[case]
        return s.change if self.suite is not None and self.suite.moved else s.tested_change

    def cases_to_confirm(self) -> list[str]:
        """Every case when the suite moved, else the cases that moved."""
        if self.suite is not None and self.suite.moved:
            return list(self.cases)
        return self.moved_cases


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _norm_ppf(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


def _norm_cdf(z: float) -> float:
    return statistics.NormalDist().cdf(z)


def _t_ppf(p: float, dof: float) -> float:
    """Student's t quantile with ``dof`` degrees of freedom (the normal one for infinitely many)."""
    if math.isinf(dof):
        return _norm_ppf(p)
    from scipy.stats import t

    return float(t.ppf(p, dof))


def _tail_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile, in standard deviations, of Student's t with ``dof`` (> 2) degrees of freedom."""
    return _t_ppf(p, dof) / math.sqrt(dof / (dof - 2.0)) if math.isfinite(dof) else _norm_ppf(p)


def _tail_sf(z: float, dof: float) -> float:
    """P(X > z standard deviations) for Student's t with ``dof`` (> 2) degrees of freedom."""
    if math.isinf(dof):
        return _norm_sf(z)
    from scipy.stats import t

    return float(t.sf(z * math.sqrt(dof / (dof - 2.0)), dof))


def bh_qvalues(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order (SciPy's false_discovery_control)."""
    if not pvalues:
        return []
    from scipy.stats import false_discovery_control

    return [float(q) for q in false_discovery_control(list(pvalues), method="bh")]


# ------------------------------------------------------------------------------------------------ decisions
@dataclass(frozen=True)
class CaseConfirmation:
    case: str
    change: Change
    log_mean: float
    se: float
    confirmed: bool
    direction: str  # slower | faster | none
    control: float | None  # mean paired log ratio of the control
    cycles: Change | None  # the change in cycles (time x clock), when clocks are known


@dataclass
class Decision:
    """What a run's judging ends with: its verdict, the step it opens or joins (if any) and the steps it fixes."""

    verdict: str
    message: str
    step: Step | None = None
    fixes: list[str] = field(default_factory=list)  # step ids whose status becomes fixed
    confirmation: dict[str, CaseConfirmation] = field(default_factory=dict)
    suite_confirmation: CaseConfirmation | None = None
    joined: bool = False  # ``step`` is the commit's confirmed step, which this run joins (not stored again)
    earlier: str | None = None  # a pass: the change lies at this parent (not judged yet) or before it


# Re-measures commit (B) against parent (A), interleaved, on the given cases: the runs labelled "A"/"B" in the
# order they were measured (ci.verdict.confirm's loop: the job runner on the GPU; the simulation's machine).
ConfirmRuns = Callable[[str, str, list[str]], list[tuple[str, RunFigures]]]


def _pct(x: float) -> str:
    return f"{x:+.1%}"


class Series:
    """The points (oldest first) and steps of one series, and the rules that judge a new run in it."""

    def __init__(self, points: Sequence[Point], steps: Sequence[Step], cfg: JudgeConfig | None = None) -> None:
        self.points = list(points)
        self.steps = list(steps)
        self.cfg = cfg or JudgeConfig()
        self._noise: Noise | None = None

    # -- structure
    def index_of(self, commit: str) -> int | None:
        for i, p in enumerate(self.points):
            if p.commit == commit:
                return i
        return None

    def level_start(self, before: int) -> int:
        """Index of the first point of the level that point ``before`` would join (or change)."""
        boundaries = {s.commit for s in self.steps if s.is_boundary}
        for i in range(min(before, len(self.points)) - 1, -1, -1):
            if self.points[i].commit in boundaries:
                return i
        return 0

    def level_points(self, commit: str) -> list[Point]:
        """The points ``commit`` is judged against: its level's, before it, the newest ``level_points``."""
        idx = self.index_of(commit)
        end = idx if idx is not None else len(self.points)
        start = self.level_start(end)
        pts = [p for p in self.points[start:end] if p.runs]
        return pts[-self.cfg.level_points :]

    def step_at(self, commit: str) -> Step | None:
        """The newest confirmed step (a boundary) whose culprit is ``commit``, or None."""
        return next((s for s in reversed(self.steps) if s.commit == commit and s.is_boundary), None)

    def cases(self) -> list[str]:
        seen: dict[str, None] = {}
        for p in self.points:
            for r in p.runs:
                seen.update(dict.fromkeys(r.kernel))
        return list(seen)

    def noise(self, extra_cases: Iterable[str] = ()) -> Noise:
        """The series' noise model (cached until a run or a step is added)."""
        extra = [c for c in extra_cases if self._noise is None or c not in self._noise.screen]
        if self._noise is None or extra:
            self._noise = estimate_noise(self.points, self.steps, [*self.cases(), *extra], self.cfg)
        return self._noise

    def _noise_without(self, under_test: Collection[str], cases: Iterable[str]) -> Noise:
        """The noise model to judge with: the runs of the commits under test already in the series (the one judged,
        re-measured earlier as an unjudged parent of a child judged first; an unjudged parent it was re-measured
        against) hold the change under test, and are no part of it. The cached model when there are none."""
        if all(p.commit not in under_test for p in self.points):
            return self.noise(cases)
        return estimate_noise(self.points, self.steps, [*self.cases(), *cases], self.cfg, judged=under_test)

    # -- screening
    def screen(self, run: RunFigures, noise: Noise | None = None, *, level: Sequence[Point] | None = None) -> Screen:
        """Compare one run with the level of its commit (``run.commit`` need not be a point yet), or ``level``."""
        cfg = self.cfg
        level = self.level_points(run.commit) if level is None else list(level)
        noise = noise or self.noise(run.kernel)
        out = Screen(run, [p.commit for p in level], {}, None)
        if not level:
            return out
        rows: list[tuple[str, float, float, float | None, float | None]] = []
        for case in run.kernel:
            x = run.log(case)
            vals = [v for v in (p.value(case) for p in level) if v is not None]
            if x is None or not vals:
                continue
            mu = statistics.median(vals)
            sigma = noise.sigma(case, cfg.prior_sigma)
            se = sigma * _se_factor(len(vals))
            ctrl = self._control_change(run, level, case)
            clk = self._clock_change(run, level, case)
            rows.append((case, x - mu, se, ctrl, clk))
        if not rows:
            return out
        # Take the run's common shift (machine drift, or a change of every case that the suite test sees) out
        # of the case tests: what is left is what moved this case alone.
        shift = _common_shift({c: d for c, d, _, _, _ in rows}, {c: se for c, _, se, _, _ in rows}, cfg)
        tested: list[tuple[float, float]] = []
        for case, d, se, _, _ in rows:
            if shift is None:
                tested.append((d, se))
            else:
                ratio = noise.sigma_adjusted(case, cfg.prior_sigma) / noise.sigma(case, cfg.prior_sigma)
                tested.append((d - shift, se * ratio))
        pvals = [2.0 * _tail_sf(abs(d) / se, cfg.tail_dof) for d, se in tested]
        qvals = bh_qvalues(pvals)
        k_case = cfg.k_case
        for (case, d, _, ctrl, clk), (td, tse), p, q in zip(rows, tested, pvals, qvals, strict=True):
            thr = max(cfg.log_min_effect, k_case * tse)
            moved = abs(td) >= thr and q <= cfg.fdr
            sigma = noise.sigma(case, cfg.prior_sigma)
            throttled = case in run.throttled
            adj = None if shift is None else td
            out.cases[case] = CaseScreen(case, d, tse, td / tse, p, q, thr, moved, sigma, ctrl, clk, throttled, adj)
        common = [c for c in out.cases if all(p.value(c) is not None for p in level)]
        if len(common) == len(run.kernel) and common:
            x = run.suite_log(common)
            vals = [v for v in (p.suite_value(common) for p in level) if v is not None]
            if x is not None and vals:
                d = x - statistics.median(vals)
                sigma = noise.sigma(SUITE, cfg.prior_sigma)
                se = sigma * _se_factor(len(vals))
                thr = max(cfg.log_min_effect, cfg.k * se)
                p = 2.0 * _norm_sf(abs(d) / se)
                ctrls = [out.cases[c].control_change for c in common]
                ctrl = statistics.fmean(ctrls) if all(v is not None for v in ctrls) else None  # type: ignore[arg-type]
                clocks = [out.cases[c].clock_change for c in common]
                clk = statistics.fmean(clocks) if all(v is not None for v in clocks) else None  # type: ignore[arg-type]
                out.suite = CaseScreen(SUITE, d, se, d / se, p, p, thr, abs(d) >= thr, sigma, ctrl, clk)
        moved = [out.cases[c] for c in out.moved_cases] + ([out.suite] if out.suite and out.suite.moved else [])
        out.drift = bool(moved) and all(self._shared(s.change, s.control_change) for s in moved)
        out.clock = bool(moved) and all(self._clock_explains(s) for s in moved)
        return out

    def _control_change(self, run: RunFigures, level: Sequence[Point], case: str) -> float | None:
        shifts = []
        for impl in CONTROL_IMPLS:
            x = run.control_log(impl, case)
            vals = [v for v in (p.control(impl, case) for p in level) if v is not None]
            if x is not None and vals:
                shifts.append(x - statistics.median(vals))
        return shared_shift(shifts)

    def _clock_change(self, run: RunFigures, level: Sequence[Point], case: str) -> float | None:
        f = run.clock_mhz.get(case)
        vals = [v for v in (p.clock(case) for p in level) if v is not None]
        if not f or not vals:
            return None
        return math.log(f / statistics.median(vals))

    def _shared(self, kernel: float, control: float | None) -> bool:
        """The control moved at least ``control_share`` of the kernel's change, the same way."""
        return control is not None and kernel != 0 and control / kernel >= self.cfg.control_share

    def _clock_explains(self, s: CaseScreen) -> bool:
        """Time changed but cycles (time x clock) did not: log t + log f within the threshold."""
        if s.clock_change is None or abs(s.clock_change) < math.log1p(self.cfg.clock_change):
            return False
        return abs(s.change + s.clock_change) < s.threshold

    # -- deciding
    def decide(
        self,
        screen: Screen,
        pairs: Sequence[tuple[RunFigures, RunFigures]] | None,
        *,
        step_id: str,
        parent: str | None,
        noise: Noise | None = None,
    ) -> Decision:
        """The verdict of a screened run, given its confirmation pairs (parent run, run) or None when it
        could not be confirmed (then the screen decides, and drift or clocks make it ambiguous)."""
        cfg = self.cfg
        run = screen.run
        if screen.baseline:
            return Decision("baseline", f"first run of its series: {len(run.kernel)} cases set the level")
        if not screen.moved:
            worst = max(screen.cases.values(), key=lambda s: abs(s.change), default=None)
            tail = f"; largest change {worst.case} {_pct(math.expm1(worst.change))}" if worst else ""
            return Decision("pass", f"within noise of its level ({len(screen.level_commits)} commits){tail}")
        noise = noise or self.noise(run.kernel)
        if pairs is None:
            return self._decide_unconfirmed(screen, step_id, parent)
        tested = screen.cases_to_confirm()
        pairs = clean_pairs(pairs, tested)
        if not pairs:
            step = self._step(step_id, run.commit, parent, "ambiguous", screen.direction, screen, {}, None, None)
            return Decision("ambiguous", "moved at screening; every re-measurement was throttled (NVML)", step)
        q = 1.0 - cfg.alpha_confirm / (2.0 * max(1, len(tested)))
        conf: dict[str, CaseConfirmation] = {}
        for case in tested:
            sigma = noise.sigma_pair(case, cfg.prior_sigma)
            zc = _t_ppf(q, noise.pair_dof(case))
            c = self._confirm_case(case, pairs, screen.screened_change(case), sigma, zc)
            if c is not None:
                conf[case] = c
        suite_conf = None
        if screen.suite is not None and screen.suite.moved and len(conf) == len(screen.cases):
            z1 = _t_ppf(1.0 - cfg.alpha_confirm / 2.0, noise.pair_dof(SUITE))
            suite_conf = self._confirm_suite(list(conf), pairs, screen.suite.change, noise, z1)
        confirmed = {c: x for c, x in conf.items() if x.confirmed}
        suite_ok = suite_conf is not None and suite_conf.confirmed
        if not confirmed and not suite_ok:
            why = " (the in-run baselines moved too: machine drift)" if screen.drift else ""
            worst = max(conf.values(), key=lambda x: abs(x.log_mean), default=None)
            detail = f"; re-measured {worst.case} {_pct(worst.change.change)}" if worst else ""
            if parent is not None and parent not in screen.level_commits and self._measures_like(screen, pairs, noise):
                msg = (
                    f"moved at screening, and so did its parent {parent[:12]} in {len(pairs)} interleaved pairs: "
                    f"the change lies in an earlier, not yet judged commit ({parent[:12]} or before), not in this "
                    f"one{detail}"
                )
                return Decision("pass", msg, confirmation=conf, suite_confirmation=suite_conf, earlier=parent)
            step = self._step(
                step_id, run.commit, parent, "not_reproduced", screen.direction, screen, conf, suite_conf, pairs
            )
            msg = f"not reproduced: moved at screening, not in {len(pairs)} interleaved pairs{why}{detail}"
            return Decision("not_reproduced", msg, step, confirmation=conf, suite_confirmation=suite_conf)
        if suite_ok:  # a change of the whole suite: every case that moved its way by half the minimum effect,
            assert suite_conf is not None  # its own interval (not Bonferroni's) excluding 0
            for c, x in conf.items():
                own = _t_ppf(1.0 - cfg.alpha_confirm / 2.0, noise.pair_dof(c)) * x.se
                if (x.log_mean > 0) == (suite_conf.log_mean > 0) and abs(x.log_mean) >= max(
                    0.5 * cfg.log_min_effect, own
                ):
                    confirmed.setdefault(c, x)
        slower = any(x.log_mean > 0 for x in confirmed.values() if x.confirmed) or (
            suite_ok and suite_conf is not None and suite_conf.log_mean > 0
        )
        decisive = [suite_conf] if suite_ok and suite_conf is not None else list(confirmed.values())
        drift = all(self._shared(x.log_mean, x.control) for x in decisive)
        clock = self._clock_explains_pairs(list(confirmed), pairs, confirmed)
        status, verdict = ("open", "regressed") if slower else ("improvement", "improved")
        if drift or clock:
            status, verdict = "ambiguous", "ambiguous"
        direction = "slower" if slower else "faster"
        step = self._step(step_id, run.commit, parent, status, direction, screen, confirmed, suite_conf, pairs)
        step.detected_by = "confirmed"
        msg = self._step_message(verdict, step, len(screen.cases), len(pairs))
        if drift:
            msg += "; the in-run baselines (cuBLAS/eager) moved as much: machine drift, not the commit"
        elif clock:
            msg += "; the SM clock moved with it: the change does not hold in cycles"
        fixes = self.fixes_by(step) if status in BOUNDARY_STATUSES else []
        if fixes:
            msg += f"; fixes the step(s) at {', '.join(self._step_commit(s)[:12] for s in fixes)}"
        return Decision(verdict, msg, step, fixes, conf, suite_conf)

    def _measures_like(self, screen: Screen, pairs: Sequence[tuple[RunFigures, RunFigures]], noise: Noise) -> bool:
        """The parent's runs of the pairs moved against the run's level the run's way (at least half of them),
        screened with the judging's noise model (the parent's own runs are no part of it: they hold the change)."""
        level = [self.points[i] for i in (self.index_of(c) for c in screen.level_commits) if i is not None]
        parents = [a for a, _ in pairs]
        same = [
            s
            for s in (self.screen(a, noise, level=level) for a in parents)
            if s.moved and s.direction == screen.direction
        ]
        return bool(parents) and 2 * len(same) >= len(parents)

    def _join(self, known: Step, screen: Screen, decision: Decision) -> Decision:
        """A run of the culprit of a confirmed step: the change is the commit's, judged once. When the run moved the
        step's way it joins that step (``Decision.joined``: nothing of the step is stored again, its status
        stands): regressed while the step is open, improved for an improvement, pass once it is acknowledged or
        fixed. Otherwise the screen's verdict stands (an unconfirmed change either way is ambiguous), without a
        step of its own."""
        at = known.commit[:12]
        status = known.status
        if status == "fixed":
            status = f"fixed by {self._step_commit(known.fixed_by)[:12]}" if known.fixed_by else "fixed"
        step = decision.step
        if step is None or not step.is_boundary or step.direction != known.direction:
            verdict = decision.verdict if decision.verdict in ("pass", "ambiguous") else "ambiguous"
            msg = f"{decision.message}; a run of the culprit of the step at {at} ({status}), which stands"
            return Decision(verdict, msg, confirmation=decision.confirmation)
        s = screen.suite or max(screen.cases.values(), key=lambda x: abs(x.change))  # it moved: there are cases
        measured = f"{'suite' if s.case == SUITE else s.case} {_pct(math.expm1(s.change))}"
        verdict = {"open": "regressed", "improvement": "improved"}.get(known.status, "pass")
        msg = (
            f"{verdict}: a run of the culprit of the step at {at} ({status}, {len(known.cases)} cases); it measures "
            f"{measured} against the level before the step, as the step said: it joins that step"
        )
        return Decision(verdict, msg, known, confirmation=decision.confirmation, joined=True)

    def _step_commit(self, step_id: str) -> str:
        return next((s.commit for s in self.steps if s.step_id == step_id), step_id)

    def _decide_unconfirmed(self, screen: Screen, step_id: str, parent: str | None) -> Decision:
        moved = {c: screen.cases[c] for c in screen.moved_cases}
        if screen.suite is not None and screen.suite.moved and not moved:
            moved = {c: s for c, s in screen.cases.items() if (s.change > 0) == (screen.suite.change > 0)}
        conf = {
            c: CaseConfirmation(
                c,
                Change.from_log(s.change, s.threshold),
                s.change,
                s.se,
                True,
                "slower" if s.change > 0 else "faster",
                s.control_change,
                None,
            )
            for c, s in moved.items()
        }
        slower = any(x.direction == "slower" for x in conf.values())
        status, verdict = ("open", "regressed") if slower else ("improvement", "improved")
        if screen.drift or screen.clock:
            status, verdict = "ambiguous", "ambiguous"
        direction = "slower" if slower else "faster"
        step = self._step(step_id, screen.run.commit, parent, status, direction, screen, conf, None, None)
        step.detected_by = "screen"
        msg = self._step_message(verdict, step, len(screen.cases), 0) + " (not re-measured)"
        if screen.drift:
            msg += "; the in-run baselines moved as much: machine drift"
        elif screen.clock:
            msg += "; the SM clock moved with it: the change does not hold in cycles"
        fixes = self.fixes_by(step) if status in BOUNDARY_STATUSES else []
        return Decision(verdict, msg, step, fixes, conf)

    def _clock_explains_pairs(
        self,
        cases: list[str],
        pairs: Sequence[tuple[RunFigures, RunFigures]],
        conf: Mapping[str, CaseConfirmation],
    ) -> bool:
        """The SM clock differed between the pairs' runs and the change does not hold in cycles."""
        moved_clock = False
        for a, b in pairs:
            for c in cases:
                fa, fb = a.clock_mhz.get(c), b.clock_mhz.get(c)
                if fa and fb and abs(math.log(fb / fa)) >= math.log1p(self.cfg.clock_change):
                    moved_clock = True
        if not moved_clock:
            return False
        cyc = [conf[c].cycles for c in cases if conf[c].cycles is not None]
        return bool(cyc) and all(x.lo <= 0.0 <= x.hi for x in cyc)  # type: ignore[union-attr]

    def _confirm_case(
        self, case: str, pairs: Sequence[tuple[RunFigures, RunFigures]], screened: float, sigma_pair: float, zc: float
    ) -> CaseConfirmation | None:
        ratios, controls, cycles = [], [], []
        for a, b in pairs:
            la, lb = a.log(case), b.log(case)
            if la is None or lb is None:
                continue
            ratios.append(lb - la)
            ctl = control_shift(a, b, case)
            if ctl is not None:
                controls.append(ctl)
            fa, fb = a.clock_mhz.get(case), b.clock_mhz.get(case)
            if fa and fb:
                cycles.append(lb - la + math.log(fb / fa))
        if not ratios:
            return None
        return self._confirmation(case, ratios, controls, cycles, screened, math.sqrt(2.0) * sigma_pair, zc)

    def _confirm_suite(
        self,
        cases: list[str],
        pairs: Sequence[tuple[RunFigures, RunFigures]],
        screened: float,
        noise: Noise,
        zc: float,
    ) -> CaseConfirmation | None:
        ratios, controls = [], []
        for a, b in pairs:
            la, lb = a.suite_log(cases), b.suite_log(cases)
            if la is None or lb is None:
                continue
            ratios.append(lb - la)
            ctl = [x for x in (control_shift(a, b, c) for c in cases) if x is not None]
            if len(ctl) == len(cases):
                controls.append(statistics.fmean(ctl))
        if not ratios:
            return None
        sigma = math.sqrt(2.0) * noise.sigma_pair(SUITE, self.cfg.prior_sigma)
        return self._confirmation(SUITE, ratios, controls, [], screened, sigma, zc)

    def _confirmation(
        self,
        case: str,
        ratios: list[float],
        controls: list[float],
        cycles: list[float],
        screened: float,
        sigma_pair: float,
        zc: float,
    ) -> CaseConfirmation:
        m = len(ratios)
        mean = statistics.fmean(ratios)
        spread = sigma_pair
        if m >= 3:  # enough pairs for their own spread to count (never below the model's)
            spread = max(sigma_pair, statistics.stdev(ratios))
        se = spread / math.sqrt(m)
        half = zc * se
        same_way = (mean > 0) == (screened > 0)
        confirmed = same_way and abs(mean) > half and abs(mean) >= 0.5 * self.cfg.log_min_effect
        direction = ("slower" if mean > 0 else "faster") if confirmed else "none"
        cyc = None
        if len(cycles) == m:
            cm = statistics.fmean(cycles)
            cyc = Change.from_log(cm, half)
        ctrl = statistics.fmean(controls) if len(controls) == m else None
        return CaseConfirmation(case, Change.from_log(mean, half), mean, se, confirmed, direction, ctrl, cyc)

    def _step(
        self,
        step_id: str,
        commit: str,
        parent: str | None,
        status: str,
        direction: str,
        screen: Screen,
        conf: Mapping[str, CaseConfirmation],
        suite: CaseConfirmation | None,
        pairs: Sequence[tuple[RunFigures, RunFigures]] | None,
    ) -> Step:
        """A step at ``commit`` holding ``conf``'s cases, the level before (median of the level's points) and
        after (mean of the commit's runs, the screened one and the confirmation's) per case."""
        run = screen.run
        level = self.level_points(run.commit)
        # a parent that is no point of the level (not measured before): the level before is its re-measurement
        gap = [a for a, _ in pairs or []] if parent is not None and parent not in screen.level_commits else []
        before_log = {}
        for c in conf:
            if gap:
                vals = [x for x in (a.log(c) for a in gap) if x is not None]
                if vals:
                    before_log[c] = statistics.fmean(vals)
                continue
            vals = [v for v in (p.value(c) for p in level) if v is not None]
            if vals:
                before_log[c] = statistics.median(vals)
        after_log: dict[str, float] = {}
        for c in conf:
            logs = [x for x in (r.log(c) for r in [run, *(b for _, b in (pairs or []))]) if x is not None]
            if logs:
                after_log[c] = statistics.fmean(logs)
        suite_change = suite.change if suite is not None else None
        if suite_change is None and screen.suite is not None:
            suite_change = Change.from_log(screen.suite.change, screen.suite.threshold)
        return Step(
            step_id,
            commit,
            parent,
            status,
            direction,
            {c: x.change for c, x in conf.items()},
            suite_change,
            before_log=before_log,
            after_log=after_log,
        )

    def _step_message(self, verdict: str, step: Step, n_cases: int, n_pairs: int) -> str:
        moved = [(c, ch) for c, ch in step.cases.items()]
        worst = max(moved, key=lambda t: abs(t[1].change), default=None)
        parts = [f"{verdict}: {len(moved)} of {n_cases} cases moved"]
        if step.suite is not None:
            parts.append(f"suite {_pct(step.suite.change)} [{_pct(step.suite.lo)}, {_pct(step.suite.hi)}]")
        if worst is not None:
            c, ch = worst
            parts.append(f"worst {c} {_pct(ch.change)} [{_pct(ch.lo)}, {_pct(ch.hi)}]")
        if n_pairs:
            parts.append(f"confirmed in {n_pairs} interleaved pairs against {(step.parent or '?')[:12]}")
        return "; ".join(parts)

    # -- lifecycle
    def fixes_by(self, new: Step) -> list[str]:
        """Open steps earlier in the ancestry whose every case ``new``'s level brings back to where it was or beyond.

        A slowdown is fixed when the new level is at or below its old level within the threshold (a revert that
        overshoots, or undoes two stacked slowdowns at once, fixes it too); a faster step symmetrically."""
        out = []
        noise = self.noise()
        for old in self.steps:
            if old.status != "open" or old.commit == new.commit or old.direction == new.direction:
                continue
            if not old.before_log:
                continue
            if self.index_of(old.commit) is None:
                continue
            back = True
            way = 1.0 if old.direction == "slower" else -1.0
            for case, level_before in old.before_log.items():
                after = new.after_log.get(case)
                if after is None:
                    after = self._current_level(case, new)
                if after is None:
                    back = False
                    break
                sigma = noise.sigma(case, self.cfg.prior_sigma)
                if way * (after - level_before) >= max(self.cfg.log_min_effect, self.cfg.k * sigma):
                    back = False
                    break
            if back:
                out.append(old.step_id)
        return out

    def _current_level(self, case: str, new: Step) -> float | None:
        idx = self.index_of(new.commit)
        if idx is None:
            return None
        vals = [v for v in (p.value(case) for p in self.points[self.level_start(idx) : idx + 1]) if v is not None]
        return statistics.median(vals) if vals else None

    # -- late steps
    def late_candidate(self, noise: Noise | None = None) -> tuple[str, str, list[str], float] | None:
        """(culprit commit, its parent, cases, log change) of the strongest step inside the newest level that
        screening missed, or None. A commit is proposed once by this search (one whose screened step did not
        reproduce may be tried once more here, with the evidence of the commits since)."""
        import numpy as np
        import ruptures as rpt

        cfg = self.cfg
        start = self.level_start(len(self.points))
        seg = [p for p in self.points[start:] if p.runs]
        if len(seg) < 2 * cfg.late_min_points:
            return None
        noise = noise or self.noise()
        tried = {s.commit for s in self.steps if s.is_boundary or s.detected_by == "late" or s.status == "pending"}
        cases = self.cases()
        best: tuple[float, int, str, float] | None = None
        for case in [SUITE, *cases]:
            ys = [_figure(p.first, case, cases) for p in seg]
            keep = [i for i, v in enumerate(ys) if v is not None]  # a throttled or missing point is left out
            n = len(keep)
            if n < 2 * cfg.late_min_points:
                continue
            y = np.asarray([ys[i] for i in keep], dtype=float)
            bkps = rpt.Binseg(model="l2", min_size=cfg.late_min_points, jump=1).fit(y.reshape(-1, 1))
            j = bkps.predict(n_bkps=1)[0]  # n >= 2 * min_size: a split exists
            if j >= n or j < cfg.late_min_points:
                continue
            d = float(np.median(y[j:]) - np.median(y[:j]))
            sigma = noise.sigma_settled(case, cfg.prior_sigma)
            se = sigma * math.sqrt((math.pi / 2.0) * (1.0 / j + 1.0 / (n - j)))
            z = abs(d) / se
            at = keep[j]  # the first point seen at the new level
            if (
                abs(d) < math.log1p(max(cfg.min_effect, cfg.late_min_effect))
                or z < cfg.k_late
                or seg[at].commit in tried
            ):
                continue
            if best is None or z > best[0]:
                best = (z, at, case, d)
        if best is None:
            return None
        _, at, case, d = best
        moved = cases if case == SUITE else [case]
        return seg[at].commit, seg[at - 1].commit, moved, d

    def decide_late(
        self,
        commit: str,
        parent: str,
        cases: list[str],
        change: float,
        pairs: Sequence[tuple[RunFigures, RunFigures]],
        *,
        step_id: str,
        noise: Noise | None = None,
    ) -> Decision:
        """Confirm a late candidate (culprit against its parent, interleaved) and make its step."""
        idx = self.index_of(commit)
        run = self.points[idx].first if idx is not None else pairs[0][1]
        noise = noise or self.noise()
        cfg = self.cfg
        fake = Screen(run, [p.commit for p in self.level_points(commit)] or ["late"], {}, None)
        for c in cases:
            sigma = noise.sigma(c, cfg.prior_sigma)
            fake.cases[c] = CaseScreen(c, change, sigma, change / sigma, 0.0, 0.0, cfg.log_min_effect, True, sigma)
        if len(cases) > 1:
            sigma = noise.sigma(SUITE, cfg.prior_sigma)
            fake.suite = CaseScreen(SUITE, change, sigma, change / sigma, 0.0, 0.0, cfg.log_min_effect, True, sigma)
        d = self.decide(fake, pairs, step_id=step_id, parent=parent, noise=noise)
        if d.step is not None:
            d.step.detected_by = "late"
            d.message = f"late step (found {len(self.points) - (idx or 0) - 1} commits later): {d.message}"
        return d

    # -- the flow (ci.verdict.apply around stored runs, scripts/simulate_verdicts.py around simulated ones)
    def judge(
        self,
        own: RunFigures,
        confirm: ConfirmRuns | None,
        *,
        step_id: str,
        on_suspect: Callable[[Screen, Step], None] | None = None,
        parent: str | None = None,
    ) -> tuple[Screen, Decision, Noise]:
        """Judge a new run: screen it against its level; when it moved, re-measure it against its parent
        (``parent``: its git first parent; default the newest commit of its level; when no pair of the parent
        came back, a broken parent say, against that newest commit) with ``confirm`` (its runs join the series)
        and decide with those pairs; then the run and the decision's step join the series. A run of a commit
        that already has a confirmed step is not re-measured: it joins that step (``_join``). ``on_suspect``
        gets the pending step before the re-measurement (the runner stores it, so a watcher sees "suspect"
        meanwhile)."""
        noise = self._noise_without({own.commit}, own.kernel)
        screen = self.screen(own, noise)
        newest = screen.level_commits[-1] if screen.level_commits else None
        parent = parent or newest
        known = self.step_at(own.commit)
        pairs = None
        if screen.moved and not screen.baseline and confirm is not None and parent is not None and known is None:
            if on_suspect is not None:
                on_suspect(screen, Step(step_id, own.commit, parent, "pending", screen.direction))
            runs = confirm(parent, own.commit, screen.cases_to_confirm())
            if not pair_up(runs) and newest is not None and parent != newest:
                for _, r in runs:  # what came back of the parent stays in the series
                    self.add_run(r, before=own.commit)
                parent = newest
                runs = confirm(parent, own.commit, screen.cases_to_confirm())
            for _, r in runs:
                self.add_run(r, before=own.commit)
            pairs = pair_up(runs)
            under_test = {own.commit} | ({parent} if parent not in screen.level_commits else set())
            noise = self._noise_without(under_test, own.kernel)
        decision = self.decide(screen, pairs, step_id=step_id, parent=parent, noise=noise)
        if known is not None:
            decision = self._join(known, screen, decision)
        self.add_run(own)
        self.apply(decision)
        return screen, decision, noise

    def late(self, confirm: ConfirmRuns, *, step_id: Callable[[str], str]) -> Decision | None:
        """Look for a step inside the newest level that screening missed (``late_candidate``); re-measure the
        culprit against its parent and decide; the decision joins the series. None when there is no candidate.
        ``step_id(culprit)`` names the step."""
        cand = self.late_candidate()
        if cand is None:
            return None
        culprit, parent, cases, change = cand
        runs = confirm(parent, culprit, cases)
        for _, r in runs:
            self.add_run(r)
        d = self.decide_late(culprit, parent, cases, change, pair_up(runs), step_id=step_id(culprit))
        self.apply(d)
        return d

    # -- applying
    def apply(self, decision: Decision) -> None:
        """Record a decision's step and fixes in this series (the storage layer does the same in tables)."""
        if decision.step is not None:
            self.steps = [s for s in self.steps if s.step_id != decision.step.step_id]
            self.steps.append(decision.step)
        self._noise = None
        for sid in decision.fixes:
            self.steps = [
                replace(s, status="fixed", fixed_by=decision.step.step_id if decision.step else None)
                if s.step_id == sid
                else s
                for s in self.steps
            ]

    def add_run(self, run: RunFigures, *, before: str | None = None) -> None:
        """Add a run to its commit's point; a new point goes last, or right before ``before``'s point."""
        self._noise = None
        idx = self.index_of(run.commit)
        if idx is None:
            at = self.index_of(before) if before is not None else None
            self.points.insert(len(self.points) if at is None else at, Point(run.commit, [run]))
        else:
            self.points[idx].runs.append(run)


def clean_pairs(
    pairs: Sequence[tuple[RunFigures, RunFigures]], cases: Iterable[str]
) -> list[tuple[RunFigures, RunFigures]]:
    """The pairs neither of whose runs NVML saw throttled on one of ``cases``."""
    wanted = set(cases)
    return [(a, b) for a, b in pairs if not (a.throttled & wanted) and not (b.throttled & wanted)]


def interleave(pairs: int) -> list[str]:
    """The order of a confirmation's runs: A B B A A B B A ... (A the parent, B the commit)."""
    out: list[str] = []
    for i in range(pairs):
        out += ["A", "B"] if i % 2 == 0 else ["B", "A"]
    return out


def pair_up(runs: Sequence[tuple[str, RunFigures]]) -> list[tuple[RunFigures, RunFigures]]:
    """Pairs (A, B) from a confirmation's runs in their order (labels "A"/"B"), each pair adjacent."""
    out = []
    for i in range(0, len(runs) - 1, 2):
        (la, ra), (lb, rb) = runs[i], runs[i + 1]
        if {la, lb} != {"A", "B"}:
            continue
        out.append((ra, rb) if la == "A" else (rb, ra))
    return out
