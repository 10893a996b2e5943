"""Fakes for the runner's tests: ``FakeExecutor`` fabricates result documents (tests/support/factories.py) instead
of measuring, as its ``plan`` says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ci.service.executors.base import Execution, MeasureOptions
from tests.support.factories import default_median_us, make_result

T0 = datetime(2026, 11, 1, tzinfo=UTC)


class FakeExecutor:
    """Returns what ``plan[commit]`` says: pass / slow / slow:CASE,... (those cases 10 % slower) / incorrect /
    error-case / build_failed / timed_out / crashed / raise; GPU-labelled documents of the cases
    ``options.cases`` asks for (default two cases), so the runner's confirmation (interleaved re-measurements of
    the commit and its parent) runs through it too."""

    name = "fake"

    def __init__(self, plan: dict[str, str], cases: tuple[str, ...] = ("B1_S256", "B4_S128")) -> None:
        self.plan = plan
        self.cases = cases
        self.calls: list[str] = []
        self.asked: list[str | None] = []
        self.cleaned = 0

    def execute(
        self, source: Path, commit: str, *, branch: str | None, repo: str, options: MeasureOptions
    ) -> Execution:
        self.calls.append(commit)
        self.asked.append(options.cases)
        what = self.plan[commit]
        started = T0 + timedelta(hours=len(self.calls))
        cases = options.cases.split(";") if options.cases else list(self.cases)
        common = {"commit": commit, "cases": cases, "started_at": started, "repo": repo, "branch": branch}
        if what == "pass":
            return Execution("ok", make_result(**common), "measured", 1.0)
        if what == "slow":
            return Execution("ok", make_result(**common, scale=2.0), "measured", 1.0)
        if what.startswith("slow:"):
            slower = {c: default_median_us(c) * (1.1 if c in what[5:].split(",") else 1.0) for c in cases}
            return Execution("ok", make_result(**common, medians=slower), "measured", 1.0)
        if what == "incorrect":
            return Execution("ok", make_result(**common, status={"B1_S256": "incorrect"}), "measured", 1.0)
        if what == "error-case":
            return Execution("ok", make_result(**common, status={"B4_S128": "error"}), "measured", 1.0)
        if what == "timeout-case":
            return Execution("ok", make_result(**common, status="timeout"), "measured", 1.0)
        if what == "raise":
            raise RuntimeError("the executor blew up")
        return Execution(what, None, f"fake {what}", 1.0)

    def cleanup_stale(self) -> list[str]:
        self.cleaned += 1
        return []
