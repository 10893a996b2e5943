"""Judge a stored run against its recent past, and find where steps began in a series.

``judge_run``: per case, and for the suite (geometric mean over the run's cases), the run's raw kernel samples
are compared with the pooled samples of the last ``baseline_runs`` passing runs on the same hardware label and
protocol that started before it: Mann-Whitney U (two-sided) must give p < ``alpha`` AND the medians must
differ by more than ``min_effect`` (relative). Changes within noise get no flag. Flags:

- ``regression`` / ``improvement``: slower / faster beyond noise; magnitude = new median / baseline median - 1;
- ``new_record``: the run beat the project's best by at least ``min_effect`` (from the "record broken" events
  written at ingest, which follow every faster run);
- ``incorrect``: a case that failed the correctness check; ``error``: a case that errored or timed out.

For the suite, one suite sample per timed iteration i is the geometric mean over the cases of their i-th
samples; its medians are the geometric means of the per-case medians (so the suite magnitude is the
geometric mean of the per-case ratios).

``change_points``: PELT (``ruptures``, L2 cost on log medians, penalty from a robust noise estimate) over the
per-run medians of one case (or the suite geomean) of passing runs; steps smaller than ``min_effect`` are
merged away. Each step names the first run (and commit) after it.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import ruptures as rpt
from scipy.stats import mannwhitneyu

from storage import queries
from storage.db import Database, StorageError
from storage.schema import SUITE

FLAG_KINDS = ("regression", "improvement", "new_record", "incorrect", "error")


def _flag(run: dict, case: str, kind: str, message: str, **figures: float | None) -> dict:
    return {
        "run_id": run["run_id"], "commit": run["commit"], "case": case, "kind": kind,
        "magnitude": figures.get("magnitude"), "p_value": figures.get("p_value"),
        "baseline_median_us": figures.get("baseline_median_us"), "new_median_us": figures.get("new_median_us"),
        "message": message,
    }  # fmt: skip


def _as_array(samples) -> np.ndarray | None:
    if samples is None:
        return None
    arr = np.asarray(samples, dtype=float)
    if arr.size == 0:
        return None
    return arr[np.isfinite(arr) & (arr > 0)]


def compare(new: np.ndarray, pooled: np.ndarray) -> tuple[float, float, float]:
    """(p value of Mann-Whitney U two-sided, baseline median, new median)."""
    if np.ptp(np.concatenate([new, pooled])) == 0:
        p = 1.0
    else:
        p = float(mannwhitneyu(new, pooled, alternative="two-sided").pvalue)
    return p, float(np.median(pooled)), float(np.median(new))


def _verdict(
    run: dict, case: str, p: float, base: float, new: float, n_base: int, *, alpha: float, min_effect: float
) -> dict | None:
    rel = new / base - 1.0
    if not (p < alpha and abs(rel) > min_effect):
        return None
    kind = "regression" if rel > 0 else "improvement"
    label = "suite (geomean)" if case == SUITE else case
    msg = (
        f"{label}: {new:.2f} us vs {base:.2f} us over the last {n_base} passing run(s) "
        f"({rel:+.1%}, {'slower' if rel > 0 else 'faster'}; Mann-Whitney p={p:.2g})"
    )
    return _flag(run, case, kind, msg, magnitude=rel, p_value=p, baseline_median_us=base, new_median_us=new)


def _suite_samples(per_case: dict[str, np.ndarray]) -> np.ndarray:
    k = min(len(a) for a in per_case.values())
    logs = np.vstack([np.log(a[:k]) for a in per_case.values()])
    return np.exp(logs.mean(axis=0))


def _geo(values: list[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def evaluate(
    run: dict, own: pd.DataFrame, base: pd.DataFrame, *, min_effect: float = 0.03, alpha: float = 0.01
) -> list[dict]:
    """The flags for one run given its samples and its baseline's (no storage; see ``judge_run``)."""
    out: list[dict] = []
    own_samples: dict[str, np.ndarray] = {}
    for row in own.itertuples(index=False):
        if row.status == "incorrect":
            out.append(_flag(run, row.case, "incorrect", f"{row.case}: incorrect output ({row.error or 'no detail'})"))
        elif row.status != "pass":
            out.append(_flag(run, row.case, "error", f"{row.case}: {row.status} ({row.error or 'no detail'})"))
        else:
            arr = _as_array(row.samples_us)
            if arr is not None and arr.size:
                own_samples[row.case] = arr

    base_by_run: dict[str, dict[str, np.ndarray]] = {}
    for row in base.itertuples(index=False):
        arr = _as_array(row.samples_us)
        if row.status == "pass" and arr is not None and arr.size:
            base_by_run.setdefault(row.run_id, {})[row.case] = arr

    for case, arr in own_samples.items():
        pools = [d[case] for d in base_by_run.values() if case in d]
        if not pools:
            continue
        p, b, n = compare(arr, np.concatenate(pools))
        flag = _verdict(run, case, p, b, n, len(pools), alpha=alpha, min_effect=min_effect)
        if flag:
            out.append(flag)

    run_passing = run["status"] == "pass" and len(own_samples) == len(own) > 0
    if run_passing:
        cases = list(own_samples)
        full = [d for d in base_by_run.values() if all(c in d for c in cases)]
        if full:
            new_suite = _suite_samples(own_samples)
            pooled_suite = np.concatenate([_suite_samples({c: d[c] for c in cases}) for d in full])
            p, _, _ = compare(new_suite, pooled_suite)
            base_med = _geo([float(np.median(np.concatenate([d[c] for d in full]))) for c in cases])
            new_med = _geo([float(np.median(own_samples[c])) for c in cases])
            flag = _verdict(run, SUITE, p, base_med, new_med, len(full), alpha=alpha, min_effect=min_effect)
            if flag:
                out.append(flag)
    return out


