"""How good are the verdicts? A GPU-free simulation of the judging code with planted steps.

    python scripts/simulate_verdicts.py [--series 24] [--commits 150] [--seed 1] [--write-doc]

The noise model is fitted to the H200's raw figures under ``docs/h200/``:

- per-session medians of the two in-run baselines (cuBLAS, eager; CUPTI span) from six ``bench*.log``
  runs (``FIT_SESSIONS``), taken on different machines: they did not change between those sessions, so their spread
  is the between-run noise of a case. It is split into a drift shared by every case of a session (the
  median over cases of a session's deviation) and an independent part per case (pooled over the cases of
  one M);
- the A/A pair ``r1.json``/``r2.json`` (one commit measured twice back to back): the spread of runs of one
  commit close in time, which an interleaved confirmation sees.

Each simulated run draws, per case, level + drift (an AR(1) process over runs, so runs close in time share
it) + independent noise (Student t with 5 degrees of freedom: heavier tails than Gaussian), with one run in
a hundred throttled (every case and the in-run baselines slower by 5-15 %, the SM clock lower by as much).
Each series gets planted steps (2, 3, 5 and 10 %, on the whole suite or on one case; 1 and 2 % on one
low-noise case, whose fitted between-run spread is at most ``QUIET_SPREAD``; slower or faster, half of the
slowdowns reverted a few commits later) among neutral commits; a run that moves at screening is
confirmed with interleaved pairs drawn the same way; late steps are looked for after every commit. Every
decision is made by ``ci.verdict.rules`` through ``Series.judge`` and ``Series.late``, the flow
``ci.verdict.apply`` runs on the runner's stored runs, with its default ``JudgeConfig``; each commit's runs carry
its job id, as stored ones do.

Reported: false alarms per 100 neutral commits (a confirmed step on a commit that changed nothing), at the
suite level (8 or more cases, or the suite) and the case level (any case), commits blamed within ten
commits after a real step although they changed nothing, the share of planted steps flagged on their own
commit (at once, or later by the late search), steps blamed on the wrong commit, and the confirmation cost.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ci.verdict.confirm import interleaved_runs  # noqa: E402
from ci.verdict.rules import ConfirmRuns, JudgeConfig, RunFigures, Series  # noqa: E402
from problem.workload import CASES  # noqa: E402
from storage.schema import BOUNDARY_STATUSES  # noqa: E402

DOC = ROOT / "docs" / "verdicts.md"
BEGIN, END = "<!-- simulation:begin -->", "<!-- simulation:end -->"
CASE_NAMES = [c.name for c in CASES]
# The H200 sessions the noise model is fitted to (fixed, so the table below is reproducible).
FIT_SESSIONS = (
    "bench.log",
    "bench_run_a.log",
    "bench_run_b.log",
    "bench_run_c.log",
    "bench_run_d.log",
    "bench_run_e.log",
)
M_OF = {c.name: c.m for c in CASES}
QUIET_SPREAD = 0.0025  # a case whose fitted between-run spread is at most this is a low-noise case (M = 2048)
KIND_TEXT = {
    "case": "one case",
    "quiet": f"one low-noise case (spread <= {QUIET_SPREAD:.2%})",
    "suite": "the whole suite",
}


# ------------------------------------------------------------------------------------------------ the fit
@dataclass
class NoiseFit:
    sigma_case: dict[str, float]  # independent between-run spread per case (log)
    sigma_drift: float  # spread of the drift all cases of a session share (log)
    sigma_aa: dict[str, float]  # spread of back-to-back runs of one commit, per case (log)
    sessions: int
    source: str = "docs/h200"

    def summary(self) -> str:
        by_m: dict[int, list[float]] = defaultdict(list)
        for c, s in self.sigma_case.items():
            by_m[M_OF[c]].append(s)
        parts = [f"M={m}: {statistics.fmean(v):.2%}" for m, v in sorted(by_m.items())]
        aa = statistics.fmean(self.sigma_aa.values())
        return (
            f"independent between-run spread per case ({', '.join(parts)}); shared drift {self.sigma_drift:.2%}; "
            f"back-to-back A/A spread {aa:.2%} (mean over cases); {self.sessions} sessions"
        )


def _bench_rows(path: str) -> dict[str, dict[str, float]]:
    out = {}
    pat = re.compile(r"(B\d+_S\d+)\s+\d+\s+y\s+\|\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
    for line in Path(path).read_text().splitlines():
        m = pat.match(line)
        if m:
            out[m.group(1)] = {"kernel": float(m.group(2)), "eager": float(m.group(3)), "cublas": float(m.group(4))}
    return out


def _doc_medians(path: Path) -> dict[str, dict[str, float]]:
    doc = json.loads(path.read_text())
    out: dict[str, dict[str, float]] = {}
    for c in doc["cases"]:
        for t in c["timings"]:
            if t["protocol"] == doc["protocol"]:
                out.setdefault(c["case"], {})[t["impl"]] = statistics.median(t["samples_us"])
    return out


def fit_noise(root: Path = ROOT) -> NoiseFit:
    sessions = [_bench_rows(str(root / "docs/h200" / name)) for name in FIT_SESSIONS]
    sessions = [s for s in sessions if len(s) == len(CASE_NAMES)]
    logs = {
        (i, c, impl): math.log(s[c][impl])
        for i, s in enumerate(sessions)
        for c in CASE_NAMES
        for impl in ("eager", "cublas")
    }
    mean = {
        (c, impl): statistics.fmean(logs[(i, c, impl)] for i in range(len(sessions)))
        for c in CASE_NAMES
        for impl in ("eager", "cublas")
    }
    drift = [
        statistics.median(logs[(i, c, impl)] - mean[(c, impl)] for c in CASE_NAMES for impl in ("eager", "cublas"))
        for i in range(len(sessions))
    ]
    resid: dict[int, list[float]] = defaultdict(list)
    for (i, c, impl), v in logs.items():
        resid[M_OF[c]].append(v - mean[(c, impl)] - drift[i])
    n = len(sessions)
    # Residuals about a mean of n sessions have n-1 of n degrees of freedom.
    sigma_m = {m: math.sqrt(sum(r * r for r in rs) / (len(rs) * (n - 1) / n)) for m, rs in resid.items()}
    sigma_drift = statistics.stdev(drift)
    a, b = _doc_medians(root / "docs/h200/r1.json"), _doc_medians(root / "docs/h200/r2.json")
    aa_m: dict[int, list[float]] = defaultdict(list)
    for c in CASE_NAMES:
        for impl in ("kernel", "eager", "cublas"):
            aa_m[M_OF[c]].append(math.log(b[c][impl] / a[c][impl]))
    sigma_aa_m = {m: math.sqrt(statistics.fmean(d * d for d in ds) / 2.0) for m, ds in aa_m.items()}
    return NoiseFit(
        {c: sigma_m[M_OF[c]] for c in CASE_NAMES}, sigma_drift, {c: sigma_aa_m[M_OF[c]] for c in CASE_NAMES}, n
    )


# ------------------------------------------------------------------------------------------------ the machine
class Machine:
    """Draws run figures on one GPU host over time.

    log median = level + drift + offset[case] + e: ``drift`` (shared by every case and the in-run baselines,
    cuBLAS and eager, as the runner times both) and ``offset`` (one per case and timed implementation) are AR(1)
    processes over successive runs with the fitted between-session
    spreads as their stationary spreads, so runs close in time share them (as an interleaved confirmation's
    do) while runs far apart do not; ``e`` is each run's own noise (Student t, 5 dof, with the back-to-back
    A/A spread). One run in a hundred is throttled: everything 5-15 % slower, the SM clock lower as much."""

    def __init__(self, fit: NoiseFit, rng: random.Random, *, rho: float = 0.9, throttle_p: float = 0.01) -> None:
        self.fit, self.rng, self.rho, self.throttle_p = fit, rng, rho, throttle_p
        self.drift = 0.0
        self.offset = dict.fromkeys(CASE_NAMES, 0.0)
        self.ctrl_offset = {impl: dict.fromkeys(CASE_NAMES, 0.0) for impl in ("cublas", "eager")}
        self.count = 0
        self.base_us = {c: 1.6 * max(4.0, M_OF[c] * 0.017) for c in CASE_NAMES}
        self.ctrl_us = {
            "cublas": {c: 1.05 * v for c, v in self.base_us.items()},
            "eager": {c: 1.4 * v for c, v in self.base_us.items()},
        }

    def _t(self, scale: float) -> float:
        """Student t with 5 degrees of freedom, scaled to standard deviation ``scale``."""
        x = self.rng.gauss(0, 1) / math.sqrt(self.rng.gammavariate(2.5, 2.0) / 5.0)
        return x * scale / math.sqrt(5.0 / 3.0)

    def _ar(self, x: float, sigma: float) -> float:
        return self.rho * x + math.sqrt(1 - self.rho**2) * self.rng.gauss(0, sigma)

    def tick(self) -> None:
        """One run's time passes: drift and offsets move."""
        self.drift = self._ar(self.drift, self.fit.sigma_drift)
        for c in CASE_NAMES:
            indep = math.sqrt(max(self.fit.sigma_case[c] ** 2 - self.fit.sigma_aa[c] ** 2, 0.0))
            self.offset[c] = self._ar(self.offset[c], indep)
            for offsets in self.ctrl_offset.values():
                offsets[c] = self._ar(offsets[c], indep)

    def run(
        self,
        commit: str,
        level: dict[str, float],
        *,
        purpose: str = "measure",
        job: int | None = None,
        cases: list[str] | None = None,
    ) -> RunFigures:
        self.tick()
        self.count += 1
        throttle = self.rng.random() < self.throttle_p
        slow = math.log1p(self.rng.uniform(0.05, 0.15)) if throttle else 0.0
        kernel, clock = {}, {}
        ctrl: dict[str, dict[str, float]] = {impl: {} for impl in self.ctrl_us}
        for c in cases or CASE_NAMES:
            aa = self.fit.sigma_aa[c]
            kernel[c] = self.base_us[c] * math.exp(level.get(c, 0.0) + self.drift + self.offset[c] + self._t(aa) + slow)
            for impl, us in self.ctrl_us.items():
                ctrl[impl][c] = us[c] * math.exp(self.drift + self.ctrl_offset[impl][c] + self._t(aa) + slow)
            clock[c] = 1980.0 * math.exp(-slow)
        return RunFigures(
            f"r{self.count}",
            commit,
            kernel,
            ctrl,
            clock,
            frozenset(kernel) if throttle else frozenset(),
            purpose,
            job,
        )


