"""ci.verdict.confirm: the interleaved re-measurement (A B B A) that confirms or clears a suspect run."""

from __future__ import annotations

from ci.verdict.confirm import Confirmation, Measured, interleaved_runs
from ci.verdict.rules import RunFigures
from storage.db import Database


def test_the_confirmation_loop_interleaves_stops_on_clean_pairs_and_at_a_failed_run(db: Database) -> None:
    """ci.verdict.confirm: A B B A for two pairs; a throttled pair costs a pair more (two at most); a run that
    failed stops the confirmation there, the runs so far kept."""

    def runs(throttled: set[int], fail_at: int | None = None) -> list[tuple[str, str]]:
        measured: list[str] = []

        def run(label: str, sha: str) -> RunFigures | None:
            measured.append(sha)
            if len(measured) == fail_at:
                return None
            hot = frozenset({"B1_S256"}) if len(measured) in throttled else frozenset()
            return RunFigures(f"r{len(measured)}", sha, {"B1_S256": 10.0}, throttled=hot)

        out = interleaved_runs("p", "c", ["B1_S256"], pairs=2, run=run, figures=lambda fig: fig)
        return [(label, fig.commit) for label, fig in out]

    assert runs(set()) == [("A", "p"), ("B", "c"), ("B", "c"), ("A", "p")]
    assert [label for label, _ in runs({2})] == ["A", "B", "B", "A", "A", "B"]  # a third pair replaces the first
    assert len(runs({1, 3, 5, 7})) == 8  # every pair throttled: two pairs more, then it stops
    assert runs(set(), fail_at=3) == [("A", "p"), ("B", "c")]

    said: list[tuple[str, str]] = []
    confirm = Confirmation(
        db,
        lambda commit, cases: Measured(None, "crashed", "the log of the run"),
        pairs=2,
        say=lambda event, *, detail="": said.append((event, detail)),
    )
    assert confirm("p" * 40, "c" * 40, ["B1_S256"]) == []
    assert said[0][0].startswith("confirming: cccccccccccc (B) against pppppppppppp (A), 2 interleaved pairs")
    assert said[1:] == [
        ("confirmation run 1 (A: pppppppppppp)", ""),
        ("confirmation run of pppppppppppp failed (crashed):", "the log of the run"),
    ]
