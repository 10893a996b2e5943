"""What the dashboard reads, on top of ``storage.queries`` (every query opens a read-only connection and closes
it at once, so runners are never kept out for long), and the tables it shows, built from those reads.

No SQL lives here and nothing is judged here: verdicts, steps and drift are computed when a run is judged
(``ci.verdict.apply``) and stored; this module only reads them. Reads are bounded: one selection's newest N runs
(the sidebar's window), or aggregates computed in SQL; nothing loops over the whole history in Python.

A *selection* is one hardware label and one protocol: series never mix either.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dashboard import fmt
from dashboard.charts import run_labels as labels
from problem.workload import CASES, CPU_LABEL, geomean
from storage import db as storage_db
from storage import queries
from storage.db import Database, open_database
from storage.schema import BOUNDARY_STATUSES, SUITE
from storage.schema import STEP_STATUSES as STEP_STATUSES  # the Changes tab's status filter

DASHBOARD_LOCK_ENV = "SOLCI_DASHBOARD_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 10.0
DEFAULT_WINDOW = 200
EMPTY_MESSAGE = (
    "No runs yet: run `solci up` (measures this checkout's HEAD and serves this page) "
    "or `solci run --repo PATH --commit SHA`, then refresh."
)
FULL_SUITE: frozenset[str] = frozenset(c.name for c in CASES)  # the benchmark's 16 cases, as results name them
N_FULL = len(FULL_SUITE)


@dataclass(frozen=True)
class Selection:
    hardware: str  # hardware label, e.g. "NVIDIA H200" or "cpu-interpreter"
    protocol: str  # protocol hash
    branch: str | None = None  # None: every branch
    limit: int = DEFAULT_WINDOW  # the newest N runs of the selection


_DBS: dict[tuple[str, float], Database] = {}
_DBS_LOCK = threading.Lock()


def is_lake(spec: str | Path) -> bool:
    """A ``ducklake:`` spec (storage.db's lake backend) rather than a file path."""
    return storage_db.is_lake_spec(str(spec))


def history_location(argv_db: str | None = None) -> str | Path:
    """The history the page reads: ``argv_db`` (``--db``), else ``$SOLCI_DB`` (a path or a lake spec), else
    ``./.solci/history.duckdb``."""
    if argv_db:
        return argv_db if is_lake(argv_db) else Path(argv_db).expanduser()
    spec = storage_db.default_db_spec()
    return spec if is_lake(spec) else Path(spec).expanduser()


def open_db(path: str | Path | None = None) -> Database:
    """A reader's handle on the history (``create=False``: a missing file is a HistoryMissingError, never a new
    empty history); one handle per history and process, so the schema is checked once, not on every read."""
    timeout = float(os.environ.get(DASHBOARD_LOCK_ENV) or DEFAULT_LOCK_TIMEOUT_S)
    key = (str(path) if path is not None else "", timeout)
    with _DBS_LOCK:
        db = _DBS.get(key)
        if db is None:
            db = _DBS[key] = open_database(path, lock_timeout=timeout, create=False)
        return db


def db_token(path: str | Path) -> tuple:
    """The cache key of everything read: ``Database.change_token()``, which changes whenever the history does
    (a file's and its write-ahead log's stat; a lake's snapshot and queue state)."""
    return open_db(path).change_token()


def is_cpu(hardware: str) -> bool:
    return hardware == CPU_LABEL


def matmul_baseline(hardware: str) -> str:
    """The name of the in-run matmul baseline a run's kernel time is divided by (``ratio_vs_cublas``): cuBLAS on
    a GPU; under the CPU interpreter torch's CPU matmul, which is not cuBLAS (the header and the runs table say
    the same name and the same figure)."""
    return "torch matmul (CPU interpreter, not cuBLAS)" if is_cpu(hardware) else "cuBLAS"


def suite_ratio(run: pd.Series | dict) -> float | None:
    """Kernel ÷ the matmul baseline (``matmul_baseline``) of one run as the header and the runs table show it:
    the stored suite ratio of a passing run, None (–) for a failed one; on every hardware, labelled."""
    if not bool(run.get("passing")):
        return None
    value = run.get("ratio_vs_cublas")
    return None if fmt.missing(value) else float(value)


# ------------------------------------------------------------------------------------------------ choices
def summary(db: Database) -> pd.DataFrame:
    """One row per series (queries.series_summary): GPU series first, the newest passing run first."""
    return queries.series_summary(db)


def hardware_options(summ: pd.DataFrame) -> list[str]:
    """Hardware labels, the default first: the hardware of the newest passing GPU run (the CPU interpreter only
    when there is no GPU history), then the other GPUs, then the interpreter."""
    if summ.empty:
        return []
    order = summ.assign(cpu=summ["hardware"].map(is_cpu) | ~summ["gpu"].astype(bool))
    order = order.sort_values(["cpu", "last_pass_at", "last_at"], ascending=[True, False, False], na_position="last")
    return list(dict.fromkeys(order["hardware"]))


def protocol_options(summ: pd.DataFrame, hardware: str) -> list[str]:
    """Protocol hashes used on ``hardware``, the one of its newest passing run first."""
    sub = summ[summ["hardware"] == hardware]
    sub = sub.sort_values(["last_pass_at", "last_at"], ascending=False, na_position="last")
    return list(dict.fromkeys(sub["protocol"]))


def other_protocols_text(summ: pd.DataFrame, hardware: str, protocol: str) -> str | None:
    """What the page says when ``hardware`` has runs of protocols other than the one shown (a run measured with
    ``--iters 2`` is a protocol of its own): how many, with how many runs, and where to pick them; None when
    there are none."""
    sub = summ[(summ["hardware"] == hardware) & (summ["protocol"] != protocol)]
    if sub.empty:
        return None
    n, runs = len(sub), int(sub["n_runs"].sum())
    return (
        f"{n} other protocol{'s' if n > 1 else ''} on {hardware} ({runs} run{'s' if runs != 1 else ''}) not shown "
        "here: pick one under Protocol. A protocol is how the timings were taken (timer, iterations, L2 flush, "
        "harness version): a run with other options (e.g. --iters 2) starts a series of its own."
    )


def protocol_names(summ: pd.DataFrame) -> dict[str, str]:
    return {p: n for p, n in zip(summ["protocol"], summ["protocol_name"], strict=True) if not fmt.missing(n)}


def branch_options(summ: pd.DataFrame, hardware: str, protocol: str) -> list[str]:
    row = summ[(summ["hardware"] == hardware) & (summ["protocol"] == protocol)]
    if row.empty:
        return []
    branches = row.iloc[0]["branches"]
    return [str(b) for b in branches] if isinstance(branches, (list, tuple, np.ndarray)) else []


def default_selection(summ: pd.DataFrame) -> Selection | None:
    hw = hardware_options(summ)
    if not hw:
        return None
    return Selection(hw[0], protocol_options(summ, hw[0])[0])


def protocol_label(protocol: str, names: dict[str, str]) -> str:
    name = names.get(protocol)
    short = protocol[:10]
    return f"{name} ({short})" if name and name != protocol else short


# ------------------------------------------------------------------------------------------------ the window
def run_labels(df: pd.DataFrame) -> dict[str, str]:
    """run_id -> x label (short commit, '#2' for a repeat), in the frame's (time) order (charts.run_labels): plain
    text, escaped where it is shown."""

    return labels(df)


def window(db: Database, sel: Selection) -> pd.DataFrame:
    """The selection's newest ``sel.limit`` runs with their stored verdicts (queries.run_window, whose
    ``passing`` says every case passed and the run is not quarantined), oldest first, plus ``label`` (the commit
    as the charts show it, plain text)."""
    w = queries.run_window(db, hardware=sel.hardware, protocol=sel.protocol, branch=sel.branch, limit=sel.limit)
    if w.empty:
        return w.assign(label=pd.Series(dtype=str), passing=pd.Series(dtype=bool))
    return w.assign(label=w["run_id"].map(run_labels(w)), passing=w["passing"].astype(bool))


def case_sets(hist: pd.DataFrame) -> dict[str, str]:
    """run_id -> the run's set of cases as one key (its case names, sorted, comma-joined), from per run x case
    rows (``chart_cases``)."""
    if hist.empty:
        return {}
    return hist.groupby("run_id", sort=False)["case"].agg(lambda s: ",".join(sorted(set(map(str, s))))).to_dict()


def is_full_suite(cases: str | Iterable[str]) -> bool:
    """``cases`` (case names, or a ``case_sets`` key) are exactly the benchmark's 16 cases."""
    names = cases.split(",") if isinstance(cases, str) else cases
    return {str(n) for n in names} == FULL_SUITE


def with_case_sets(win: pd.DataFrame, hist: pd.DataFrame) -> pd.DataFrame:
    """The window plus ``case_set`` (``case_sets``' key; missing for a run without stored cases) and
    ``full_suite`` (the run measured the benchmark's 16 cases): suite figures compare only runs of one set."""
    sets = win["run_id"].map(case_sets(hist))
    full = sets.map(lambda k: isinstance(k, str) and is_full_suite(k)).astype(bool)
    return win.assign(case_set=sets, full_suite=full)


def main_case_set(series: pd.DataFrame) -> str | None:
    """The case set the suite chart's line follows (``with_case_sets``' frame): the benchmark's 16 cases when a
    run of the window measured them, else the set of the most runs (ties: the newest run's)."""
    sets = series["case_set"].dropna() if "case_set" in series.columns else pd.Series(dtype=object)
    if sets.empty:
        return None
    full = sets[series.loc[sets.index, "full_suite"]]
    if not full.empty:
        return str(full.iloc[-1])
    counts = sets.value_counts(sort=False)
    most = counts[counts == counts.max()].index
    return str(sets[sets.isin(most)].iloc[-1])


def same_cases(series: pd.DataFrame, run: pd.Series) -> pd.DataFrame:
    """The runs of ``series`` (``with_case_sets``' frame) that measured the same set of cases as ``run``."""
    if fmt.missing(run.get("case_set")):
        return series.iloc[0:0]
    return series[series["case_set"] == run["case_set"]]


def subset_text(run: pd.Series | dict) -> str | None:
    """For a GPU run of a set of cases other than the benchmark's 16 (``solci run --cases``): 'k of 16 cases'
    (or 'k cases, not the benchmark's 16' when some are not the benchmark's); None for a full-suite run, a run
    without stored cases and the CPU interpreter (which has cases of its own)."""
    if is_cpu(str(run.get("hardware"))) or fmt.missing(run.get("case_set")) or bool(run.get("full_suite")):
        return None
    names = str(run["case_set"]).split(",")
    if set(names) <= FULL_SUITE:
        return f"{len(names)} of {N_FULL} cases"
    return f"{len(names)} cases, not the benchmark's {N_FULL}"


def suite_t_sol(series: pd.DataFrame, hist: pd.DataFrame) -> float | None:
    """The geomean T_SOL of the cases of the suite chart's line (``main_case_set``), from its newest run's rows
    of ``hist``; None without a SOL model."""
    main = main_case_set(series)
    runs = series[series["case_set"] == main] if main is not None else series
    if runs.empty or hist.empty:
        return None
    rows = hist[hist["run_id"] == runs["run_id"].iloc[-1]]
    return geomean([float(v) for v in rows["t_sol_us"].dropna()])


def default_run(win: pd.DataFrame) -> str | None:
    """The run the headline and the SOL view show by default: the newest passing one (else the newest)."""
    if win.empty:
        return None
    ok = win[win["passing"]]
    return str((ok if not ok.empty else win)["run_id"].iloc[-1])


def run_choice_labels(win: pd.DataFrame) -> dict[str, str]:
    """run_id -> 'abc1234567 · pass · 2026-11-01 10:00' (the verdict, else the run's status) for the run
    selector (plain text), for every run of the window at once."""
    if win.empty:
        return {}
    status = win["verdict"].where(win["verdict"].notna(), win["status"]).astype(str)
    text = win["commit"].map(fmt.short) + " · " + status + " · " + win["started_at"].dt.strftime("%Y-%m-%d %H:%M")
    return dict(zip(win["run_id"], text, strict=True))


def failure_text(row: pd.Series | dict) -> str | None:
    """One line for a run with failed cases: 'error in 16 of 16 cases: SyntaxError: invalid syntax'."""
    n = int(row.get("n_failed") or 0)
    if n == 0:
        return None if fmt.missing(row.get("quarantine")) else f"quarantined: {row['quarantine']}"
    line = row.get("error_line")
    line = "" if fmt.missing(line) else str(line)
    which = f"{row['failed_status']} in {n} of {int(row['n_cases'])} cases"
    if n > 1 and int(row.get("n_errors") or 0) > 1:
        which += f" (first {row['failed_case']})"
    elif n == 1:
        which = f"{row['failed_status']}: {row['failed_case']}"
    return f"{which}: {line}" if line else which


def drift_text(row: pd.Series | dict, *, short: bool = False) -> str | None:
    """Why a change is not blamed on the commit, from what judging stored (verdicts.drift / clock); ``short``:
    the few words of a table cell."""
    parts = []
    if not fmt.missing(row.get("drift")) and bool(row.get("drift")):
        kernel, control = row.get("screen_change"), row.get("control_change")
        both = not fmt.missing(kernel) and not fmt.missing(control)
        if short:
            figures = f" {fmt.signed_pct(control)} with the kernel's {fmt.signed_pct(kernel)}" if both else ""
            parts.append(f"machine drift: eager/cuBLAS moved{figures}")
        else:
            figures = f" (kernel {fmt.signed_pct(kernel)}, in-run baselines {fmt.signed_pct(control)})" if both else ""
            parts.append(
                "machine drift: the eager and cuBLAS baselines timed in the same run moved as much as the kernel"
                + figures
                + ", so the change is the machine's, not the commit's"
            )
    if not fmt.missing(row.get("clock")) and bool(row.get("clock")):
        parts.append(
            "clock: does not hold in cycles"
            if short
            else "the SM clock moved with it: the change does not hold in cycles"
        )
    return "; ".join(parts) or None


def _moved(m: object, n: object) -> str:
    if fmt.missing(m):
        return fmt.DASH
    return f"{int(m)}/{int(n)}" if not fmt.missing(n) else str(int(m))


def overview_table(win: pd.DataFrame) -> pd.DataFrame:
    """One row per run, newest first: what a kernel engineer scans (the verdict, cases moved out of the run's,
    the suite change with its interval, the worst case, the step's status, drift, the first error line)."""
    cols = [
        "time",
        "commit",
        "branch",
        "verdict",
        "moved",
        "suite change [interval]",
        "worst case",
        "step",
        "note",
        "run_id",
    ]
    if win.empty:
        return pd.DataFrame(columns=cols)
    w = win.iloc[::-1].reset_index(drop=True)

    def per_row(mask: pd.Series, text) -> pd.Series:  # a row-wise text, only for the (few) rows that have one
        out = pd.Series(None, index=w.index, dtype=object)
        if mask.any():
            out[mask] = [text(r) for r in w[mask].to_dict("records")]
        return out

    failed = per_row((w["n_failed"] > 0) | w["quarantine"].notna(), failure_text)
    drift = per_row(
        w["drift"].fillna(False).astype(bool) | w["clock"].fillna(False).astype(bool),
        lambda r: drift_text(r, short=True),
    )
    ok = failed.isna()
    has_worst = w["worst_case"].notna() & ok
    worst = w["worst_case"].astype(str) + " " + w["worst_change"].map(fmt.signed_pct)
    notes = ["; ".join(t for t in (f, d) if isinstance(t, str) and t) for f, d in zip(failed, drift, strict=True)]
    return pd.DataFrame(
        {
            "time": w["started_at"],
            "commit": w["commit"].map(fmt.short),
            "branch": w["branch"].fillna("").astype(str),
            "verdict": w["verdict"].where(w["verdict"].notna(), "not judged (" + w["status"].astype(str) + ")"),
            "moved": [
                _moved(m, n) if good else fmt.DASH
                for m, n, good in zip(w["cases_moved"], w["n_cases"], ok, strict=True)
            ],
            "suite change [interval]": [
                fmt.interval(c, lo, hi) if good else fmt.DASH
                for c, lo, hi, good in zip(w["suite_change"], w["suite_lo"], w["suite_hi"], ok, strict=True)
            ],
            "worst case": worst.where(has_worst, fmt.DASH),
            "step": w["step_status"].fillna("").astype(str),
            "note": notes,
            "run_id": w["run_id"],
        },
        columns=cols,
    )


def attention_run(win: pd.DataFrame) -> str | None:
    """The run whose details the Overview shows before a row is picked: the newest one with a finding (a
    verdict other than pass / baseline / functional), else the newest run."""
    if win.empty:
        return None
    bad = win[~win["verdict"].isin(("pass", "baseline", "functional")) | win["verdict"].isna()]
    return str((bad if not bad.empty else win)["run_id"].iloc[-1])


# ------------------------------------------------------------------------------------------------ changes
def commit_run(db: Database, commit: str, base: str | None = None) -> dict | None:
    """The run the dashboard opens on for ``?commit=SHA`` (a sha or a prefix, as ``solci report`` links it): that
    commit's newest run measured for its own sake, a GPU run first (hardware, protocol, run_id, base ...), main's
    before a pull request's; with ``base`` (``&base=SHA``) its run judged against that merge-base. None when the
    commit was never measured so. StorageError when the prefix names several commits."""
    return queries.commit_run(db, commit, base=base)


def pull_request_report(db: Database, commit: str, base: str) -> dict | None:
    """What a pull request's run of ``commit`` judged against its merge-base ``base`` says (as ``solci report
    --base``): its run with its verdict, its step, and the moved cases (queries.commit_report)."""
    return queries.commit_report(db, commit, base=base)


def pull_requests(db: Database, hardware: str) -> pd.DataFrame:
    """The pull requests' runs of ``hardware``, newest first (queries.pull_request_runs)."""
    return queries.pull_request_runs(db, hardware=hardware)


def _worst(row: dict) -> str:
    """A row's worst case and its change ("B4_S128 +10.0%"), or the dash."""
    return fmt.DASH if fmt.missing(row["worst_case"]) else f"{row['worst_case']} {fmt.signed_pct(row['worst_change'])}"


def pull_requests_table(prs: pd.DataFrame) -> pd.DataFrame:
    """One row per pull request's run, newest first: time, branch, commit, the merge-base it was judged against,
    verdict, cases moved, suite change with its interval, the worst case, and the dashboard's link to it."""
    cols = [
        "time",
        "branch",
        "commit",
        "merge-base",
        "verdict",
        "moved",
        "suite change [interval]",
        "worst case",
        "open",
    ]
    rows = []
    for r in prs.to_dict("records"):
        rows.append(
            {
                "time": r["started_at"],
                "branch": "" if fmt.missing(r["branch"]) else str(r["branch"]),
                "commit": fmt.short(r["commit"]),
                "merge-base": fmt.short(r["base"]),
                "verdict": fmt.DASH if fmt.missing(r["verdict"]) else str(r["verdict"]),
                "moved": _moved(r["cases_moved"], r["n_cases"]),
                "suite change [interval]": fmt.interval(r["suite_change"], r["suite_lo"], r["suite_hi"]),
                "worst case": _worst(r),
                "open": f"?commit={r['commit']}&base={r['base']}",
            }
        )
    return pd.DataFrame(rows, columns=cols)


def changes(db: Database, sel: Selection) -> pd.DataFrame:
    """Every stored step of the selection, newest first (queries.series_changes)."""
    return queries.series_changes(db, hardware=sel.hardware, protocol=sel.protocol, branch=sel.branch)


def changes_table(ch: pd.DataFrame) -> pd.DataFrame:
    """One row per stored step, newest first: culprit, status, cases moved, suite change with its interval, the
    worst case, how it was detected, what fixed it, the acknowledgement's reason."""
    cols = [
        "time",
        "commit",
        "status",
        "direction",
        "moved",
        "suite change [interval]",
        "worst case",
        "detected_by",
        "fixed_by",
        "ack reason",
        "step_id",
    ]
    if ch.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for r in ch.to_dict("records"):
        rows.append(
            {
                "time": r["started_at"] if not fmt.missing(r["started_at"]) else r["created_at"],
                "commit": fmt.short(r["commit"]),
                "status": r["status"],
                "direction": r["direction"],
                "moved": _moved(r["cases_moved"], r["n_cases"]),
                "suite change [interval]": fmt.interval(r["suite_change"], r["suite_lo"], r["suite_hi"]),
                "worst case": _worst(r),
                "detected_by": r["detected_by"],
                "fixed_by": "" if fmt.missing(r["fixed_by_commit"]) else fmt.short(r["fixed_by_commit"]),
                "ack reason": "" if fmt.missing(r["ack_reason"]) else str(r["ack_reason"]),
                "step_id": r["step_id"],
            }
        )
    return pd.DataFrame(rows, columns=cols)


def step_cases(db: Database, step_id: str) -> pd.DataFrame:
    return queries.step_cases(db, step_id)


# ------------------------------------------------------------------------------------------------ history
def chart_cases(db: Database, run_ids: list[str]) -> pd.DataFrame:
    """Per run x case of the window (queries.window_cases), with the spread of the kernel's samples."""
    return queries.window_cases(db, list(run_ids))


def chart_marks(db: Database, run_ids: list[str]) -> pd.DataFrame:
    """What judging stored for the window's runs, as chart marks (queries.verdict_marks), newest first."""
    return queries.verdict_marks(db, list(run_ids))


def chart_steps(ch: pd.DataFrame, db: Database, sel: Selection, run_ids: list[str]) -> pd.DataFrame:
    """The confirmed steps (open / fixed / acknowledged / improvement) opened by runs of the window, one row
    per step x case and one for the suite: commit, run_id, case, started_at, before_median, after_median,
    change; newest first. ``ch``: the selection's changes (``changes``); cases from queries.series_steps."""
    cols = ["commit", "run_id", "case", "started_at", "before_median", "after_median", "change", "status"]
    ids = set(run_ids)
    wanted = ch[ch["status"].isin(BOUNDARY_STATUSES) & ch["run_id"].isin(ids)] if not ch.empty else ch
    if wanted.empty:
        return pd.DataFrame(columns=cols)
    steps = queries.series_steps(db, hardware=sel.hardware, protocol=sel.protocol, commits=list(wanted["commit"]))
    steps = steps[steps["step_id"].isin(set(wanted["step_id"]))]
    rows: list[dict] = []
    for s in steps.to_dict("records"):
        for c in s["cases"] if s["cases"] is not None and not isinstance(s["cases"], float) else []:
            rows.append(
                {
                    "commit": s["commit"],
                    "run_id": s["run_id"],
                    "case": c["case"],
                    "started_at": s["created_at"],
                    "before_median": c["before_us"],
                    "after_median": c["after_us"],
                    "change": c["change"],
                    "status": s["status"],
                }
            )
        if not fmt.missing(s["suite_change"]):
            rows.append(
                {
                    "commit": s["commit"],
                    "run_id": s["run_id"],
                    "case": SUITE,
                    "started_at": s["created_at"],
                    "before_median": None,
                    "after_median": None,
                    "change": s["suite_change"],
                    "status": s["status"],
                }
            )
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values("started_at", ascending=False, kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------------------------------------ one run
def run_detail(db: Database, run_id: str) -> tuple[dict | None, pd.DataFrame, pd.DataFrame]:
    """(runs row, per-case results with what judging stored for each (queries.run_judgement), raw kernel
    samples) of one run."""
    info = queries.run_info(db, run_id)
    if info is None:
        return None, pd.DataFrame(), pd.DataFrame()
    return info, queries.run_judgement(db, run_id), queries.run_samples(db, run_id)


def run_findings(db: Database, run_id: str) -> pd.DataFrame:
    """Per case of one run: results and the stored judgement (queries.run_judgement)."""
    return queries.run_judgement(db, run_id)


def sol_table(
    db: Database,
    run_id: str,
    gaps: pd.DataFrame | None = None,
    *,
    quarantined: bool = False,
    levels: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per case of one run: status, median, T_SOL, eager, cuBLAS, score, and the project's record on the same
    hardware and protocol (queries.gaps, or ``gaps`` when already read): best_us, best_commit, gap; x_sol =
    median / T_SOL; the series' current level against the record (``series_levels``): level_us, record_us,
    standing ("below record since COMMIT" ...). A case that did not pass has no score and no gap (missing, shown
    "–"; never 0 %), and neither has any case of a ``quarantined`` run (its figures are not believed)."""
    cases = queries.run_cases(db, run_id)
    if cases.empty:
        return cases
    gaps = queries.gaps(db, run_id) if gaps is None else gaps
    keep = ["case", "m", "status", "median_us", "t_sol_us", "eager_us", "cublas_us", "score"]
    out = cases[keep].merge(gaps[["case", "best_us", "best_commit", "gap"]], on="case", how="left")
    ok = (out["status"] == "pass") & (not quarantined)
    out["score"] = out["score"].where(ok)
    out["gap"] = out["gap"].where(ok)
    out["x_sol"] = (out["median_us"] / out["t_sol_us"]).where(ok)
    lv = series_levels(db, gaps) if levels is None else levels
    return out.merge(lv[list(LEVEL_COLUMNS)], on="case", how="left")


# The current level of a case against its record (queries.levels), as the SOL table shows it.
LEVEL_COLUMNS = ("case", "level_us", "record_us", "standing")


def series_levels(db: Database, gaps: pd.DataFrame) -> pd.DataFrame:
    """The current levels (queries.levels) of the series of the run ``gaps`` describes (its hardware label and
    protocol): each case's level against the project record and its standing ("below record since COMMIT" ...);
    an empty frame with the columns when there is none."""
    empty = pd.DataFrame({"case": pd.Series(dtype=object), "level_us": pd.Series(dtype=float)}).assign(
        record_us=pd.Series(dtype=float), standing=pd.Series(dtype=object)
    )
    if gaps.empty:
        return empty
    lv = queries.levels(db, hardware=str(gaps["hardware"].iloc[0]), protocol=str(gaps["protocol"].iloc[0]))
    return empty if lv.empty else lv


def below_record(levels: pd.DataFrame) -> pd.DataFrame:
    """The rows of queries.levels whose level is slower than the project record beyond noise."""
    if levels.empty:
        return levels
    return levels[levels["below_record"].fillna(False).astype(bool)].reset_index(drop=True)


def suite_gap(gaps: pd.DataFrame) -> dict:
    """The suite row of queries.gaps (project best, #1 B200 record by SOL score), {} when absent."""
    row = gaps[gaps["case"] == SUITE] if not gaps.empty else gaps
    return {} if row.empty else row.iloc[0].to_dict()


def best_score(db: Database, sel: Selection, n_cases: int | None = None) -> dict | None:
    """The project's best suite SOL score on the selection (queries.best_suite_score) over runs of ``n_cases``
    cases (default: the most cases)."""
    return queries.best_suite_score(db, hardware=sel.hardware, protocol=sel.protocol, n_cases=n_cases)


def sol_view(
    db: Database, sel: Selection, run_id: str, *, quarantined: bool = False
) -> tuple[pd.DataFrame, dict, pd.DataFrame, dict | None]:
    """What the SOL view shows of one run (``quarantined``: its figures are not believed): (sol_table, the suite
    row, the published records, best_score over full-suite runs), with queries.gaps read once; the suite row
    carries the series' current suite level (level_us, level_standing, level_n_runs, level_since) when judged.

    The leaderboard ranks means over the benchmark's 16 cases, so the project's best it is compared with is one
    too, whatever cases the shown run measured. The suite row is ``suite_gap`` for a full-suite run; for a run of
    other cases, the project's 16-case best suite geomean and the B200 #1 (``full_suite_record``) without any
    gap to this run (a stored suite record of as many cases may be of other cases: not comparable)."""
    gaps = queries.gaps(db, run_id)
    lv = series_levels(db, gaps)  # read once: the table's rows and the suite row
    table = sol_table(db, run_id, gaps, quarantined=quarantined, levels=lv)
    records = queries.records(db)
    full = not table.empty and is_full_suite(table["case"])
    suite = suite_gap(gaps) if full else full_suite_record(records, sel)
    row = lv[lv["case"] == SUITE]
    if not row.empty:  # the series' current suite level against its record
        r = row.iloc[0]
        suite = {**suite, "level_us": r["level_us"], "level_standing": r["standing"], "level_n_runs": r["n_runs"]}
        suite["level_since"] = r["since"]
    return table, suite, _published(records), best_score(db, sel, N_FULL)


def full_suite_record(records: pd.DataFrame, sel: Selection) -> dict:
    """The project's best suite geomean over the benchmark's 16 cases on the selection (queries.records' project
    row) as {best_us, best_commit, best_run_id}, with the published #1 (record_implementation, record_latency_us,
    record_pct_sol) as ``suite_gap`` has it; {} when there is no such project row."""
    if records.empty:
        return {}
    top = _published(records).sort_values("latency_us").head(1)
    record = (
        {}
        if top.empty
        else {
            "record_implementation": top["implementation"].iloc[0],
            "record_latency_us": top["latency_us"].iloc[0],
            "record_pct_sol": top["pct_sol"].iloc[0],
        }
    )
    mine = records[
        (records["kind"] == "project")
        & (records["hardware"] == sel.hardware)
        & (records["protocol"] == sel.protocol)
        & (records["case"] == SUITE)
        & (records["n_cases"] == N_FULL)
    ]
    if mine.empty:
        return {}
    row = mine.iloc[0]
    return {"best_us": row["latency_us"], "best_commit": row["commit"], "best_run_id": row["run_id"], **record}


def _published(records: pd.DataFrame) -> pd.DataFrame:
    return records[records["kind"] == "published"].reset_index(drop=True)


def published_records(db: Database) -> pd.DataFrame:
    return _published(queries.records(db))


# ------------------------------------------------------------------------------------------------ jobs
def jobs(db: Database, limit: int = 200) -> tuple[pd.DataFrame, dict[str, int]]:
    """(the newest jobs without their logs, the count per status over the whole queue)."""
    return queries.job_queue(db, limit=limit)


def job_log(db: Database, job_id: int) -> str | None:
    return queries.job_log(db, job_id)