# ------------------------------------------------------------------------------------------------ a series
@dataclass
class Planted:
    index: int
    cases: list[str]  # the cases it moves
    size: float  # relative change (e.g. 0.05 = 5 % slower, -0.05 faster)
    kind: str  # suite | case | quiet (one low-noise case)
    revert_of: int | None = None

    @property
    def magnitude(self) -> float:
        return abs(self.size)


@dataclass
class Outcome:
    planted: list[Planted] = field(default_factory=list)
    steps: list[tuple[int, str, str, list[str], str]] = field(default_factory=list)  # index, status, by, cases, dir
    neutral: int = 0
    suspects: int = 0
    confirm_runs: int = 0
    late_tries: int = 0
    runs: int = 0


def quiet_cases(fit: NoiseFit) -> list[str]:
    """The low-noise cases: fitted between-run spread at most ``QUIET_SPREAD``."""
    return [c for c in CASE_NAMES if fit.sigma_case[c] <= QUIET_SPREAD]


def plant(n: int, rng: random.Random, quiet: list[str]) -> list[Planted]:
    """Steps among neutral commits: 2-10 % on the whole suite or on one case, 1-2 % on one low-noise case."""
    out: list[Planted] = []
    i = 12
    while i < n - 12:
        kind = rng.choice(["suite", "case", "quiet"] if quiet else ["suite", "case"])
        size = rng.choice([0.01, 0.02] if kind == "quiet" else [0.02, 0.03, 0.05, 0.10])
        cases = list(CASE_NAMES) if kind == "suite" else [rng.choice(quiet if kind == "quiet" else CASE_NAMES)]
        sign = 1.0 if rng.random() < 0.6 else -1.0
        out.append(Planted(i, cases, sign * size, kind))
        if sign > 0 and rng.random() < 0.5 and i + 16 < n - 12:
            j = i + rng.randint(6, 12)
            out.append(Planted(j, cases, -sign * size, kind, revert_of=i))
            i = j
        i += rng.randint(10, 16)
    return out