def _record_flags(run: dict, events: pd.DataFrame, min_effect: float) -> list[dict]:
    """A flag per "record broken" event that beats the previous best by at least ``min_effect``: the record
    table follows every faster run, but a flag for a 0.3 % "record" would only repeat the noise."""
    out = []
    for ev in events.itertuples(index=False):
        rel = ev.new_us / ev.previous_us - 1.0
        if -rel < min_effect:
            continue
        label = "suite (geomean)" if ev.case == SUITE else ev.case
        where = f"{ev.hardware}, protocol {ev.protocol}"
        msg = (
            f"{label}: new best {ev.new_us:.2f} us on {where} ({rel:+.1%}; previous best {ev.previous_us:.2f} us"
            f" at {ev.previous_commit or ev.previous_run_id})"
        )
        out.append(
            _flag(run, ev.case, "new_record", msg, magnitude=rel, baseline_median_us=float(ev.previous_us),
                  new_median_us=float(ev.new_us))
        )  # fmt: skip
    return out


def judge_run(
    db: Database, run_id: str, *, min_effect: float = 0.03, alpha: float = 0.01, baseline_runs: int = 5
) -> list[dict]:
    """Compute and store the flags of one run (replacing any earlier judgement of it); return them."""
    run, own, base = queries.recent_passing_samples(db, run_id, n_runs=baseline_runs)
    if run is None:
        raise StorageError(f"{db.path}: no run {run_id!r} to judge")
    result = evaluate(run, own, base, min_effect=min_effect, alpha=alpha)
    result += _record_flags(run, queries.record_events(db, run_id), min_effect)
    now = datetime.now(UTC).replace(tzinfo=None)
    with db.transaction() as conn:
        conn.execute("DELETE FROM flags WHERE run_id = ?", [run_id])
        if result:
            conn.executemany(
                """INSERT INTO flags (run_id, "commit", case_name, kind, magnitude, p_value, baseline_median_us,
                       new_median_us, message, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [
                    [f["run_id"], f["commit"], f["case"], f["kind"], f["magnitude"], f["p_value"],
                     f["baseline_median_us"], f["new_median_us"], f["message"], now]
                    for f in result
                ],
            )  # fmt: skip
    return result


# ------------------------------------------------------------------------------------------- change points
def _series(db: Database, case: str, hardware: str, protocol: str) -> pd.DataFrame:
    if case == SUITE:
        df = queries.runs(db, hardware=hardware, protocol=protocol)
        df = df[(df["status"] == "pass") & df["geomean_us"].notna()]
        return df.rename(columns={"geomean_us": "median_us"})[["run_id", "commit", "started_at", "median_us"]]
    df = queries.history(db, case=case, hardware=hardware, protocol=protocol)
    df = df[(df["status"] == "pass") & df["median_us"].notna() & (df["median_us"] > 0)]
    return df[["run_id", "commit", "started_at", "median_us"]]


def find_steps(values: np.ndarray, *, min_effect: float = 0.03, min_size: int = 2,
               penalty: float | None = None) -> list[int]:  # fmt: skip
    """Indices i where a new level starts (values[i] is the first after a step), on log values."""
    y = np.log(np.asarray(values, dtype=float))
    n = len(y)
    if n < 2 * min_size:
        return []
    diffs = np.abs(np.diff(y))
    sigma = max(float(np.median(diffs)) / (0.6745 * math.sqrt(2.0)), 0.002)
    pen = penalty if penalty is not None else 3.0 * sigma**2 * math.log(n)
    bkps = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(y.reshape(-1, 1)).predict(pen=pen)
    starts = [b for b in bkps if b < n]
    # Merge away steps smaller than min_effect, smallest first, re-measuring the merged segments.
    while starts:
        bounds = [0, *starts, n]
        effects = [
            abs(math.exp(np.median(y[b:c]) - np.median(y[a:b])) - 1.0)
            for a, b, c in zip(bounds, bounds[1:], bounds[2:], strict=False)
        ]
        i = int(np.argmin(effects))
        if effects[i] > min_effect:
            break
        starts.pop(i)
    return starts


def change_points(db: Database, *, case: str, hardware: str, protocol: str, min_effect: float = 0.03) -> list[dict]:
    """Steps in the per-run medians of ``case`` ('__suite__': the suite geomean) of passing runs on
    ``hardware`` and ``protocol``: [{commit, run_id, case, started_at, before_median, after_median}]."""
    df = _series(db, case, hardware, protocol).reset_index(drop=True)
    values = df["median_us"].to_numpy(dtype=float)
    starts = find_steps(values, min_effect=min_effect)
    bounds = [0, *starts, len(values)]
    case_name = case if case == SUITE else queries._case_name(case)
    out = []
    for a, b, c in zip(bounds, bounds[1:], bounds[2:], strict=False):
        out.append(
            {
                "commit": df.at[b, "commit"], "run_id": df.at[b, "run_id"], "case": case_name,
                "started_at": df.at[b, "started_at"],
                "before_median": float(np.median(values[a:b])), "after_median": float(np.median(values[b:c])),
            }
        )  # fmt: skip
    return out
