"""What the dashboard reads, on top of ``storage.queries`` (every query opens a read-only connection and
closes it at once, so runners are never kept out for long).

No SQL lives here: every query is a function of ``storage.queries``.

A *selection* is one hardware label and one protocol: series never mix either.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ci.hardware import CPU_LABEL
from storage import queries
from storage.db import Database
from storage.jobs import list_jobs
from storage.schema import SUITE

DASHBOARD_LOCK_ENV = "SOLCI_DASHBOARD_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 10.0
EMPTY_MESSAGE = (
    "No runs yet: run `solci up` (measures this checkout's HEAD and serves this page) "
    "or `solci run --repo PATH --commit SHA`, then refresh."
)


@dataclass(frozen=True)
class Selection:
    hardware: str  # hardware label, e.g. "NVIDIA H200" or "cpu-interpreter"
    protocol: str  # protocol hash
    branch: str | None = None  # None: every branch
    limit: int | None = None  # the most recent N runs of the selection


def open_db(path: str | Path | None = None) -> Database:
    timeout = float(os.environ.get(DASHBOARD_LOCK_ENV) or DEFAULT_LOCK_TIMEOUT_S)
    return Database(path, lock_timeout=timeout)


def db_token(path: str | Path) -> tuple:
    """Changes whenever the file (or its write-ahead log) changes: the cache key of everything read."""
    out: list = []
    for p in (Path(path), Path(f"{path}.wal")):
        try:
            st = p.stat()
            out += [st.st_mtime_ns, st.st_size]
        except OSError:
            out += [None, None]
    return tuple(out)


# ------------------------------------------------------------------------------------------------ choices
def all_runs(db: Database) -> pd.DataFrame:
    """Every run, oldest first (queries.runs)."""
    return queries.runs(db)


def hardware_options(runs: pd.DataFrame) -> list[str]:
    """Hardware labels, the one of the most recent run first."""
    if runs.empty:
        return []
    last = runs.groupby("hardware", sort=False)["started_at"].max().sort_values(ascending=False)
    return list(last.index)


def protocol_options(runs: pd.DataFrame, hardware: str) -> list[str]:
    """Protocol hashes used on ``hardware``, the one of its most recent run first."""
    sub = runs[runs["hardware"] == hardware]
    if sub.empty:
        return []
    last = sub.groupby("protocol", sort=False)["started_at"].max().sort_values(ascending=False)
    return list(last.index)


def default_selection(runs: pd.DataFrame) -> Selection | None:
    """The most recent run's hardware and protocol."""
    if runs.empty:
        return None
    last = runs.iloc[-1]
    return Selection(str(last["hardware"]), str(last["protocol"]))


def protocol_label(protocol: str, names: dict[str, str]) -> str:
    name = names.get(protocol)
    short = protocol[:10]
    return f"{name} ({short})" if name and name != protocol else short


def is_cpu(hardware: str) -> bool:
    return hardware == CPU_LABEL


# ------------------------------------------------------------------------------------------------ series
def selected_runs(db: Database, sel: Selection) -> pd.DataFrame:
    """The selection's runs, oldest first (exactly this hardware label and protocol)."""
    df = queries.runs(db, hardware=sel.hardware, protocol=sel.protocol)
    df = df[(df["hardware"] == sel.hardware) & (df["protocol"] == sel.protocol)]
    if sel.branch:
        df = df[df["branch"] == sel.branch]
    if sel.limit:
        df = df.tail(sel.limit)
    return df.reset_index(drop=True)


def case_history(db: Database, sel: Selection, run_ids: list[str]) -> pd.DataFrame:
    """queries.history of the selected runs, with the spread of the kernel's samples (q25_us, q75_us,
    min_us, max_us, n) per run x case."""
    if not run_ids:
        return pd.DataFrame()
    hist = queries.history(db, hardware=sel.hardware, protocol=sel.protocol)
    hist = hist[hist["run_id"].isin(run_ids) & (hist["hardware"] == sel.hardware)]
    spread = queries.sample_spread(db, run_ids)
    if not spread.empty:
        hist = hist.merge(spread, on=["run_id", "case"], how="left")
    return hist.reset_index(drop=True)


def selected_flags(db: Database, runs: pd.DataFrame) -> pd.DataFrame:
    """What judging stored for the selected runs, as chart marks (queries.verdict_marks), newest first."""
    if runs.empty:
        return queries.verdict_marks(db, [])
    return queries.verdict_marks(db, list(runs["run_id"]))