def confirmer(machine: Machine, levels: list[dict[str, float]], cfg: JudgeConfig, job: list[int]) -> ConfirmRuns:
    """Interleaved runs of a commit (B) and its parent (A), in the current job, until ``cfg.pairs`` pairs are
    unthrottled (at most two pairs more): the job runner's loop (``ci.verdict.confirm.interleaved_runs``), on
    the simulated machine."""

    def runs(parent: str, commit: str, cases: list[str]) -> list[tuple[str, RunFigures]]:
        def measure(_label: str, sha: str) -> RunFigures:
            j = int(sha[1:])
            return machine.run(f"c{j}", levels[j], purpose="confirm", job=job[0], cases=cases)

        return interleaved_runs(parent, commit, cases, pairs=cfg.pairs, run=measure, figures=lambda fig: fig)

    return runs


def simulate_series(fit: NoiseFit, n: int, rng: random.Random, cfg: JudgeConfig) -> Outcome:
    """One series through ``Series.judge`` and ``Series.late``: the flow ``ci.verdict.apply`` runs on stored runs."""
    machine = Machine(fit, rng)
    planted = plant(n, rng, quiet_cases(fit))
    at = {p.index: p for p in planted}
    level: dict[str, float] = dict.fromkeys(CASE_NAMES, 0.0)
    levels: list[dict[str, float]] = []
    for i in range(n):
        if i in at:
            p = at[i]
            for c in p.cases:
                level[c] += math.log1p(p.size) if p.revert_of is None else -math.log1p(at[p.revert_of].size)
        levels.append(dict(level))
    series = Series([], [], cfg)
    out = Outcome(planted)
    job = [0]  # one job per commit: its run, its confirmation, a late search's confirmation
    measured = confirmer(machine, levels, cfg, job)

    def counted(parent: str, commit: str, cases: list[str]) -> list[tuple[str, RunFigures]]:
        runs = measured(parent, commit, cases)
        out.confirm_runs += len(runs)
        return runs

    def suspect(_screen: object, _step: object) -> None:
        out.suspects += 1

    for i in range(n):
        job[0] = i + 1
        run = machine.run(f"c{i}", levels[i], job=job[0])
        out.runs += 1
        _, decision, _ = series.judge(run, counted, step_id=f"s{i}", on_suspect=suspect)
        if decision.step is not None:
            s = decision.step
            out.steps.append((i, s.status, s.detected_by, list(s.cases), s.direction))
        late = series.late(counted, step_id=lambda culprit: f"l{culprit}")
        if late is not None:
            out.late_tries += 1
            if late.step is not None:
                s = late.step
                out.steps.append((int(s.commit[1:]), s.status, s.detected_by, list(s.cases), s.direction))
    out.neutral = n - len(planted)
    return out


