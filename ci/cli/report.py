"""``solci report``'s content: the verdict of each commit as a reviewer wants it, made from stored rows (pure).

    build_report(rows, dashboard_url=..., base=None, merge_bases=None) -> Report   rows: queries.commit_report
    render(report, "markdown" | "json" | "text") -> str                    Report.from_dict(json.loads(...))

Per commit: the verdict, the cases moved out of N, the suite change with its interval, a table of the moved
cases (before, after, change, interval), the worst case, the step's status (and its acknowledgement), how far
the series' current level is from the project record, the first error line of a broken run, and a link to the
commit in the dashboard (``?commit=SHA``). A commit never measured says so. Nothing here reads storage or git:
the command (``ci.cli.read``) reads through ``storage.queries`` and resolves ranges with git.

Every text that comes from a commit or a log (branch, messages, error lines, reasons) is printed with its
control characters visible (``ci.harness.terminal.visible``); in Markdown it is also escaped, pipes included.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from ci.harness.terminal import visible

FORMATS = ("markdown", "json", "text")
DEFAULT_DASHBOARD_URL = "http://localhost:8501"
DASHBOARD_URL_ENV = "SOLCI_DASHBOARD_URL"
# The runner's exit codes (README "Exit codes"): a regressed commit whose step is open fails (3), a broken one (1).
EXIT_OK, EXIT_BROKEN, EXIT_REGRESSED = 0, 1, 3
BROKEN_VERDICTS = frozenset({"incorrect", "broken", "quarantined", "rejected"})
SUITE = "__suite__"


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    try:
        if v != v:  # pandas' NA / NaT
            return None
    except (TypeError, ValueError):
        return None
    s = str(v)
    return s if s and s not in ("NaT", "<NA>", "nan") else None


def _int(v: Any) -> int | None:
    f = _num(v)
    return None if f is None else int(f)


@dataclass
class MovedCase:
    case: str
    before_us: float | None
    after_us: float | None
    change: float | None
    lo: float | None
    hi: float | None


@dataclass
class CommitReport:
    """One commit's row of a report; ``measured`` False: never measured (the rest is empty)."""

    commit: str
    measured: bool
    link: str
    run_id: str | None = None
    branch: str | None = None
    hardware: str | None = None
    protocol: str | None = None
    verdict: str | None = None  # None: measured, not judged
    n_cases: int | None = None
    cases_moved: int | None = None
    suite_change: float | None = None
    suite_lo: float | None = None
    suite_hi: float | None = None
    worst_case: str | None = None
    worst_change: float | None = None
    moved: list[MovedCase] = field(default_factory=list)
    step_id: str | None = None
    step_status: str | None = None
    step_detected_by: str | None = None
    ack_reason: str | None = None
    fixed_by: str | None = None
    baseline_commit: str | None = None
    level_commits: int | None = None
    level_us: float | None = None
    record_us: float | None = None
    record_gap: float | None = None  # the current level / the record - 1
    record_standing: str | None = None
    error_line: str | None = None
    failed_case: str | None = None
    message: str | None = None
    n_runs: int | None = None
    merge_base: str | None = None  # a pull request's run: the merge-base whose level it was judged against

    @property
    def exit_code(self) -> int:
        """1 broken, 3 regressed with its step open, else 0 (never measured: 0, the row says so)."""
        if self.verdict in BROKEN_VERDICTS:
            return EXIT_BROKEN
        if self.verdict == "regressed" and self.step_status == "open":
            return EXIT_REGRESSED
        return EXIT_OK