def steps(db: Database, sel: Selection, cases: list[str]) -> pd.DataFrame:
    """The stored confirmed steps of the selection, one row per step x case (and the suite): commit, run_id,
    case, started_at, before_median, after_median, change (after / before - 1); newest first."""
    df = queries.series_steps(db, hardware=sel.hardware, protocol=sel.protocol)
    cols = ["commit", "run_id", "case", "started_at", "before_median", "after_median", "change"]
    rows: list[dict] = []
    for s in df.itertuples(index=False):
        if s.status not in ("open", "fixed", "acknowledged", "improvement") or s.run_id is None:
            continue
        for c in s.cases if isinstance(s.cases, (list, tuple)) or hasattr(s.cases, "__len__") else []:
            if c["case"] in cases and c.get("before_us") and c.get("after_us"):
                rows.append(
                    {
                        "commit": s.commit,
                        "run_id": s.run_id,
                        "case": c["case"],
                        "started_at": s.created_at,
                        "before_median": c["before_us"],
                        "after_median": c["after_us"],
                        "change": c["after_us"] / c["before_us"] - 1.0,
                    }
                )
        if s.suite_change is not None and not pd.isna(s.suite_change):
            rows.append(
                {
                    "commit": s.commit,
                    "run_id": s.run_id,
                    "case": SUITE,
                    "started_at": s.created_at,
                    "before_median": 1.0,
                    "after_median": 1.0 + s.suite_change,
                    "change": s.suite_change,
                }
            )
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values("started_at", ascending=False, kind="stable").reset_index(drop=True)


# ------------------------------------------------------------------------------------------------ one run
def run_detail(db: Database, run_id: str) -> tuple[dict | None, pd.DataFrame, pd.DataFrame]:
    """(runs row, per-case results, raw kernel samples) of one run."""
    info = queries.run_info(db, run_id)
    if info is None:
        return None, pd.DataFrame(), pd.DataFrame()
    return info, queries.run_cases(db, run_id), queries.run_samples(db, run_id)


def sol_table(db: Database, run_id: str) -> pd.DataFrame:
    """Per case of one run: status, median, T_SOL, eager, cuBLAS, score, and the project's best on the same
    hardware and protocol (queries.gaps): best_us, best_commit, gap; x_sol = median / T_SOL."""
    cases = queries.run_cases(db, run_id)
    gaps = queries.gaps(db, run_id)
    if cases.empty:
        return cases
    keep = ["case", "m", "status", "median_us", "t_sol_us", "eager_us", "cublas_us", "score"]
    out = cases[keep].merge(gaps[["case", "best_us", "best_commit", "gap"]], on="case", how="left")
    out["x_sol"] = out["median_us"] / out["t_sol_us"]
    return out


def suite_gap(db: Database, run_id: str) -> dict:
    """The suite row of queries.gaps (project best, #1 B200 record by SOL score), {} when absent."""
    gaps = queries.gaps(db, run_id)
    row = gaps[gaps["case"] == SUITE]
    return {} if row.empty else row.iloc[0].to_dict()


def published_records(db: Database) -> pd.DataFrame:
    df = queries.records(db)
    return df[df["kind"] == "published"].reset_index(drop=True)


# ------------------------------------------------------------------------------------------------ jobs
def jobs_frame(db: Database, limit: int = 200) -> pd.DataFrame:
    """The job queue, newest first."""
    rows = [
        {
            "id": j.id,
            "status": j.status,
            "outcome": j.outcome,
            "commit": j.commit,
            "branch": j.branch,
            "trigger": j.trigger,
            "attempts": j.attempts,
            "enqueued_at": j.enqueued_at,
            "started_at": j.started_at,
            "finished_at": j.finished_at,
            "gpu": j.gpu,
            "worker": j.worker,
            "run_id": j.run_id,
            "repo": j.repo,
            "log": j.log,
        }
        for j in list_jobs(db, limit=limit)
    ]
    cols = [
        "id",
        "status",
        "outcome",
        "commit",
        "branch",
        "trigger",
        "attempts",
        "enqueued_at",
        "started_at",
        "finished_at",
        "gpu",
        "worker",
        "run_id",
        "repo",
        "log",
    ]
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------------------------ tables
def flag_table(flags: pd.DataFrame, steps_df: pd.DataFrame) -> pd.DataFrame:
    """Stored flags (judged per run against its recent past) and change points (steps in the series) in one
    table, newest first: started_at, commit, case, kind, change, p_value, message, source, run_id."""
    cols = ["started_at", "commit", "case", "kind", "change", "p_value", "message", "source", "run_id"]
    parts = []
    if flags is not None and not flags.empty:
        parts.append(
            pd.DataFrame(
                {
                    "started_at": flags["started_at"],
                    "commit": flags["commit"],
                    "case": flags["case"],
                    "kind": flags["kind"],
                    "change": flags["magnitude"],
                    "p_value": None,
                    "message": flags["message"],
                    "source": "verdict (confirmed)",
                    "run_id": flags["run_id"],
                }
            )
        )
    if steps_df is not None and not steps_df.empty:
        parts.append(
            pd.DataFrame(
                {
                    "started_at": steps_df["started_at"],
                    "commit": steps_df["commit"],
                    "case": steps_df["case"],
                    "kind": ["step up (slower)" if c > 0 else "step down (faster)" for c in steps_df["change"]],
                    "change": steps_df["change"],
                    "p_value": None,
                    "message": [
                        f"{'suite (geomean)' if c == SUITE else c}: level {b:.2f} → {a:.2f} µs from this commit on"
                        for c, b, a in zip(
                            steps_df["case"], steps_df["before_median"], steps_df["after_median"], strict=True
                        )
                    ],
                    "source": "stored step",
                    "run_id": steps_df["run_id"],
                }
            )
        )
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)[cols]
    return out.sort_values("started_at", ascending=False, kind="stable").reset_index(drop=True)