# ------------------------------------------------------------------------------------------------ scoring
CONFIRMED = BOUNDARY_STATUSES  # the steps judging stands by


def score(outcomes: list[Outcome]) -> dict:
    neutral = sum(o.neutral for o in outcomes)
    commits = sum(o.neutral + len(o.planted) for o in outcomes)
    fa_suite = fa_case = blamed_after = wrong = stray = ambiguous_neutral = 0
    det: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])  # (kind, size) -> [n, at once, late]
    for o in outcomes:
        planted_at = {p.index: p for p in o.planted}
        steps_at: dict[int, list[tuple[str, str, list[str], str]]] = defaultdict(list)
        for idx, status, by, cases, direction in o.steps:
            steps_at[idx].append((status, by, cases, direction))
        real = sorted(planted_at)
        for idx, lst in steps_at.items():
            for status, _by, cases, _d in lst:
                if status not in CONFIRMED:
                    if status == "ambiguous" and idx not in planted_at:
                        ambiguous_neutral += 1
                    continue
                if idx in planted_at:
                    stray += len(set(cases) - set(planted_at[idx].cases))
                    continue
                fa_case += 1
                if len(cases) >= 8:
                    fa_suite += 1
                # blamed for an earlier change: the same way as a real step of the ten commits before, on one
                # of the cases it moved (what pooling across a step does)
                for r in real:
                    p = planted_at[r]
                    same_way = (_d == "slower") == (p.size > 0)
                    if r < idx <= r + 10 and same_way and set(cases) & set(p.cases):
                        blamed_after += 1
                        break
                # a real step blamed on a neighbour: within 3 commits of it, the same way, on one of its cases
                for r in real:
                    p = planted_at[r]
                    if 0 < abs(idx - r) <= 3 and (_d == "slower") == (p.size > 0) and set(cases) & set(p.cases):
                        wrong += 1
                        break
        for p in o.planted:
            size = f"{p.magnitude:.0%}"
            key = (p.kind, size)
            det[key][0] += 1
            hits = [
                (st_, by)
                for st_, by, cases, d in steps_at.get(p.index, [])
                if st_ in CONFIRMED and (d == "slower") == (p.size > 0) and (set(p.cases) & set(cases))
            ]
            if any(by != "late" for _, by in hits):
                det[key][1] += 1
            elif hits:
                det[key][2] += 1
    rows = []
    order = {"case": 0, "quiet": 1, "suite": 2}
    for (kind, size), (n, once, late) in sorted(det.items(), key=lambda kv: (order[kv[0][0]], float(kv[0][1][:-1]))):
        rows.append({"kind": kind, "size": size, "planted": n, "at_once": once / n, "with_late": (once + late) / n})
    suspects = sum(o.suspects for o in outcomes)
    return {
        "commits": commits,
        "neutral": neutral,
        "false_alarms_suite_per_100": 100.0 * fa_suite / neutral,
        "false_alarms_case_per_100": 100.0 * fa_case / neutral,
        "blamed_after_a_step": blamed_after,
        "wrong_commit_near_a_step": wrong,
        "stray_cases_on_culprits": stray,
        "ambiguous_on_neutral": ambiguous_neutral,
        "suspects_per_100_commits": 100.0 * suspects / commits,
        "late_searches": sum(o.late_tries for o in outcomes),
        "confirmation_runs_per_commit": sum(o.confirm_runs for o in outcomes) / commits,
        "detection": rows,
    }


