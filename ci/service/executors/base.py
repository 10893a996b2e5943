"""What every executor shares: the options passed to ``solci measure``, what an execution returns, the
progress lines, the command and the reading of a result document."""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from storage.result import SchemaError, parse

EXECUTOR_ENV = "SOLCI_EXECUTOR"
EXECUTOR_KINDS = ("auto", "docker", "local")
# The history an executor works for when none was given (``storage.spool.history_key`` of the runner's database
# otherwise): what keys its work folders, containers and clean-up (``Executor.cleanup_stale``).
NO_HISTORY = "adhoc"
LOG_LIMIT = 64_000  # characters of a log kept with a job (head and tail)

# What an execution ended with. "ok": a valid result document came back (it may still say incorrect).
EXEC_STATUSES = ("ok", "build_failed", "crashed", "timed_out", "error")


@dataclass
class MeasureOptions:
    """Options passed through to ``solci measure`` (None: measure's default), and the whole-run limit."""

    cases: str | None = None
    rounds: int | None = None
    warmup: int | None = None
    iters: int | None = None
    case_timeout: float | None = None
    impl: str | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 3600.0  # seconds for one whole measurement (build excluded)
    # Called with each case's line as the harness prints it, while the measurement runs (see Progress).
    progress: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    def cli_args(self) -> list[str]:
        args: list[str] = []
        for flag, value in (
            ("--cases", self.cases),
            ("--rounds", self.rounds),
            ("--warmup", self.warmup),
            ("--iters", self.iters),
            ("--case-timeout", self.case_timeout),
            ("--impl", self.impl),
        ):
            if value is not None:
                args += [flag, str(value)]
        return [*args, *self.extra_args]


@dataclass
class Execution:
    """What an executor brings back: a status, the parsed result document (status ok only; storage validates
    it) and the log."""

    status: str
    doc: dict | None
    log: str
    wall_s: float = 0.0
    exit_code: int | None = None
    executor: str = ""

    def __post_init__(self) -> None:
        if self.status not in EXEC_STATUSES:
            raise ValueError(f"execution status {self.status!r} not in {EXEC_STATUSES}")


class Executor(Protocol):
    name: str

    def execute(
        self, source: Path, commit: str, *, branch: str | None, repo: str, options: MeasureOptions
    ) -> Execution:
        """Measure ``commit`` of the local repository ``source``; ``repo``/``branch`` label the result."""
        ...

    def cleanup_stale(self) -> list[str]:
        """Remove what a killed earlier runner of this host, history and GPU slot left behind (its owner, by
        host, pid and process start time, is gone; never by a name alone); return what was removed."""
        ...


class ExecutorUnavailable(RuntimeError):
    """The requested executor cannot run here (e.g. no Docker engine answers); the message says why."""


# What the harness prints as it goes (ci.harness.measure): the header, which names the hardware ("solci measure: 16
# cases on NVIDIA H200 (gpu), ..."), and each finished case ("   B4_S128  pass   kernel 123.4 us ...").
_CASE_LINE = re.compile(r"solci measure: \d+ cases on |\s*B\d+_S\d+\s+\w+\s+kernel\s")


class Progress:
    """Follows a measurement's output as it comes and passes the header (it names the hardware) and each
    finished case's line to ``echo``: the engineer sees the cases go by instead of a silent minute. Only lines
    of those shapes, printable characters only, at most 200 of them: the output also holds whatever the
    commit's kernel printed. It is progress, never a figure of record (those come from the validated result
    document)."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._rest = ""

    def feed(self, chunk: bytes) -> None:
        *done, self._rest = (self._rest + self._decode.decode(chunk)).split("\n")
        for line in done:
            line = line.split("\r")[-1]
            if _CASE_LINE.match(line):
                self.echo(" ".join("".join(c for c in line if c.isprintable()).split())[:200])


def measure_command(out: str, commit: str, branch: str | None, repo: str, options: MeasureOptions) -> list[str]:
    """The arguments of ``solci measure`` (after ``python -m ci.harness.measure``, the command alone)."""
    cmd = ["--out", out, "--commit", commit, "--repo", repo]
    if branch:
        cmd += ["--branch", branch]
    return cmd + options.cli_args()


def gpu_index(gpu: str) -> str | None:
    """'gpu3' -> '3' (the CUDA device a worker for that slot uses); None for labels without a number."""
    m = re.fullmatch(r"(?:gpu|cuda:?)?(\d+)", gpu.strip().lower())
    return m.group(1) if m else None


def clip_log(text: str, limit: int = LOG_LIMIT) -> str:
    if len(text) <= limit:
        return text
    head = limit // 8
    return f"{text[:head]}\n... [{len(text) - limit} characters left out] ...\n{text[-(limit - head) :]}"


def read_result(text: str | bytes, where: str) -> tuple[dict | None, str]:
    """Parse a result document (strict JSON, bounded size, an object): (doc, "") or (None, why). It is NOT
    validated here: storage validates at ingest and stores a document that fails as a rejected run."""
    try:
        return parse(text, where), ""
    except SchemaError as exc:
        return None, str(exc)


def finish_measurement(
    status: str, code: int | None, result: bytes | None, lines: list[str], timeout: float
) -> tuple[str, dict | None]:
    """What a finished ``solci measure`` comes to, for both executors: (status, parsed document or None).

    ``status`` is how the process ended (ok: it exited by itself with ``code``; timed_out: killed at ``timeout``
    seconds; error: it could not be run), ``result`` the document it wrote (None: none). An ok run without a
    document, or with one that does not parse, is crashed. What happened is appended to ``lines`` (the log)."""
    doc = None
    if status == "ok":
        if result is None:
            status = "crashed"
            lines.append(f"[solci] measure exited with {code} and wrote no result")
        else:
            doc, why = read_result(result, "result.json")
            if doc is None:
                status = "crashed"
                lines.append(f"[solci] {why}")
    if status == "timed_out":
        lines.append(f"[solci] killed after {timeout:.0f} s (timeout)")
    elif doc is not None and code:
        lines.append(f"[solci] measure exit status {code}")
    return status, doc
