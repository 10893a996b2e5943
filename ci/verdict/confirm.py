"""The confirmation of a run that moved: interleaved re-measurements of its commit (B) and its parent (A).

When a run moved at screening (and when a late step is searched for), ``ci.verdict.apply.judge_run`` asks for
fresh runs of the commit and the commit it is judged against. This module holds the loop that decides them:

- the order of the runs: ``rules.interleave`` (A B B A A B ...: A the parent, B the commit), a pair at a time;
- when to stop: once ``JudgeConfig.pairs`` pairs are free of throttling (``rules.clean_pairs``), after two
  pairs more at most;
- what a failed run means: the confirmation stops there, and the runs so far decide (as for any confirmation
  cut short).

Measuring a commit is the caller's: a ``MeasureCommit`` measures one commit on the given cases, stores the run
and says its run id or why there is none (the job runner does it on the GPU, ``ci.service.runner``).
``Confirmation`` is the loop over such a measurer, in the form ``judge_run(confirm=...)`` takes;
``interleaved_runs`` is the loop alone, over any measurement (the simulation's machine measures figures).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ci.verdict.apply import figures_from_rows
from ci.verdict.rules import RunFigures, clean_pairs, interleave, pair_up
from storage import queries
from storage.db import Database

T = TypeVar("T")
LOG_TAIL = 4000  # characters of a failed confirmation run's log kept in the job's log


@dataclass(frozen=True)
class Measured:
    """One confirmation run as its measurer saw it: the stored run's id, or why none was stored."""

    run_id: str | None  # None: the run failed (nothing of it counts)
    failure: str = ""  # why it failed: the measurement's status, "suite fail", "rejected: ...", ...
    log: str = ""  # the measurement's own log (its tail is told when the run failed)


class MeasureCommit(Protocol):
    """Measure ``commit`` on only ``cases`` and store the run (purpose confirm): its run id, or why it failed."""

    def __call__(self, commit: str, cases: list[str]) -> Measured: ...


class Say(Protocol):
    """Where the confirmation tells what it does: an event, and optionally a detail (a log) that goes with it."""

    def __call__(self, event: str, *, detail: str = "") -> None: ...


def _silent(event: str, *, detail: str = "") -> None:
    return None


def interleaved_runs(
    parent: str,
    commit: str,
    cases: Sequence[str],
    *,
    pairs: int,
    run: Callable[[str, str], T | None],
    figures: Callable[[T], RunFigures],
) -> list[tuple[str, T]]:
    """The confirmation loop: ``run(label, sha)`` for each run of ``interleave(pairs + 2)`` ("A": ``parent``,
    "B": ``commit``), a pair at a time, until ``pairs`` pairs are free of throttling on ``cases`` (their
    ``figures``); a run that gives None (it failed) stops the loop there. The runs measured, in order."""
    order = interleave(pairs + 2)
    done: list[tuple[str, T]] = []
    figs: list[tuple[str, RunFigures]] = []
    while len(done) < len(order):
        for label in order[len(done) : len(done) + 2]:
            got = run(label, parent if label == "A" else commit)
            if got is None:
                return done
            done.append((label, got))
            figs.append((label, figures(got)))
        if len(clean_pairs(pair_up(figs), cases)) >= pairs:
            break
    return done


@dataclass
class Confirmation:
    """``judge_run``'s ``confirm``: interleaved runs of the parent (A) and the commit (B), each a fresh measurement
    of only the cases in question by ``measure`` (which stores it), until ``pairs`` pairs are free of throttling
    (two pairs more at most). A run that failed stops the confirmation there: the runs so far decide."""

    db: Database
    measure: MeasureCommit
    pairs: int
    say: Say = _silent

    def __call__(self, parent: str, commit: str, cases: list[str]) -> list[tuple[str, str]]:
        self.say(
            f"confirming: {commit[:12]} (B) against {parent[:12]} (A), "
            f"{self.pairs} interleaved pairs, cases {', '.join(cases)}"
        )
        measured = 0

        def run(label: str, sha: str) -> str | None:
            nonlocal measured
            measured += 1
            self.say(f"confirmation run {measured} ({label}: {sha[:12]})")
            got = self.measure(sha, cases)
            if got.run_id is None:
                self.say(f"confirmation run of {sha[:12]} failed ({got.failure}):", detail=got.log[-LOG_TAIL:])
            return got.run_id

        return interleaved_runs(parent, commit, cases, pairs=self.pairs, run=run, figures=self._figures)

    def _figures(self, run_id: str) -> RunFigures:
        return figures_from_rows(queries.run_figures(self.db, run_id))[0]
