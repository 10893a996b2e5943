"""Best-known records: the published B200 leaderboard (seeded by the migration) and the project's own records.

A project record is kept per (hardware label, protocol, case), and for the suite (the geometric mean over the
series' cases, ``case_name = '__suite__'``, keyed also by the number of cases so a 3-case smoke run never
competes with the 16-case suite). It is the best *confirmed level*, never one run:

- a **level** (the commits since the newest confirmed step, judged along the first-parent line) gives the
  median over its commits of their log figures (a commit's figure: the mean of its runs), with the standard
  error of that median from the noise judging uses (``sigma * sqrt(pi / 2 / n)``); it counts once it has
  ``LEVEL_RECORD_RUNS`` commits;
- a **confirmed improvement** gives its paired estimate: the level before it times the confirmed ratio, with the
  standard error of the paired mean.

A figure replaces the record only when it ``beats`` it beyond noise: faster by at least ``k`` standard errors
of the difference (judging's ``k``; both sides' errors) and by at least half the minimum effect (the least
change a confirmation accepts). Each replacement writes one ``record_events`` row; the first record of a
series and case breaks nothing and writes none. Judging (``ci.verdict.apply``) computes the figures after a
verdict is stored and calls ``store_series_records``; only judgings whose verdict is in ``RECORD_VERDICTS``
may move a record (a regressed, ambiguous, incorrect, broken, quarantined, rejected or interpreter run never
does), and every GPU judging refreshes the series' current ``levels`` rows, flagged ``below_record`` (with the
first commit of the level since which it has been) when the level is slower than the record beyond noise.

The rule (``beats``, ``below``, ``level_figure``, ``improvement_figure``) is pure; ``store_series_records`` is
the write; schema version 4 rebuilds the records from what judging stored with the same rule
(``storage.schema.recompute_project_records``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

PROJECT_SOURCE = "solci (confirmed levels of this project's runs)"
# A level sets or beats a record from this many commits on (one figure per commit: the mean of its runs).
LEVEL_RECORD_RUNS = 3
# The interval stored with a record or a level: this many standard errors either side (95 %).
INTERVAL_Z = 1.96
# Judgings whose verdict may move a record (ci.verdict.rules.VERDICTS); every other verdict moves none.
RECORD_VERDICTS = ("baseline", "pass", "improved", "not_reproduced")
# ci.verdict.rules.JudgeConfig's k and min_effect, for recomputing records where no judging is at hand (the
# migration); judging passes its own (a test checks these match the defaults).
DEFAULT_K = 3.0
DEFAULT_MIN_EFFECT = 0.01
BASES = ("level", "improvement")


# ------------------------------------------------------------------------------------------------ the rule
@dataclass(frozen=True)
class Figure:
    """A confirmed figure of one case (or the suite): its latency (us), the standard error of its log, how many
    commits it stands on, where it comes from (``basis``: level | improvement) and which commit it names (a
    level: its first commit; an improvement: its culprit)."""

    latency_us: float
    se: float
    n_runs: int
    basis: str
    commit: str | None = None
    run_id: str | None = None
    step_id: str | None = None
    pct_sol: float | None = None

    @property
    def log(self) -> float:
        return math.log(self.latency_us)

    @property
    def lo_us(self) -> float:
        return math.exp(self.log - INTERVAL_Z * self.se)

    @property
    def hi_us(self) -> float:
        return math.exp(self.log + INTERVAL_Z * self.se)

    @classmethod
    def stored(
        cls, latency_us: float, lo_us: float | None, hi_us: float | None, n_runs: int | None, **kw: Any
    ) -> Figure:
        """A figure read back from its row (a row of before version 4 has no interval: standard error 0)."""
        se = 0.0
        if lo_us and hi_us and hi_us > lo_us > 0:
            se = math.log(hi_us / lo_us) / (2.0 * INTERVAL_Z)
        return cls(float(latency_us), se, int(n_runs or 1), kw.pop("basis", None) or "level", **kw)


def level_figure(logs: Sequence[float], sigma: float, **kw: Any) -> Figure | None:
    """A level's figure: the median of its commits' log figures, its standard error from the between-run spread
    ``sigma`` judging uses (the median of n: ``sigma * sqrt(pi / 2 / n)``, as screening's level term)."""
    vals = [x for x in logs if x is not None and math.isfinite(x)]
    if not vals:
        return None
    n = len(vals)
    return Figure(math.exp(statistics.median(vals)), sigma * math.sqrt((math.pi / 2.0) / n), n, "level", **kw)


def improvement_figure(before_log: float, log_change: float, se: float, **kw: Any) -> Figure:
    """A confirmed improvement's paired estimate: the level before it times the confirmed ratio (``log_change``,
    the mean paired log ratio, negative), with the paired mean's standard error."""
    return Figure(math.exp(before_log + log_change), se, 1, "improvement", **kw)


def _beyond(slower: Figure, faster: Figure, k: float, min_effect: float) -> bool:
    d = slower.log - faster.log
    return d > 0 and d >= max(0.5 * math.log1p(min_effect), k * math.hypot(slower.se, faster.se))


def beats(new: Figure, record: Figure | None, *, k: float = DEFAULT_K, min_effect: float = DEFAULT_MIN_EFFECT) -> bool:
    """Whether ``new`` becomes the record: a level needs ``LEVEL_RECORD_RUNS`` commits (an improvement is
    confirmed already); with no record it sets one; otherwise it must be faster beyond noise: by ``k`` standard
    errors of the difference and by half the minimum effect."""
    if new.basis not in BASES:
        raise ValueError(f"basis must be one of {BASES}, got {new.basis!r}")
    if new.basis == "level" and new.n_runs < LEVEL_RECORD_RUNS:
        return False
    return record is None or _beyond(record, new, k, min_effect)


def below(
    level: Figure, record: Figure | None, *, k: float = DEFAULT_K, min_effect: float = DEFAULT_MIN_EFFECT
) -> bool:
    """Whether a level is worse than the record by more than noise (the same bar as ``beats``, the other way)."""
    return record is not None and _beyond(level, record, k, min_effect)


# ------------------------------------------------------------------------------------------------ writing
def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def current_records(
    conn: duckdb.DuckDBPyConnection, hardware: str, protocol: str
) -> dict[tuple[str, int | None], Figure]:
    rows = conn.execute(
        """SELECT case_name, n_cases, latency_us, lo_us, hi_us, n_runs, basis, run_id, "commit", step_id, pct_sol
           FROM records WHERE kind = 'project' AND hardware_label = ? AND protocol = ?""",
        [hardware, protocol],
    ).fetchall()
    return {
        (r[0], r[1]): Figure.stored(
            r[2], r[3], r[4], r[5], basis=r[6], run_id=r[7], commit=r[8], step_id=r[9], pct_sol=r[10]
        )
        for r in rows
    }


def _write_record(
    conn: duckdb.DuckDBPyConnection,
    key: tuple[str, int | None],
    fig: Figure,
    where: Mapping[str, Any],
    observed_at: datetime | None,
    now: datetime,
) -> None:
    case, n_cases = key
    conn.execute(
        """DELETE FROM records WHERE kind = 'project' AND hardware_label = ? AND protocol = ? AND case_name = ?
           AND n_cases IS NOT DISTINCT FROM ?""",
        [where["hardware_label"], where["protocol"], case, n_cases],
    )
    conn.execute(
        """INSERT INTO records (kind, gpu_model, hardware_label, protocol, case_name, n_cases, rank, implementation,
               latency_us, pct_sol, source, observed_at, run_id, "commit", updated_at, lo_us, hi_us, n_runs, basis,
               step_id)
           VALUES ('project', ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            where.get("gpu_model"),
            where["hardware_label"],
            where["protocol"],
            case,
            n_cases,
            f"solci@{fig.commit or (fig.run_id or '?')[:12]}",
            fig.latency_us,
            fig.pct_sol,
            PROJECT_SOURCE,
            observed_at,
            fig.run_id,
            fig.commit,
            now,
            fig.lo_us,
            fig.hi_us,
            fig.n_runs,
            fig.basis,
            fig.step_id,
        ],
    )


def _write_event(
    conn: duckdb.DuckDBPyConnection,
    key: tuple[str, int | None],
    fig: Figure,
    prev: Figure,
    where: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    event = {
        "run_id": fig.run_id or "",
        "commit": fig.commit,
        "hardware_label": where["hardware_label"],
        "gpu_model": where.get("gpu_model"),
        "protocol": where["protocol"],
        "case_name": key[0],
        "n_cases": key[1],
        "previous_us": prev.latency_us,
        "previous_run_id": prev.run_id,
        "previous_commit": prev.commit,
        "new_us": fig.latency_us,
        "broken_at": now,
        "new_lo_us": fig.lo_us,
        "new_hi_us": fig.hi_us,
        "n_runs": fig.n_runs,
        "basis": fig.basis,
        "step_id": fig.step_id,
    }
    cols = ", ".join(f'"{c}"' for c in event)
    conn.execute(f"INSERT INTO record_events ({cols}) VALUES ({', '.join(['?'] * len(event))})", list(event.values()))
    return event


def apply_candidates(
    conn: duckdb.DuckDBPyConnection,
    where: Mapping[str, Any],
    candidates: Sequence[tuple[str, int | None, Figure]],
    current: dict[tuple[str, int | None], Figure],
    *,
    k: float,
    min_effect: float,
    observed_at: datetime | None,
    now: datetime,
    log_events: bool = True,
) -> list[dict[str, Any]]:
    """Replace each record that its candidate (case, n_cases for the suite else None, figure) ``beats``, in
    ``current`` too; an event for each record replaced (written when ``log_events``). Returns the events."""
    events = []
    for case, n_cases, fig in candidates:
        key = (case, n_cases)
        prev = current.get(key)
        if not beats(fig, prev, k=k, min_effect=min_effect):
            continue
        if prev is not None:
            events.append(_write_event(conn, key, fig, prev, where, now) if log_events else {"case_name": case})
        _write_record(conn, key, fig, where, observed_at, now)
        current[key] = fig
    return events


def store_series_records(
    db: Any,
    *,
    hardware_label: str,
    gpu_model: str | None,
    protocol: str,
    candidates: Sequence[tuple[str, int | None, Figure]] = (),
    levels: Sequence[tuple[str, int | None, Figure]] = (),
    k: float = DEFAULT_K,
    min_effect: float = DEFAULT_MIN_EFFECT,
    observed_at: datetime | None = None,
) -> list[dict[str, Any]]:
    """One judging's records, in one transaction: each candidate (case, n_cases for the suite else None, figure)
    that ``beats`` the series' record replaces it (an event when there was one); then the series' current
    ``levels`` rows are replaced by ``levels``, each flagged ``below_record`` against the record (``below``),
    ``below_since`` kept from the row before while it stays below. Returns the events written."""
    where = {"hardware_label": hardware_label, "gpu_model": gpu_model, "protocol": protocol}
    now = _now()
    with db.transaction() as conn:
        current = current_records(conn, hardware_label, protocol)
        events = apply_candidates(
            conn, where, candidates, current, k=k, min_effect=min_effect, observed_at=observed_at, now=now
        )
        if levels:
            before = {
                (r[0], r[1]): r[2]
                for r in conn.execute(
                    """SELECT case_name, n_cases, below_since FROM levels
                       WHERE hardware_label = ? AND protocol = ? AND below_record""",
                    [hardware_label, protocol],
                ).fetchall()
            }
            conn.execute("DELETE FROM levels WHERE hardware_label = ? AND protocol = ?", [hardware_label, protocol])
            rows = []
            for case, n_cases, fig in levels:
                key = (case, n_cases)
                rec = current.get(key)
                low = below(fig, rec, k=k, min_effect=min_effect)
                since = (before.get(key) or fig.commit) if low else None
                rows.append(
                    [
                        hardware_label,
                        protocol,
                        case,
                        n_cases,
                        fig.latency_us,
                        fig.lo_us,
                        fig.hi_us,
                        fig.n_runs,
                        fig.pct_sol,
                        fig.commit,
                        fig.run_id,
                        None if rec is None else rec.latency_us,
                        None if rec is None else rec.commit,
                        low,
                        since,
                        now,
                    ]
                )
            conn.execute(
                "INSERT INTO levels VALUES " + ", ".join(["(" + ", ".join(["?"] * 16) + ")"] * len(rows)),
                [v for r in rows for v in r],
            )
    return events