def config_hash(cfg: JudgeConfig) -> str:
    return hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode()).hexdigest()[:12]


def render(result: dict, fit: NoiseFit, args: argparse.Namespace, cfg: JudgeConfig) -> str:
    r = result
    lines = [
        BEGIN,
        f"Simulation: `python scripts/simulate_verdicts.py --series {args.series} --commits {args.commits} "
        f"--seed {args.seed}` (judge config `{config_hash(cfg)}`: min_effect {cfg.min_effect:.0%}, k {cfg.k:g}, "
        f"FDR {cfg.fdr:g}, {cfg.pairs} confirmation pairs, alpha {cfg.alpha_confirm:g}, k_late {cfg.k_late:g}).",
        "",
        f"Noise fitted to `docs/h200`: {fit.summary()}.",
        "",
        f"{r['commits']} commits, {r['neutral']} of them neutral.",
        "",
        "| measure | result | target |",
        "|---|---:|---:|",
        f"| false alarms per 100 neutral commits, suite level | {r['false_alarms_suite_per_100']:.2f} | 0 |",
        f"| false alarms per 100 neutral commits, case level | {r['false_alarms_case_per_100']:.2f} | <= 1 |",
        f"| neutral commits blamed for a real step of the 10 commits before (same way, same case) | "
        f"{r['blamed_after_a_step']} | 0 |",
        f"| real steps blamed on a neighbour (within 3 commits, same way, same case) | "
        f"{r['wrong_commit_near_a_step']} | 0 |",
        f"| untouched cases reported with a real step | {r['stray_cases_on_culprits']} | 0 |",
        f"| neutral commits left ambiguous | {r['ambiguous_on_neutral']} | |",
        f"| runs that moved at screening (confirmed or not), per 100 commits | {r['suspects_per_100_commits']:.1f} | |",
        f"| confirmation runs per commit (GPU cost) | {r['confirmation_runs_per_commit']:.2f} | |",
        "",
        "| planted step | planted | flagged on its commit at once | ... or later (late search) | target |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in r["detection"]:
        target = {"5%": ">= 95 %", "3%": ">= 80 %"}.get(row["size"], "")
        lines.append(
            f"| {row['size']} on {KIND_TEXT[row['kind']]} | {row['planted']} "
            f"| {row['at_once']:.0%} | {row['with_late']:.0%} | {target} |"
        )
    lines.append(END)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=48)
    ap.add_argument("--commits", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write-doc", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)}")
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    args = ap.parse_args(argv)
    cfg = JudgeConfig()
    fit = fit_noise()
    rng = random.Random(args.seed)
    outcomes = []
    for s in range(args.series):
        outcomes.append(simulate_series(fit, args.commits, random.Random(rng.random()), cfg))
        print(f"series {s + 1}/{args.series}", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    result = score(outcomes)
    text = render(result, fit, args, cfg)
    if args.json:
        print(json.dumps(result, indent=1))
    print(text)
    if args.write_doc:
        doc = DOC.read_text()
        if BEGIN not in doc or END not in doc:
            raise SystemExit(f"{DOC}: no {BEGIN} ... {END} markers")
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        DOC.write_text(head + text + tail)
        print(f"written into {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
