"""Re-run by hand the eight probes of issue 19 against the real product, as a hostile contributor or a careless
user would, and print one table: finding, what was tried, what happened, held or FAILED (exit 1 if any FAILED).

Everything happens in a temporary folder (``--keep DIR`` keeps it at DIR, with every command's output in
``logs/``): project repositories made as ``tests/support/repo_factory.make_project_repo`` makes them, the
``solci`` command line (``solci run``, ``up``, ``sql``, ``jobs --log``, ``enqueue``, ``spool flush``, ``worker``,
``records``), the local executor in its bubblewrap sandbox, the CPU interpreter, one small case (``--cases 1,7
--iters 2 --rounds 1 --warmup 0 --no-confirm``). HOME and $SOLCI_WORK point into the folder, so no spool or work
folder of this user is touched. The command line is this tree's ``ci.cli`` (what the ``solci`` entry point
runs), from a copy of the tree taken at the start so that an edit made while the probes run is not mixed into
them; ``--installed`` runs the installed ``solci`` on the live tree instead.

  1  a kernel writing 200 MB files into its $TMPDIR until it cannot; 200 MB under its Triton cache
  2  800 MB written to the message pipe without a newline; the harness process's peak memory (VmHWM, sampled)
  3  a configuration describing itself as ~50 MB of small strings (and one of 2 MB, under the message limits);
     the history's size before and after
  4  `solci sql` with `PRAGMA import_database('DIR')` (a DIR holding a schema.sql), a missing DIR, a URL whose
     listener must get no request, the other spellings of an import or export; table functions that read a
     path or URL (refused with one line, as the issue asks)
  5  a 10-million-row generate_series (row cap, peak memory), a query past its --timeout, and a long `solci sql`
     read holding the history while `solci run` measures: the run must still be stored and judged, exit 0
  6  a crashed commit whose error text prints "\\x1b[2K\\rPASSED": `solci run` and `solci jobs --log` show the
     escapes, exit 1
  7  two checkouts, two histories, one host and one $SOLCI_WORK: a second runner (`solci up`) must neither remove
     the first one's work folder nor say "removed ... leftover(s)"; a runner killed mid-run is cleaned up by the
     next runner of its own history
  8  a GPU-looking result of no known GPU model with a 1e-9 us figure (a spooled document, flushed, judged by
     `solci worker`): stored, labelled, judged functional only, never a record

Probes 5 and 7 run last. Each takes 10 s to 2 minutes on a 2-core machine (the table says how long), all
eight about 10 minutes.

    .venv/bin/python scripts/probe_hardening.py [--only 1,6] [--keep DIR] [--installed]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ORDER = (1, 2, 3, 4, 6, 8, 5, 7)  # 5 and 7 last


def run_opts(cases: str = "1,7") -> list[str]:
    """The options of every measurement here: the local executor (bwrap), small, no re-measurement."""
    return ["--executor", "local", "--cases", cases, "--iters", "2", "--rounds", "1", "--warmup", "0", "--no-confirm"]


MB = 10**6
MiB = 2**20
ESC_SEEN = re.compile(r"[\x1b\r\x9b]")  # a raw terminal control in what a command printed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="probe_hardening.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", help="the probes to run, e.g. 1,6 (default: all eight)")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary folder, removed)")
    ap.add_argument(
        "--installed",
        action="store_true",
        help="run the installed `solci` on the live tree (default: the same CLI from a copy of the tree taken at "
        "the start, so that an edit made while the probes run is not mixed into them)",
    )
    args = ap.parse_args(argv)
    try:
        wanted = {int(x) for x in args.only.split(",") if x.strip()} if args.only else set(ORDER)
    except ValueError:
        ap.error(f"--only: expected finding numbers such as 1,6, got {args.only!r}")
    if not wanted <= set(ORDER):
        ap.error(f"--only: the findings are 1 to 8, got {args.only!r}")
    args.findings = [n for n in ORDER if n in wanted]
    return args


# ------------------------------------------------------------------------------------------------ running solci
@dataclass
class Proc:
    """A finished command: exit code, what it printed, its wall time and the peak RSS of it and its waited-for
    descendants (wait4's ru_maxrss)."""

    rc: int
    out: str
    err: str
    wall: float
    maxrss_mb: float

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Started:
    """A command running in the background (its own session), its output in files."""

    popen: subprocess.Popen
    out_path: Path
    err_path: Path
    t0: float

    def alive(self) -> bool:
        """Whether it still runs (without reaping it: ``wait`` reads its resource usage when it is reaped)."""
        if self.popen.returncode is not None:
            return False
        try:
            return os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def wait(self, timeout: float) -> Proc:
        deadline = time.monotonic() + timeout
        status, usage = 0, None
        while True:
            if self.popen.returncode is not None:  # reaped already (no resource usage to read)
                return Proc(self.popen.returncode, self._read(self.out_path), self._read(self.err_path), 0.0, 0.0)
            pid, status, usage = os.wait4(self.popen.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                self.kill()
                _pid, status, usage = os.wait4(self.popen.pid, 0)
                break
            time.sleep(0.1)
        self.popen.returncode = os.waitstatus_to_exitcode(status)
        return Proc(
            self.popen.returncode,
            self._read(self.out_path),
            self._read(self.err_path),
            time.monotonic() - self.t0,
            usage.ru_maxrss / 1024 if usage else 0.0,
        )

    @staticmethod
    def _read(path: Path) -> str:
        return path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL this command's own process group (it was started in a session of its own)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)


class Lab:
    """The temporary folder and the environment every command runs in."""

    def __init__(self, root: Path, *, installed: bool) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        venv = ROOT / ".venv" / "bin"
        if installed:  # the `solci` entry point as installed: the live working tree
            self.product: Path | None = None
            self.command = [str(venv / "solci") if (venv / "solci").exists() else (shutil.which("solci") or "solci")]
        else:  # the same CLI (ci.cli.main) from a copy of the tree taken now: an edit made meanwhile is not mixed in
            self.product = snapshot(root / "product")
            python = venv / "python"
            # -P: the working directory (a checkout holding a ci/ of its own) is not put first on sys.path, as
            # it is not for the installed entry point
            self.command = [str(python) if python.exists() else sys.executable, "-P", "-m", "ci.cli"]
        self.n = 0

    def describe(self) -> str:
        if self.product is None:
            return f"the installed {self.command[0]}"
        return f"`{' '.join(self.command)}` on a copy of {ROOT} ({head_of(ROOT)}) in {self.product}"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SOLCI_", "PYTHON", "GIT_", "TRITON_"))}
        env.update(HOME=str(self.home), SOLCI_WORK=str(self.root / "work"))
        if self.product is not None:
            env["PYTHONPATH"] = str(self.product)
        env.update(extra)
        return env

    def start(self, args: list[str], *, cwd: Path, env: dict[str, str] | None = None, nice: int = 0) -> Started:
        self.n += 1
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        out, err = logs / f"{self.n:03d}.out", logs / f"{self.n:03d}.err"
        (logs / f"{self.n:03d}.cmd").write_text(" ".join(args) + f"\n(cwd {cwd})\n")
        with open(out, "wb") as fo, open(err, "wb") as fe:
            popen = subprocess.Popen(
                [*self.command, *args],
                cwd=cwd,
                env=env or self.env(),
                stdin=subprocess.DEVNULL,
                stdout=fo,
                stderr=fe,
                start_new_session=True,
                preexec_fn=(lambda: os.nice(nice)) if nice else None,
            )
        return Started(popen, out, err, time.monotonic())

    def solci(self, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> Proc:
        return self.start(list(args), cwd=cwd, env=env).wait(timeout)

    def repo(self, name: str):
        """A project repository as ``tests.support.repo_factory.make_project_repo`` makes it (from the copy)."""
        from tests.support import repo_factory  # lazy: only when a probe runs, never for --help

        if self.product is not None:
            repo_factory.PROJECT = self.product
        repo = repo_factory.make_project_repo(self.root / name)
        with open(repo.path / ".git" / "info" / "exclude", "a") as fh:  # its history is no part of its commits
            fh.write(".solci/\n")
        return repo


PRODUCT = ("ci", "storage", "problem", "kernel", "dashboard", "pyproject.toml", "Dockerfile", ".dockerignore", "docker")


def snapshot(dest: Path) -> Path:
    """A copy of the product's sources (what the installed ``solci`` imports, and what a project repository holds)."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    dest.mkdir(parents=True, exist_ok=True)
    for name in PRODUCT:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=skip, dirs_exist_ok=True)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def head_of(path: Path) -> str:
    """The commit checked out at ``path`` and whether its tree has uncommitted changes (read only)."""
    git = ["git", "--no-optional-locks", "-C", str(path)]  # reads only: never refreshes the index
    try:
        head = subprocess.run([*git, "log", "-1", "--format=%h"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    except OSError:
        return "no git"
    changed = [ln for ln in dirty.stdout.splitlines() if ln and not ln.startswith("??")]
    return f"HEAD {head.stdout.strip() or '?'}" + (f" + {len(changed)} uncommitted file(s)" if changed else "")


def history(repo_path: Path) -> Path:
    return repo_path / ".solci" / "history.duckdb"


def sql_values(lab: Lab, repo_path: Path, query: str, *, env: dict[str, str] | None = None) -> list[str]:
    """What `solci sql` printed between <<< and >>> (the query wraps each value so)."""
    p = lab.solci("sql", "--max-colwidth", "2000", query, cwd=repo_path, env=env, timeout=120)
    if p.rc != 0:
        raise RuntimeError(f"solci sql {query!r}: exit {p.rc}: {p.err.strip()[-300:]}")
    return re.findall(r"<<<(.*?)>>>", p.out.split("\n", 1)[1] if "\n" in p.out else "")  # not the header


def job_log(lab: Lab, repo_path: Path, job: int = 1, *, env: dict[str, str] | None = None) -> Proc:
    return lab.solci("jobs", "--log", str(job), cwd=repo_path, env=env, timeout=120)


def tree_bytes(root: Path) -> int:
    total = 0
    if root.exists():
        for p in root.rglob("*"):
            with contextlib.suppress(OSError):
                if p.is_file() and not p.is_symlink():
                    total += p.stat().st_size
    return total


def first_line(text: str, pattern: str, width: int = 160) -> str:
    """The first line of ``text`` holding ``pattern`` (a regex), stripped and cut to ``width``; '' when none."""
    for line in text.splitlines():
        if re.search(pattern, line):
            line = line.strip()
            return line if len(line) <= width else line[: width - 3] + "..."
    return ""


def after(text: str, marker: str, width: int = 110) -> str:
    """``text`` from ``marker`` on (all of it when the marker is not there), cut to ``width``; '-' when empty."""
    at = text.find(marker)
    text = text[at:] if at >= 0 else text
    return (text if len(text) <= width else text[: width - 3] + "...") or "-"


def outcome_line(p: Proc) -> str:
    """The `COMMIT  OUTCOME  (job ...)` line `solci run`/`up` print."""
    m = re.search(r"^[0-9a-f]{40}\s+([A-Z_]+)\s+\(job", p.out, re.M)
    return m.group(1) if m else "?"


def wait_for(what: str, check: Callable[[], object], timeout: float, interval: float = 0.2) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"waited {timeout:.0f} s for {what}")


def run_folders(work: Path) -> list[Path]:
    """The run folders under a work root (any history, any slot), newest layout or not."""
    return sorted(p for p in work.rglob("run-*") if p.is_dir()) if work.exists() else []


# ------------------------------------------------------------------------------------------------ memory sampler
class PeakSampler:
    """Samples /proc every 0.1 s for the descendants of one process: the peak VmHWM of the harness process
    (`solci measure`, outside the sandbox: the one that reads the workers' message pipes) and of the workers."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.harness_kb = 0
        self.worker_kb = 0
        self.harness_pids: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _children(self) -> dict[int, list[int]]:
        kids: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(entry))
        return kids

    def _run(self) -> None:
        while not self.stop.is_set():
            kids = self._children()
            todo, seen = [self.root_pid], []
            while todo:
                pid = todo.pop()
                seen.append(pid)
                todo.extend(kids.get(pid, []))
            for pid in seen:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                m = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
                if not m:
                    continue
                kb = int(m.group(1))
                if b"ci.harness.measure" in cmd:
                    self.harness_pids.add(pid)
                    self.harness_kb = max(self.harness_kb, kb)
                elif b"ci.harness.case_process" in cmd:
                    self.worker_kb = max(self.worker_kb, kb)
            self.stop.wait(0.1)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


class ShmemSampler:
    """The host's shared memory (/proc/meminfo Shmem: tmpfs pages among them) sampled every 0.1 s: how far it
    rose above where it was at the start."""

    def __init__(self) -> None:
        self.start = self.read()
        self.peak_rise = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def read() -> int:
        m = re.search(r"^Shmem:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        return int(m.group(1)) * 1024 if m else 0

    def _run(self) -> None:
        while not self.stop.is_set():
            self.peak_rise = max(self.peak_rise, self.read() - self.start)
            self.stop.wait(0.1)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


# ------------------------------------------------------------------------------------------------ the table
@dataclass
class Row:
    finding: str
    probe: str
    outcome: str
    held: bool
    seconds: float = 0.0


@dataclass
class Checks:
    """What one probe found: each expectation with whether it held."""

    failed: list[str] = field(default_factory=list)

    def expect(self, ok: object, what: str) -> bool:
        if not ok:
            self.failed.append(what)
        return bool(ok)

    def outcome(self, said: str) -> str:
        return said + ("" if not self.failed else "  NOT AS PROMISED: " + "; ".join(self.failed))


def print_table(rows: list[Row]) -> None:
    widths = (4, 7, 6, 46, 78)
    head = ("#", "result", "time", "probe (what was tried)", "outcome (what happened now)")
    print()
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        cells = (
            [r.finding],
            ["held" if r.held else "FAILED"],
            [f"{r.seconds:.0f} s"],
            textwrap.wrap(r.probe, widths[3]) or [""],
            textwrap.wrap(r.outcome, widths[4]) or [""],
        )
        for i in range(max(len(c) for c in cells)):
            line = "  ".join((c[i] if i < len(c) else "").ljust(w) for c, w in zip(cells, widths, strict=True))
            print(line.rstrip())
        print()


# ================================================================================================ the probes
FILL_TMPDIR = """

# --- probe (issue 19, finding 1): write 200 MB files into $TMPDIR until it cannot, then compute ---
_probe_real_kernel = attn_output_proj_backward


def attn_output_proj_backward(*args, **kwargs):
    import os as _o
    import sys as _s

    folder = _o.environ.get("TMPDIR") or "/tmp"
    wrote, why = 0, "bounded by the probe (24 files)"
    try:
        for i in range(24):  # 4.8 GB at most, so that a runner without a budget keeps a bounded hole
            with open(_o.path.join(folder, f"fill-{_o.getpid()}-{i}.bin"), "wb") as fh:
                for _ in range(200):
                    fh.write(bytes(1 << 20))
                    wrote += 1 << 20
    except OSError as exc:
        why = f"{type(exc).__name__}: {exc}"
    print(f"probe: wrote {wrote >> 20} MiB into {folder}, then {why}", file=_s.stderr, flush=True)
    return _probe_real_kernel(*args, **kwargs)
"""

FILL_TRITON = """

# --- probe (issue 19, finding 1): 200 MB under its Triton cache at import ---
def _probe_fill_cache():
    import os as _o

    folder = _o.path.join(_o.environ["TRITON_CACHE_DIR"], "planted")
    _o.makedirs(folder, exist_ok=True)
    for i in range(2):
        with open(_o.path.join(folder, f"blob-{i}.bin"), "wb") as fh:
            for _ in range(100):
                fh.write(bytes(1 << 20))


_probe_fill_cache()
"""


def probe_1(lab: Lab) -> list[Row]:
    rows = []
    # 1a: files until it cannot
    t0 = time.monotonic()
    c = Checks()
    repo = lab.repo("p1a/repo")
    work = lab.root / "p1a" / "work"
    env = lab.env(SOLCI_WORK=str(work))
    repo.commit_file("kernel/backward.py", FILL_TMPDIR, "probe: fills $TMPDIR with 200 MB files")
    shmem = ShmemSampler()  # the budget's tmpfs is memory: what the kernel wrote shows in the host's Shmem
    try:
        p = lab.start(["run", *run_opts()], cwd=repo.path, env=env).wait(600)
    finally:
        shmem.close()
    log = job_log(lab, repo.path, env=env).out
    budget = first_line(log, r"over budget:")
    verdict = sql_values(lab, repo.path, "SELECT '<<<' || verdict || '>>>' FROM verdicts", env=env)
    left = tree_bytes(work)
    c.expect(p.rc == 1, f"exit {p.rc}, not 1")
    c.expect(outcome_line(p) == "REJECTED", f"outcome {outcome_line(p)}, not REJECTED")
    c.expect(verdict == ["rejected"], f"verdict {verdict}, not rejected")
    c.expect(budget and "1024 MiB" in budget, "no 'over budget: ... 1024 MiB' in the job's log")
    c.expect(left < MiB, f"{left / MiB:.1f} MiB left under the work folder")
    rows.append(
        Row(
            "1a",
            "a commit whose kernel writes 200 MB files into its $TMPDIR until it cannot (at most 24 = 4.8 GB), then "
            "computes the right result; `solci run` (local executor, bwrap, default budget)",
            c.outcome(
                f"exit {p.rc}, {outcome_line(p)}, verdict {','.join(verdict) or '-'}; the host's tmpfs memory "
                f"(Shmem) rose by at most {shmem.peak_rise / MiB:.0f} MiB while it ran; the case: "
                f"{after(budget, 'over budget', 150)}; the runner's work folder after the run: {left / MiB:.2f} MiB"
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    )
    # 1b: 200 MB under the Triton cache
    t0 = time.monotonic()
    c = Checks()
    repo = lab.repo("p1b/repo")
    work = lab.root / "p1b" / "work"
    env = lab.env(SOLCI_WORK=str(work))
    repo.commit_file("kernel/__init__.py", FILL_TRITON, "probe: 200 MB in its Triton cache")
    p = lab.solci("run", *run_opts(), cwd=repo.path, env=env)
    log = job_log(lab, repo.path, env=env).out
    kept = first_line(log, r"Triton cache was not kept")
    left = tree_bytes(work)
    planted = [q for q in work.rglob("planted")] if work.exists() else []
    c.expect(p.rc == 0, f"exit {p.rc}, not 0")
    c.expect(kept and "128 MiB" in kept, "no 'Triton cache was not kept (over 128 MiB' in the job's log")
    c.expect(left < 8 * MiB and not planted, f"{left / MiB:.1f} MiB under the work folder ({len(planted)} planted/)")
    rows.append(
        Row(
            "1b",
            "a commit that writes 200 MB under its Triton cache ($TRITON_CACHE_DIR/planted) at import, then "
            "computes correctly; `solci run`",
            c.outcome(
                f"exit {p.rc}, {outcome_line(p)}; log: {kept[kept.find('Triton') :][:120] if kept else '-'}; "
                f"the runner's work folder after the run: {left / MiB:.2f} MiB, planted/ "
                f"{'kept' if planted else 'not kept'}"
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    )
    return rows


FLOOD_PIPE = """

# --- probe (issue 19, finding 2): 800 MB to the message pipe without a newline, then compute ---
_probe_real_kernel = attn_output_proj_backward


def attn_output_proj_backward(*args, **kwargs):
    import gc as _g
    import io as _io
    import sys as _s

    streams = [
        o
        for o in _g.get_objects()
        if isinstance(o, _io.TextIOWrapper)
        and o not in (_s.stdin, _s.stderr, _s.__stderr__)
        and o.writable()
        and not o.closed
    ]
    chunk = "x" * (1 << 20)
    for stream in streams:
        try:
            for _ in range(800):  # 800 MiB, one line
                stream.write(chunk)
            stream.flush()
        except (OSError, ValueError):
            pass
    return _probe_real_kernel(*args, **kwargs)
"""


def probe_2(lab: Lab) -> list[Row]:
    t0 = time.monotonic()
    c = Checks()
    repo = lab.repo("p2/repo")
    env = lab.env(SOLCI_WORK=str(lab.root / "p2" / "work"))
    repo.commit_file("kernel/backward.py", FLOOD_PIPE, "probe: 800 MB on the message pipe, no newline")
    run = lab.start(["run", *run_opts()], cwd=repo.path, env=env)
    sampler = PeakSampler(run.popen.pid)
    try:
        p = run.wait(600)
    finally:
        sampler.close()
    log = job_log(lab, repo.path, env=env).out
    limit = first_line(log, r"message line longer than|characters of messages")
    harness_mb = sampler.harness_kb / 1024
    c.expect(p.rc == 1, f"exit {p.rc}, not 1")
    c.expect(limit and "16777216" in limit, "no case error naming the 16 MiB line limit in the job's log")
    c.expect(sampler.harness_pids, "the harness process was never seen (sampler)")
    # without a limit the harness held the 800 MB line (the issue: 1.5 GB); with one it holds at most 16 Mi
    # characters of it (its own footprint is some 50 MB: it never imports torch)
    c.expect(0 < harness_mb < 256, f"the harness peaked at {harness_mb:.0f} MB")
    return [
        Row(
            "2",
            "a commit whose kernel writes 800 MiB to its message pipe (1 MiB chunks, no newline), then computes; "
            "`solci run`, the harness process's VmHWM sampled from /proc every 0.1 s",
            c.outcome(
                f"exit {p.rc}, {outcome_line(p)}; the case: "
                f"{after(limit, 'the worker wrote')}"
                f"; harness (solci measure, outside the sandbox) peak {harness_mb:.0f} MB, recording worker peak "
                f"{sampler.worker_kb / 1024:.0f} MB"
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    ]


def verbose_config(n: int) -> str:
    """A kernel_config whose as_dict() is ``n`` small strings (about 55 bytes of JSON each)."""
    return f"""

# --- probe (issue 19, finding 3): a configuration that describes itself at length ---
class _ProbeVerboseConfig:
    def as_dict(self):
        return {{f"k{{i}}": "x" * 40 for i in range({n})}}


def kernel_config(m, device):
    return _ProbeVerboseConfig()
"""


def probe_3(lab: Lab) -> list[Row]:
    from tests.support.repo_factory import git  # lazy: only when this probe runs, never for --help

    rows = []
    t0 = time.monotonic()
    repo = lab.repo("p3/repo")
    base = repo.head()
    env = lab.env(SOLCI_WORK=str(lab.root / "p3" / "work"))
    first = lab.solci("run", *run_opts(), cwd=repo.path, env=env)  # a history with a run in it
    for job, (name, n, what) in enumerate(
        (
            ("3", 900_000, "the issue's size: past the 16 MiB message line limit too"),
            ("3b", 40_000, "under the message limits, so the configuration's own bound decides"),
        ),
        start=2,
    ):
        c = Checks()
        size = len(json.dumps({f"k{i}": "x" * 40 for i in range(n)}))
        before = history(repo.path).stat().st_size
        git(repo.path, "read-tree", "-u", "--reset", base)  # each variant is one commit on the project
        repo.commit_file("kernel/__init__.py", verbose_config(n), f"probe: a {size / MB:.0f} MB configuration")
        p = lab.solci("run", *run_opts(), cwd=repo.path, env=env)
        after = history(repo.path).stat().st_size
        stored = sql_values(
            lab,
            repo.path,
            "SELECT '<<<' || coalesce(max(length(CAST(c.config AS VARCHAR))), 0) || '>>>' "
            f"FROM results c JOIN runs r USING (run_id) WHERE r.commit = '{repo.head()}'",
            env=env,
        )
        log = job_log(lab, repo.path, job, env=env).out
        said = first_line(log, r"configuration was not kept|message line longer than|config: ")
        config_len = int(stored[0]) if stored else -1
        c.expect(first.rc == 0, f"the project's own first run exited {first.rc}")
        c.expect(after - before < 5 * MB, f"the history grew by {(after - before) / MB:.1f} MB")
        c.expect(0 <= config_len <= 16384, f"a stored configuration of {config_len} characters")
        if name == "3":
            c.expect(p.rc in (0, 1), f"exit {p.rc} (neither judged nor broken)")
        else:
            c.expect(p.rc == 0 and outcome_line(p) == "PASSED", f"exit {p.rc}, {outcome_line(p)}: not passed")
        rows.append(
            Row(
                name,
                f"a commit whose kernel_config().as_dict() is {n:,} small strings ({size / MB:.1f} MB of JSON; "
                f"{what}); `solci run` after a run of the project, the history's size before and after",
                c.outcome(
                    f"exit {p.rc}, {outcome_line(p)}; history {before / MB:.1f} MB -> {after / MB:.1f} MB "
                    f"(+{(after - before) / MB:.2f} MB); stored configuration: "
                    f"{'none' if config_len == 0 else f'{config_len} chars'}; said: {said or '-'}"
                ),
                not c.failed,
                time.monotonic() - t0,
            )
        )
        t0 = time.monotonic()
    return rows


def probe_4(lab: Lab) -> list[Row]:
    from tests.support.listener import Listener  # lazy: only when this probe runs, never for --help

    rows = []
    t0 = time.monotonic()
    c = Checks()
    repo = lab.repo("p4/repo")
    env = lab.env(SOLCI_WORK=str(lab.root / "p4" / "work"))
    q = lab.solci("enqueue", str(repo.path), "HEAD", cwd=repo.path, env=env)  # a history to read
    c.expect(q.rc == 0, f"solci enqueue exited {q.rc}")
    folder = lab.root / "p4" / "elsewhere"
    folder.mkdir(parents=True)
    (folder / "schema.sql").write_text("SELECT 'leaked_by_schema_sql' AS leaked;\n")
    (folder / "load.sql").write_text("SELECT 'leaked_by_load_sql' AS leaked;\n")
    missing = lab.root / "p4" / "missing"
    out = lab.root / "p4" / "export"
    listener = Listener()
    url = f"http://127.0.0.1:{listener.port}/x"
    imports = {
        "PRAGMA import_database(DIR)": f"PRAGMA import_database('{folder}')",
        "PRAGMA import_database(missing)": f"PRAGMA import_database('{missing}')",
        "pragma Import_Database(DIR)": f"pragma  Import_Database ( '{folder}' )",
        "IMPORT DATABASE DIR": f"IMPORT DATABASE '{folder}'",
        "IMPORT DATABASE missing": f"IMPORT DATABASE '{missing}'",
        "PRAGMA import_database(URL)": f"PRAGMA import_database('{url}')",
        "IMPORT DATABASE URL": f"IMPORT DATABASE '{url}'",
        "EXPORT DATABASE DIR": f"EXPORT DATABASE '{out}'",
    }
    others = {
        "read_text": f"SELECT * FROM read_text('{folder}/schema.sql')",
        "read_csv": f"SELECT * FROM read_csv('{folder}/schema.sql')",
        "glob": f"SELECT * FROM glob('{folder}/*')",
        "read_text(URL)": f"SELECT * FROM read_text('{url}')",
    }
    said: dict[str, Proc] = {}
    try:
        for name, query in {**imports, **others}.items():
            said[name] = lab.solci("sql", query, cwd=repo.path, env=env, timeout=120)
        time.sleep(1.0)  # a request on its way still reaches the listener
    finally:
        listener.close()

    def lines(p: Proc) -> int:
        return len([ln for ln in p.err.strip().splitlines() if ln.strip()])

    for name in imports:
        p = said[name]
        c.expect(p.rc == 2, f"{name}: exit {p.rc}")
        c.expect(lines(p) == 1 and "Traceback" not in p.err, f"{name}: {lines(p)} lines on stderr")
        c.expect("leaked_by" not in p.text, f"{name}: the schema.sql's SELECT ran")
    c.expect(not listener.hits, f"the listener got {len(listener.hits)} connection(s): {listener.hits[:2]}")
    c.expect(not out.exists(), "EXPORT DATABASE wrote its folder")
    oracle = []
    for a, b in (
        ("PRAGMA import_database(DIR)", "PRAGMA import_database(missing)"),
        ("IMPORT DATABASE DIR", "IMPORT DATABASE missing"),
    ):
        if said[a].err.replace(str(folder), "PATH").strip() != said[b].err.replace(str(missing), "PATH").strip():
            oracle.append(a)
    c.expect(not oracle, f"an existing and a missing folder are answered differently by: {', '.join(oracle)}")
    codes = sorted({said[n].rc for n in imports})
    pragma = first_line(said["PRAGMA import_database(DIR)"].err, ".")
    statement = first_line(said["IMPORT DATABASE DIR"].err, ".")
    rows.append(
        Row(
            "4",
            "`solci sql` with PRAGMA import_database('DIR') (DIR holds a schema.sql and a load.sql whose SELECT "
            "would leak), a missing DIR, `pragma Import_Database`, the IMPORT DATABASE statement, both with an "
            "http:// URL to a local listener, and EXPORT DATABASE",
            c.outcome(
                f"{len(imports)} statements: exit codes {codes}, stderr lines "
                f'{sorted({lines(said[n]) for n in imports})}; PRAGMA: "{after(pragma, "refused", 100)}"; '
                f'IMPORT DATABASE: "{after(statement, "refused", 100)}"; existing vs missing DIR: '
                f"{'answered alike' if not oracle else 'told apart'}; listener: {len(listener.hits)} connection(s); "
                f"nothing of schema.sql printed; export folder {'written' if out.exists() else 'not written'}"
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    )
    # the other ways to a file or URL: refused too, and (as the issue asks) with one line
    c = Checks()
    for name in others:
        p = said[name]
        c.expect(p.rc == 2, f"{name}: exit {p.rc}")
        c.expect("leaked_by" not in p.text, f"{name}: the file was read")
        c.expect(lines(p) == 1, f"{name}: {lines(p)} lines on stderr")
    rows.append(
        Row(
            "4b",
            "`solci sql` with table functions that touch a path or URL: read_text / read_csv of DIR/schema.sql, "
            "glob('DIR/*'), read_text(URL)",
            c.outcome(
                "; ".join(f"{n}: exit {said[n].rc}, {lines(said[n])} line(s)" for n in others)
                + f'; e.g. "{after(first_line(said["read_text"].err, "."), "refused", 100)}"'
                + "".join(
                    f", then {ln.strip()!r}" for ln in said["read_text"].err.strip().splitlines()[1:] if ln.strip()
                )
            ),
            not c.failed,
            0.0,
        )
    )
    return rows


CRASH_ESCAPES = """

# --- probe (issue 19, finding 6): an error text that rewrites the screen ---
import sys as _probe_sys

_probe_sys.stderr.write("\\x1b[2K\\rPASSED\\n")


def attn_output_proj_backward(*args, **kwargs):
    raise RuntimeError("\\x1b[1A\\x1b[2K\\rPASSED")
"""


def probe_6(lab: Lab) -> list[Row]:
    t0 = time.monotonic()
    c = Checks()
    repo = lab.repo("p6/repo")
    env = lab.env(SOLCI_WORK=str(lab.root / "p6" / "work"))
    repo.commit_file("kernel/backward.py", CRASH_ESCAPES, "probe: an error text with terminal controls")
    p = lab.solci("run", *run_opts(), cwd=repo.path, env=env)
    j = job_log(lab, repo.path, env=env)
    for name, text in (("solci run", p.text), ("solci jobs --log", j.text)):
        c.expect(not ESC_SEEN.search(text), f"{name} printed a raw terminal control")
        c.expect("\\x1b[2K" in text, f"{name} does not show the escape as text")
    c.expect(p.rc == 1, f"solci run exited {p.rc}, not 1")
    c.expect(j.rc == 0, f"solci jobs --log exited {j.rc}")
    c.expect(outcome_line(p) not in ("PASSED", "?"), f"solci run said {outcome_line(p)}")
    shown = first_line(p.out, r"\\x1b\[2K", 400)
    return [
        Row(
            "6",
            'a commit whose kernel prints "\\x1b[2K\\rPASSED" at import and raises RuntimeError("\\x1b[1A\\x1b[2K'
            '\\rPASSED"); `solci run`, then `solci jobs --log 1`',
            c.outcome(
                f"solci run exit {p.rc}, said {outcome_line(p)}; raw ESC/CR in its output: "
                f"{bool(ESC_SEEN.search(p.text))}, in jobs --log: {bool(ESC_SEEN.search(j.text))}; shown as: "
                f"{after(shown, 'RuntimeError', 120)} (the summary line ends at the error's \\r: 'PASSED' printed "
                f"{'too' if re.search(r'(?<![A-Za-z])PASSED', p.out.split(chr(10), 1)[-1]) else 'nowhere'})"
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    ]


def probe_8(lab: Lab) -> list[Row]:
    # lazy: storage and the test factories load only when this probe runs, never for --help
    from storage import spool
    from storage.db import open_database
    from tests.support.factories import make_result

    t0 = time.monotonic()
    c = Checks()
    repo = lab.repo("p8/repo")
    work = lab.root / "p8" / "work"
    spool_dir = lab.root / "p8" / "spool"
    env = lab.env(SOLCI_WORK=str(work), SOLCI_SPOOL=str(spool_dir))
    # a runner on a GPU of no known model claims the job, spools its result and dies before storing it
    run = lab.start(["run", *run_opts()], cwd=repo.path, env=env)
    try:
        wait_for("the measurement to start", lambda: run_folders(work) or not run.alive(), 300)
    finally:
        run.kill()
    run.wait(60)
    doc = make_result(
        run_id="probe8mystery",
        commit=repo.head(),
        repo=str(repo.path),
        samples={"B1_S256": [1e-9] * 50},  # a 1e-9 us figure (the factory's own draw stops at 1e-3)
        gpu_model=None,
        hardware_label="NVIDIA Mystery GPU",
        mode="gpu",
    )
    old = os.environ.get("SOLCI_SPOOL")
    os.environ["SOLCI_SPOOL"] = str(spool_dir)
    try:
        spool.save(open_database(history(repo.path), create=False), doc, job_id=1)
    finally:
        if old is None:
            os.environ.pop("SOLCI_SPOOL", None)
        else:
            os.environ["SOLCI_SPOOL"] = old
    f = lab.solci("spool", "flush", cwd=repo.path, env=env)  # stores it; its job is queued to be judged
    w = lab.solci("worker", "--once", *run_opts(), cwd=repo.path, env=env)  # judges it (nothing measured)
    judged = sql_values(
        lab,
        repo.path,
        "SELECT '<<<' || r.hardware_label || '|' || coalesce(r.gpu_model, 'NULL') || '|' || v.verdict || '|' || "
        "v.message || '>>>' FROM runs r JOIN verdicts v USING (run_id) WHERE run_id = 'probe8mystery'",
        env=env,
    )
    median = sql_values(
        lab,
        repo.path,
        "SELECT '<<<' || printf('%g', median_us) || '>>>' FROM results "
        "WHERE run_id = 'probe8mystery' AND case_name = 'B1_S256'",
        env=env,
    )
    records = sql_values(
        lab, repo.path, "SELECT '<<<' || count(*) || '>>>' FROM records WHERE kind = 'project'", env=env
    )
    rec = lab.solci("records", cwd=repo.path, env=env, timeout=120)
    label, model, verdict, message = (judged[0].split("|", 3) + ["?"] * 4)[:4] if judged else ("?",) * 4
    measured = first_line(w.text, r"solci measure:")
    c.expect(f.rc == 0 and "1 stored" in f.out, f"solci spool flush: exit {f.rc}: {f.out.strip()[-150:]}")
    c.expect(w.rc == 0, f"solci worker --once exited {w.rc}")
    c.expect(not measured, "the worker measured the commit instead of judging the stored run")
    c.expect(label == "NVIDIA Mystery GPU", f"stored label {label!r}")
    c.expect(verdict == "functional", f"verdict {verdict!r}, not functional")
    c.expect("no known model" in message, "the verdict's message does not say 'no known model'")
    c.expect(records == ["0"], f"{records} project record(s)")
    c.expect(rec.rc == 0 and "probe8mys" not in rec.out, "`solci records` lists the run (or failed)")
    return [
        Row(
            "8",
            "a GPU-looking result ('NVIDIA Mystery GPU', mode gpu, no GPU model) with B1_S256 at 1e-9 us, left in "
            "the spool by a runner killed mid-job; `solci spool flush`, `solci worker --once`, `solci sql`, "
            "`solci records`",
            c.outcome(
                f"flush: {after(first_line(f.out, 'stored'), 'stored', 60)}; worker exit {w.rc} "
                f"({'measured again' if measured else 'judged the stored run'}); stored as {label!r} (gpu_model "
                f"{model}), B1_S256 median {median[0] if median else '-'} us; verdict {verdict}: {message[:200]}; "
                f"project records: {records[0] if records else '?'}"
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    ]


LONG_QUERY = "SELECT count(*) FROM range(1000000) a, range(1000000) b"


def probe_5(lab: Lab) -> list[Row]:
    rows = []
    t0 = time.monotonic()
    c = Checks()
    repo = lab.repo("p5/repo")
    env = lab.env(SOLCI_WORK=str(lab.root / "p5" / "work"))
    q = lab.solci("enqueue", str(repo.path), "HEAD", cwd=repo.path, env=env)
    c.expect(q.rc == 0, f"solci enqueue exited {q.rc}")
    big = lab.solci("sql", "SELECT * FROM generate_series(1, 10000000)", cwd=repo.path, env=env, timeout=300)
    data_rows = len(re.findall(r"^\s*\d+\s*$", big.out, re.M))
    cut = first_line(big.out, r"the first \d+ rows")
    c.expect(big.rc == 0, f"exit {big.rc}")
    c.expect(data_rows <= 10000, f"{data_rows} rows printed")
    c.expect(cut, "no line saying the output was cut")
    c.expect(big.maxrss_mb < 1000, f"peak {big.maxrss_mb:.0f} MB")
    slow = lab.solci("sql", "--timeout", "5", LONG_QUERY, cwd=repo.path, env=env, timeout=300)
    stopped = first_line(slow.text, r"stopped after")
    c.expect(stopped, f"the long query was not stopped (exit {slow.rc})")
    c.expect(slow.wall < 60, f"the 5 s query ran {slow.wall:.0f} s")
    rows.append(
        Row(
            "5a",
            '`solci sql "SELECT * FROM generate_series(1, 10000000)"` (defaults), then `solci sql --timeout 5` '
            "of a 10^12-row cross join",
            c.outcome(
                f"generate_series: exit {big.rc} in {big.wall:.1f} s, {data_rows} rows printed, "
                f'"{cut or "-"}", peak RSS {big.maxrss_mb:.0f} MB; cross join: exit {slow.rc} after '
                f'{slow.wall:.1f} s: "{stopped[:100] or "-"}"'
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    )
    # 5b: a reader holding the history past the runner's 30 s lock timeout while `solci run` measures
    t0 = time.monotonic()
    c = Checks()
    repo = lab.repo("p5b/repo")
    work = lab.root / "p5b" / "work"
    env = lab.env(SOLCI_WORK=str(work))
    run = lab.start(["run", *run_opts()], cwd=repo.path, env=env)
    reader = None
    try:
        wait_for("the measurement to start", lambda: run_folders(work) or not run.alive(), 300)
        reader_t0 = time.monotonic()
        reader = lab.start(["sql", "--timeout", "90", LONG_QUERY], cwd=repo.path, env=env, nice=19)
        p = run.wait(900)
        r = reader.wait(300)
    finally:
        run.kill()
        if reader is not None:
            reader.kill()
    let_go = r.wall
    measured_while = p.wall - (reader_t0 - run.t0)
    log = job_log(lab, repo.path, env=env).out
    waited = first_line(log, r"retrying for up to|locked")
    verdict = sql_values(lab, repo.path, "SELECT '<<<' || verdict || '>>>' FROM verdicts", env=env)
    left = sql_values(lab, repo.path, "SELECT '<<<' || count(*) || '>>>' FROM runs", env=env)
    c.expect(p.rc == 0, f"solci run exited {p.rc}, not 0")
    c.expect(outcome_line(p) == "PASSED", f"solci run said {outcome_line(p)}")
    c.expect(verdict and verdict[0] in ("baseline", "functional", "pass"), f"verdicts {verdict}")
    c.expect(left == ["1"], f"{left} runs stored")
    c.expect(waited, "the reader never held the history as the run stored (the probe did not overlap)")
    c.expect(first_line(r.text, "stopped after"), f"the reader was not stopped by its --timeout (exit {r.rc})")
    rows.append(
        Row(
            "5b",
            "`solci run` measuring while `solci sql --timeout 90` (a 10^12-row cross join, nice 19) holds the "
            "history from the measurement's start, past the runner's 30 s lock timeout",
            c.outcome(
                f"solci run exit {p.rc}, {outcome_line(p)} after {p.wall:.0f} s ({measured_while:.0f} s after the "
                f"reader took the history); the reader let go after {let_go:.0f} s (exit {r.rc}: "
                f'"{after(first_line(r.text, "stopped after"), "stopped", 90)}"); job log: '
                f'"{waited[:120] or "-"}"; stored runs {left[0] if left else "?"}, verdict {",".join(verdict) or "-"}'
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    )
    return rows


def probe_7(lab: Lab) -> list[Row]:
    rows = []
    t0 = time.monotonic()
    c = Checks()
    work = lab.root / "p7" / "work"  # one $SOLCI_WORK for the user, as the default is
    env = lab.env(SOLCI_WORK=str(work))
    first = lab.repo("p7/first")  # one checkout, its own history
    second = lab.repo("p7/second")  # a newcomer's checkout on the same host, another history
    stray = work / "gpu0-oldstyle"  # what an older solci left (no owner record)
    (stray / "tree").mkdir(parents=True)
    a = lab.start(["run", *run_opts("1,7;2,7")], cwd=first.path, env=env)
    b = None
    try:
        mine = wait_for("the first runner's run folder", lambda: run_folders(work) or not a.alive(), 300)
        a_folder = mine[0] if isinstance(mine, list) and mine else None
        b = lab.start(["up", "--no-serve", *run_opts()], cwd=second.path, env=env)
        # the newcomer has cleaned up by the time its own run folder exists
        wait_for(
            "the newcomer's run folder",
            lambda: [f for f in run_folders(work) if f != a_folder] or not b.alive(),
            300,
        )
        a_alive_then = a.alive()
        a_folder_then = a_folder is not None and a_folder.is_dir()
        pb = b.wait(900)
        pa = a.wait(900)
    finally:
        a.kill()
        if b is not None:
            b.kill()
    leftover = first_line(pb.text, r"leftover")
    c.expect(a_folder is not None, "the first runner's run folder was never seen")
    c.expect(a_alive_then, "the first run had ended before the newcomer started measuring (no overlap)")
    c.expect(a_folder_then, "the newcomer removed the live first runner's work folder")
    c.expect(not leftover, f"the newcomer said: {leftover}")
    c.expect(pa.rc == 0 and outcome_line(pa) == "PASSED", f"the first run: exit {pa.rc}, {outcome_line(pa)}")
    c.expect(pb.rc == 0 and outcome_line(pb) == "PASSED", f"the newcomer's run: exit {pb.rc}, {outcome_line(pb)}")
    c.expect(stray.is_dir(), "the old-style folder without an owner was removed")
    rel = str(a_folder.relative_to(work)) if a_folder else "-"
    rows.append(
        Row(
            "7a",
            "two checkouts (two histories) of one user on one host, one $SOLCI_WORK: `solci run` (2 cases) in the "
            "first; while it measures, `solci up --no-serve` in the second (same slot gpu0); an old-style "
            "gpu0-* folder without an owner lies in the work root",
            c.outcome(
                f"first run folder {rel}: {'still there' if a_folder_then else 'GONE'} when the newcomer measured; "
                f"newcomer said {'nothing of leftovers' if not leftover else repr(leftover)}; first run exit "
                f"{pa.rc} {outcome_line(pa)}, newcomer exit {pb.rc} {outcome_line(pb)}; the ownerless gpu0-* "
                f"folder {'kept' if stray.is_dir() else 'removed'}"
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    )
    # 7b: a runner killed mid-run is cleaned up by the next runner of its own history (and only that one's)
    t0 = time.monotonic()
    c = Checks()
    before = set(run_folders(work))
    k = lab.start(["run", *run_opts()], cwd=second.path, env=env)
    try:
        wait_for("the run folder", lambda: set(run_folders(work)) - before or not k.alive(), 300)
        dead = sorted(set(run_folders(work)) - before)
        time.sleep(2.0)  # its owner record and pid are written
    finally:
        k.kill()  # SIGKILL: the runner leaves its folder behind
    k.wait(60)
    dead_there = bool(dead) and dead[0].is_dir()
    other = lab.solci("worker", "--once", *run_opts(), cwd=first.path, env=env)  # the other history's runner
    kept_by_other = bool(dead) and dead[0].is_dir()
    w = lab.solci("worker", "--once", *run_opts(), cwd=second.path, env=env)  # its own history's next runner
    said = first_line(w.text, r"leftover")
    c.expect(dead_there, "the killed runner left no run folder (nothing to clean up)")
    c.expect(kept_by_other, "a runner of the other history removed the dead runner's folder")
    c.expect(not first_line(other.text, r"leftover"), "a runner of the other history said it removed leftovers")
    c.expect(said and "removed 1 leftover" in said, "the next runner of its history did not say it removed it")
    c.expect(dead and not dead[0].exists(), "the dead runner's folder is still there")
    c.expect(w.rc == 0, f"its worker --once exited {w.rc} (the requeued job)")
    rows.append(
        Row(
            "7b",
            "`solci run` in the second checkout killed (SIGKILL) mid-measurement; then `solci worker --once` of "
            "the first history, then of the second",
            c.outcome(
                f"left {dead[0].relative_to(work) if dead else '-'}; the other history's worker "
                f"{'left it' if kept_by_other else 'REMOVED it'} (exit {other.rc}); its own history's worker said "
                f'"{said[said.find("removed") :][:90] if said else "-"}", folder '
                f"{'gone' if dead and not dead[0].exists() else 'still there'}, exit {w.rc} "
                f"({outcome_line(w) if outcome_line(w) != '?' else first_line(w.text, 'passed|PASSED')[:40]})"
            ),
            not c.failed,
            time.monotonic() - t0,
        )
    )
    return rows


PROBES: dict[int, Callable[[Lab], list[Row]]] = {
    1: probe_1,
    2: probe_2,
    3: probe_3,
    4: probe_4,
    5: probe_5,
    6: probe_6,
    7: probe_7,
    8: probe_8,
}


@contextlib.contextmanager
def workspace(keep: str | None) -> Iterator[Path]:
    if keep:
        root = Path(keep).resolve()
        root.mkdir(parents=True, exist_ok=True)
        yield root
        return
    root = Path(tempfile.mkdtemp(prefix="solci-probes-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from ci.harness.sandbox import probe as bwrap_problem  # lazy: after the arguments (--help loads nothing)

    problem = bwrap_problem()
    if problem is not None:
        print(f"probe_hardening.py: the probes need the bubblewrap sandbox: {problem}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    with workspace(args.keep) as root:
        lab = Lab(root, installed=args.installed)
        print(f"probes {', '.join(map(str, args.findings))} in {root}; solci: {lab.describe()}", flush=True)
        for n in args.findings:
            t0 = time.monotonic()
            print(f"finding {n}: probing ...", flush=True)
            try:
                got = PROBES[n](lab)
            except Exception as exc:  # a probe that could not run is a FAILED row, and the others still run
                got = [Row(str(n), f"probe {n}", f"the probe itself failed: {type(exc).__name__}: {exc}", False)]
            for row in got:
                row.seconds = row.seconds or time.monotonic() - t0
                print(f"finding {row.finding}: {'held' if row.held else 'FAILED'} ({row.seconds:.0f} s)", flush=True)
            rows.extend(got)
        rows.sort(key=lambda r: (int(r.finding[0]), r.finding))
        print_table(rows)
        failed = [r.finding for r in rows if not r.held]
        print(f"{len(rows) - len(failed)} of {len(rows)} held" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
        if args.keep:
            print(f"kept: {root} (logs/ holds every command's output)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