@dataclass
class Report:
    commits: list[CommitReport]
    base: str | None = None  # the --base REF: each commit off its line is judged against its merge-base with it

    @property
    def exit_code(self) -> int:
        codes = {c.exit_code for c in self.commits}
        return EXIT_BROKEN if EXIT_BROKEN in codes else (EXIT_REGRESSED if EXIT_REGRESSED in codes else EXIT_OK)

    @property
    def notes(self) -> list[str]:
        if self.base is None:
            return []
        return [
            f"against {self.base}: each commit is judged against the level of its merge-base with {self.base} "
            "(re-measured beside it when it moved), in a series of its own that never moves the base's levels"
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "notes": self.notes,
            "exit_code": self.exit_code,
            "commits": [{**asdict(c), "exit_code": c.exit_code} for c in self.commits],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Report:
        commits = []
        for c in d["commits"]:
            fields = {k: v for k, v in c.items() if k not in ("exit_code", "moved")}
            commits.append(CommitReport(**fields, moved=[MovedCase(**m) for m in c.get("moved") or []]))
        return cls(commits=commits, base=d.get("base"))


def dashboard_link(base_url: str, commit: str, base: str | None = None) -> str:
    """The dashboard opened on ``commit`` (it selects that commit's newest run); with ``base``, on its run judged
    against that merge-base (a pull request's, which the dashboard shows beside main's level)."""
    link = f"{base_url.rstrip('/')}/?commit={quote(commit, safe='')}"
    return link if base is None else f"{link}&base={quote(base, safe='')}"


def commit_report(
    commit: str, rows: Mapping[str, Any] | None, *, dashboard_url: str, merge_base: str | None = None
) -> CommitReport:
    """One commit's report from ``storage.queries.commit_report``'s rows (None: never measured; with
    ``merge_base``, never measured against it)."""
    if rows is None:
        return CommitReport(
            commit=commit, measured=False, link=dashboard_link(dashboard_url, commit), merge_base=merge_base
        )
    run, step, level = rows["run"], rows.get("step"), rows.get("level")
    sha = str(run["commit"])
    moved = rows.get("moved")
    records = moved.to_dict("records") if hasattr(moved, "to_dict") else list(moved or [])
    cases = [
        MovedCase(
            case=str(m["case"]),
            before_us=_num(m.get("before_us")),
            after_us=_num(m.get("after_us")),
            change=_num(m.get("change")),
            lo=_num(m.get("lo")),
            hi=_num(m.get("hi")),
        )
        for m in records
        if m["case"] != SUITE
    ]
    step = step or {}
    level = level or {}
    return CommitReport(
        commit=sha,
        measured=True,
        link=dashboard_link(dashboard_url, sha, _text(run.get("base"))),
        run_id=_text(run.get("run_id")),
        branch=_text(run.get("branch")),
        hardware=_text(run.get("hardware")),
        protocol=_text(run.get("protocol_name")) or _text(run.get("protocol")),
        verdict=_text(run.get("verdict")),
        n_cases=_int(run.get("n_cases")) or _int(run.get("run_n_cases")),
        cases_moved=_int(run.get("cases_moved")),
        suite_change=_num(run.get("suite_change")),
        suite_lo=_num(run.get("suite_lo")),
        suite_hi=_num(run.get("suite_hi")),
        worst_case=_text(run.get("worst_case")) or _text(step.get("worst_case")),
        worst_change=_num(run.get("worst_change")) if _text(run.get("worst_case")) else _num(step.get("worst_change")),
        moved=cases,
        step_id=_text(step.get("step_id")),
        step_status=_text(step.get("status")),
        step_detected_by=_text(step.get("detected_by")),
        ack_reason=_text(step.get("ack_reason")),
        fixed_by=_text(step.get("fixed_by_commit")),
        baseline_commit=_text(run.get("baseline_commit")),
        level_commits=_int(run.get("level_commits")),
        level_us=_num(level.get("level_us")),
        record_us=_num(level.get("record_us")),
        record_gap=_num(level.get("gap")),
        record_standing=_text(level.get("standing")),
        error_line=_text(run.get("error_line")),
        failed_case=_text(run.get("failed_case")),
        message=_text(run.get("message")),
        n_runs=_int(run.get("n_runs")),
        merge_base=_text(run.get("base")),
    )


def build_report(
    rows: Sequence[tuple[str, Mapping[str, Any] | None]],
    *,
    dashboard_url: str = DEFAULT_DASHBOARD_URL,
    base: str | None = None,
    merge_bases: Mapping[str, str] | None = None,
) -> Report:
    """A report from (commit as asked, its ``storage.queries.commit_report`` rows or None), oldest first;
    ``base``: the base REF asked for, ``merge_bases``: each commit off its line and its merge-base with it."""
    mbs = merge_bases or {}
    return Report([commit_report(c, r, dashboard_url=dashboard_url, merge_base=mbs.get(c)) for c, r in rows], base=base)


# ------------------------------------------------------------------------------------------------ renderers
def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"


def _interval(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"[{lo:+.1%}, {hi:+.1%}]"


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _md(text: object) -> str:
    """Stored text for Markdown: controls visible, Markdown's special characters (pipes too) escaped."""
    out = visible(text).replace("\n", " ")
    return "".join("\\" + ch if ch in "\\`*_[]<>#!|~" else ch for ch in out)


def _moved_of(c: CommitReport) -> str:
    if c.cases_moved is None:
        return "-"
    return f"{c.cases_moved} of {c.n_cases}" if c.n_cases else str(c.cases_moved)


# how a step was found (ci.verdict.rules.Step.detected_by), as a reviewer reads it
_DETECTED = {
    "confirmed": "confirmed in interleaved pairs",
    "screen": "seen at screening",
    "late": "found by the late search",
}


def _step_text(c: CommitReport) -> str | None:
    if c.step_status is None:
        return None
    text = f"{c.step_id}: {c.step_status}"  # the id already ends in "-step"
    if c.step_detected_by:
        text += f" ({_DETECTED.get(c.step_detected_by, 'detected ' + c.step_detected_by)})"
    if c.fixed_by:
        text += f", fixed by {c.fixed_by[:12]}"
    return text


def _record_text(c: CommitReport) -> str | None:
    if c.level_us is None:
        return None
    whose = "main's current level" if c.merge_base else "current level"  # a pull request's run moves no level
    if c.record_us is None:
        return f"{whose} {c.level_us:.2f} µs; no project record yet"
    return (
        f"{whose} {c.level_us:.2f} µs, {_pct(c.record_gap)} from the project record {c.record_us:.2f} µs "
        f"({c.record_standing})"
    )


def _lines(c: CommitReport, esc) -> list[tuple[str, str]]:
    """(label, value) lines of one measured commit, values escaped by ``esc``."""
    out = [
        ("verdict", esc(c.verdict or "not judged")),
        ("cases moved", f"{_moved_of(c)}"),
        ("suite change", f"{_pct(c.suite_change)} {_interval(c.suite_lo, c.suite_hi)}"),
    ]
    if c.worst_case:
        out.append(("worst case", f"{esc(c.worst_case)} {_pct(c.worst_change)}"))
    step = _step_text(c)
    out.append(("step", esc(step) if step else "none"))
    if c.ack_reason:
        out.append(("acknowledged", esc(c.ack_reason)))
    rec = _record_text(c)
    if rec:
        out.append(("record", esc(rec)))
    if c.error_line:
        out.append(("first error", esc(f"{c.failed_case}: {c.error_line}" if c.failed_case else c.error_line)))
    if c.baseline_commit:
        n = f" ({c.level_commits} commits)" if c.level_commits else ""
        of = f"the level of the merge-base {c.merge_base[:12]}, " if c.merge_base else "the level "
        out.append(("judged against", esc(f"{of}ending at {c.baseline_commit[:12]}{n}")))
    where = ", ".join(x for x in (c.hardware, c.protocol, f"run {c.run_id}" if c.run_id else None) if x)
    out.append(("measured", esc(f"{where}; branch {c.branch or '-'}")))
    return out


def render_markdown(report: Report) -> str:
    parts = [f"## solci report: {len(report.commits)} commit{'s' if len(report.commits) != 1 else ''}", ""]
    parts += [f"> {_md(n)}" for n in report.notes]
    for c in report.commits:
        head = f"### `{_md(c.commit[:12])}`"
        if not c.measured:
            against = f" against its merge-base {_md(c.merge_base[:12])}" if c.merge_base else ""
            parts += ["", f"{head}: never measured{against}", "", f"[dashboard]({c.link})"]
            continue
        parts += ["", f"{head}: **{_md(c.verdict or 'not judged')}**", ""]
        parts += [f"- {label}: {value}" for label, value in _lines(c, _md)[1:]]
        if c.moved:
            parts += [
                "",
                "| case | before (µs) | after (µs) | change | interval |",
                "| --- | ---: | ---: | ---: | --- |",
            ]
            parts += [
                f"| {_md(m.case)} | {_us(m.before_us)} | {_us(m.after_us)} | {_pct(m.change)} | "
                f"{_interval(m.lo, m.hi)} |"
                for m in c.moved
            ]
        parts += ["", f"[{_md(c.commit[:12])} in the dashboard]({c.link})"]
    return "\n".join(parts) + "\n"


def render_text(report: Report) -> str:
    parts = [f"solci report: {len(report.commits)} commit{'s' if len(report.commits) != 1 else ''}"]
    parts += [f"note: {visible(n)}" for n in report.notes]
    for c in report.commits:
        parts.append("")
        if not c.measured:
            against = f" against its merge-base {visible(c.merge_base[:12])}" if c.merge_base else ""
            parts += [f"{visible(c.commit[:12])}  never measured{against}", f"  dashboard: {c.link}"]
            continue
        parts.append(f"{visible(c.commit[:12])}  {visible((c.verdict or 'not judged').upper())}")
        parts += [f"  {label}: {value}" for label, value in _lines(c, visible)[1:]]
        if c.moved:
            rows = [("case", "before_us", "after_us", "change", "interval")] + [
                (visible(m.case), _us(m.before_us), _us(m.after_us), _pct(m.change), _interval(m.lo, m.hi))
                for m in c.moved
            ]
            widths = [max(len(r[i]) for r in rows) for i in range(5)]
            parts += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        parts.append(f"  dashboard: {c.link}")
    return "\n".join(parts) + "\n"


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True)


def render(report: Report, fmt: str) -> str:
    """The report in ``fmt`` (markdown | json | text); ValueError for another format."""
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "json":
        return render_json(report) + "\n"
    if fmt == "text":
        return render_text(report)
    raise ValueError(f"report: unknown format {fmt!r} (markdown, json or text)")
