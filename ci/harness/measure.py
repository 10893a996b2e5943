"""``solci measure``: correctness and latency of the kernel and its baselines, one result document per run.

Cases run one at a time in two worker subprocesses (``ci.harness.case_process``, docs/replay.md): a recording
process, the only one that runs the kernel's code, writes what one call of it launches (on a GPU) or its outputs
(under the CPU interpreter); the parent copies those files and a judging process, which never imports a
kernel, replays the plan through the correctness rounds and the timed loops (or compares the outputs with its
own reference) and times the baselines. ``--direct`` calls the kernel in one process instead (a developer's own
measurement, labelled so and never stored). A case that crashes a worker or outlives ``--case-timeout`` is
recorded (error / timeout) and a fresh worker takes the remaining cases.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci.harness import plan as plan_contract
from ci.harness import sandbox
from ci.harness.args import bounded, dispatch
from ci.harness.sandbox import SANDBOX_KINDS
from ci.harness.terminal import visible
from ci.harness.timing import GPU_TIMERS, Protocol, harness_version, make_protocols
from problem.workload import CASES, SMOKE_CASES, Case, geomean, sol_score, t_sol_us
from storage.result import IMPLS, OVER_BUDGET, SCHEMA_VERSION, timing_stats, validate

DEFAULT_IMPL = "kernel:attn_output_proj_backward"
GPU_CASE_TIMEOUT_S = 120.0
CPU_CASE_TIMEOUT_S = 300.0
WORKER_START_TIMEOUT_S = 300.0


# ------------------------------------------------------------------------------------------------ arguments
def case_token(text: str) -> list[Case | str]:
    """One --cases token: "all", "smoke", or cases "B,S" (several may be separated by ';' or spaces)."""
    out: list[Case | str] = []
    for part in text.replace(";", " ").split():
        low = part.lower()
        if low in ("all", "smoke"):
            out.append(low)
            continue
        try:
            out.append(Case.parse(part))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc}; or use 'all' or 'smoke'") from None
    if not out:
        raise argparse.ArgumentTypeError("empty case list")
    return out


_positive_int = bounded(int, 1)
_nonneg_int = bounded(int, 0)
_positive_float = bounded(float, 0, strict=True)


def _impl_spec(text: str) -> str:
    mod, sep, fn = text.rpartition(":")
    if not sep or not mod or not fn:
        raise argparse.ArgumentTypeError(f"{text!r}: expected MODULE:FUNCTION (or path/to/file.py:FUNCTION)")
    return text


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "measure",
        help="check correctness and time the kernel and its baselines; write a result document",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--cases",
        nargs="+",
        type=case_token,
        metavar="CASES",
        help="'all' (the 16 workload cases), 'smoke', or cases 'B,S' (e.g. 1,256 4,128); "
        "default: all on a GPU, smoke without one",
    )
    p.add_argument("--out", help="write the result document here (default: print it to stdout)")
    p.add_argument(
        "--impl",
        type=_impl_spec,
        default=DEFAULT_IMPL,
        help=f"the kernel, MODULE:FUNCTION or FILE.py:FUNCTION (default {DEFAULT_IMPL})",
    )
    p.add_argument(
        "--mode",
        choices=("auto", "gpu", "cpu-interpreter"),
        default="auto",
        help="auto: the GPU when torch sees one, else Triton's interpreter on the CPU",
    )
    p.add_argument("--force", action="store_true", help="allow --cases all under the interpreter (hours)")
    p.add_argument("--rounds", type=_positive_int, help="correctness rounds (changes the protocol hash)")
    p.add_argument("--warmup", type=_nonneg_int, help="warm-up iterations (changes the protocol hash)")
    p.add_argument("--iters", type=_positive_int, help="timed iterations (changes the protocol hash)")
    p.add_argument(
        "--timer",
        choices=GPU_TIMERS,
        default=None,
        help="the primary GPU timer, the one medians and scores use (default: the CUPTI span, the "
        "benchmark's rule, where the profiler works; else CUDA events)",
    )
    p.add_argument("--no-cupti", action="store_true", help="skip the CUPTI timer on the GPU (CUDA events only)")
    p.add_argument(
        "--candidate",
        type=Path,
        help="a commit's tree: measure ITS kernel package with this installation's harness (the "
        "commit's other code is never imported); default: this installation's own kernel",
    )
    p.add_argument(
        "--direct",
        action="store_true",
        help="call the kernel in the measuring process itself (correctness and timing there too) instead of "
        "recording its launches and replaying them from a harness process: a developer's own measurement, "
        "labelled measured_by=direct, never stored as a CI result",
    )
    p.add_argument(
        "--sandbox",
        choices=SANDBOX_KINDS,
        default="none",
        help="run the kernel's worker in a bubblewrap sandbox (bwrap; auto: when available) or not "
        "(none, the default for measuring your own checkout)",
    )
    p.add_argument("--scratch", type=Path, help="the sandbox's private read-write folder (default: a new tmp)")
    p.add_argument("--triton-cache", type=Path, help="Triton's cache folder (the runner keeps one per commit)")
    p.add_argument("--no-baselines", action="store_true", help="do not time eager / cuBLAS (no score)")
    p.add_argument(
        "--case-timeout",
        type=_positive_float,
        help=f"seconds per case (default {GPU_CASE_TIMEOUT_S:g} GPU, {CPU_CASE_TIMEOUT_S:g} interpreter)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--commit", help="commit measured (default: git rev-parse HEAD of --repo or the cwd)")
    p.add_argument("--branch", help="branch (default: the current git branch)")
    p.add_argument("--repo", help="repository (default: the git top-level directory of the cwd)")
    p.set_defaults(func=run_measure)


def resolve_cases(tokens: list[list[Case | str]] | None, mode: str, force: bool) -> list[Case]:
    """The cases to run, in order, without repeats; ValueError for --cases all under the interpreter."""
    if tokens is None:
        return list(CASES if mode == "gpu" else SMOKE_CASES)
    out: list[Case] = []
    for item in (x for tok in tokens for x in tok):
        if item == "all":
            if mode != "gpu" and not force:
                raise ValueError(
                    "--cases all without a GPU runs the 16 full-size cases under Triton's "
                    "interpreter (hours); use --cases smoke or B,S, or add --force"
                )
            out.extend(CASES)
        elif item == "smoke":
            out.extend(SMOKE_CASES)
        else:
            out.append(item)  # type: ignore[arg-type]
    seen: set[Case] = set()
    return [c for c in out if not (c in seen or seen.add(c))]


# ------------------------------------------------------------------------------------------------ scores
def case_score(status: str, median_us: float | None, t_sol: float | None, eager_us: float | None) -> float | None:
    """sol_score against the same run's eager median; a case that did not pass scores 0 where T_SOL exists."""
    if t_sol is None:
        return None
    if status != "pass":
        return 0.0
    return sol_score(median_us, t_sol, eager_us)


def _complete_geomean(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return geomean([float(v) for v in values if v is not None])


def suite_summary(cases: list[dict], primary: str) -> dict[str, Any]:
    """Suite figures. Geometric means only over complete sets (every case has the figure); the kernel's only
    when every case passed. The ratios are geomean(kernel) / geomean(baseline) over the same cases."""
    n = len(cases)
    n_pass = sum(c["status"] == "pass" for c in cases)
    if n and n_pass == n:
        status = "pass"
    elif any(c["status"] in ("error", "timeout") for c in cases):
        status = "error"
    else:
        status = "incorrect"
    all_pass = n > 0 and n_pass == n
    g_kernel = _complete_geomean([c["median_us"] for c in cases]) if all_pass else None
    g_eager = _complete_geomean([c["eager_us"] for c in cases])
    g_cublas = _complete_geomean([c["cublas_us"] for c in cases])
    scores = [c["score"] for c in cases]
    by_protocol: dict[str, dict[str, float | None]] = {}
    for h in dict.fromkeys(t["protocol"] for c in cases for t in c["timings"]):
        by_protocol[h] = {
            impl: (_complete_geomean([_median(c, impl, h) for c in cases]) if impl != "kernel" or all_pass else None)
            for impl in ("kernel", "eager", "cublas")
        }
    return {
        "n_cases": n,
        "n_pass": n_pass,
        "status": status,
        "geomean_us": g_kernel,
        "geomean_eager_us": g_eager,
        "geomean_cublas_us": g_cublas,
        "score": statistics.fmean(scores) if scores and all(s is not None for s in scores) else None,
        "ratio_vs_cublas": g_kernel / g_cublas if g_kernel and g_cublas else None,
        "ratio_vs_eager": g_kernel / g_eager if g_kernel and g_eager else None,
        "geomean_t_sol_us": _complete_geomean([c["t_sol_us"] for c in cases]),
        "geomeans_by_protocol": by_protocol,
        "primary_protocol": primary,
    }


def _median(case: dict, impl: str, protocol: str) -> float | None:
    for t in case["timings"]:
        if t["impl"] == impl and t["protocol"] == protocol:
            return t["median_us"]
    return None


# ------------------------------------------------------------------------------------------------ the worker
class CaseProcessDied(Exception):
    pass


class MessageOverflow(CaseProcessDied):
    """A worker wrote more to its message stream than a reader keeps: a line or a request's total over the limit."""


# What the parent reads of one worker's messages (issue 19): a line, and everything between two requests.
MESSAGE_LINE_LIMIT_ENV = "SOLCI_MESSAGE_LINE_LIMIT_MB"
MESSAGE_TOTAL_LIMIT_ENV = "SOLCI_MESSAGE_TOTAL_LIMIT_MB"
DEFAULT_MESSAGE_LINE_LIMIT_MB = 16
DEFAULT_MESSAGE_TOTAL_LIMIT_MB = 64


# What the commit's processes may write in their sandbox (scratch, /tmp, caches together; issue 19), and what of
# its Triton cache is kept on the runner's disk for its next run.
WRITE_BUDGET_ENV = "SOLCI_WRITE_BUDGET_MB"
DEFAULT_WRITE_BUDGET_MB = 1024
TRITON_KEEP_ENV = "SOLCI_TRITON_CACHE_KEEP_MB"
DEFAULT_TRITON_KEEP_MB = 128
FULL_SLACK_BYTES = 2**20  # a budget with less than this free is spent


def _limit_bytes(env: str, default_mb: float) -> int:
    """A limit given in MiB by ``env`` (else ``default_mb``), in bytes (or characters, for a text stream)."""
    try:
        mb = float(os.environ.get(env) or default_mb)
    except ValueError:
        mb = default_mb
    return max(1024, int(mb * 2**20))


@dataclass(frozen=True)
class Isolation:
    """Where the worker runs: the commit's tree it measures (None: this installation's own kernel), the sandbox
    (``ci.harness.sandbox``: bwrap or none) and the scratch folder the sandbox gives it."""

    candidate: Path | None = None
    sandbox: str = "none"
    scratch: Path | None = None
    triton_cache: Path | None = None  # Triton's cache, kept across the runs of one commit
    role: str = "direct"  # record, judge or direct (ci.harness.case_process)
    budget: int | None = None  # bytes a bwrap sandbox may write (a tmpfs /scratch); None: the host folder scratch

    def inside(self, host: Path) -> str:
        """The path the worker sees for ``host``, a path under the scratch folder."""
        if self.sandbox != "bwrap" or self.scratch is None:
            return str(host)
        return str(Path(sandbox.SCRATCH_MOUNT) / host.resolve().relative_to(self.scratch.resolve()))


class CaseProcessHandle:
    """One ``ci.harness.case_process`` subprocess: JSON lines on stdin/stdout, stderr to a temporary file."""

    def __init__(self, mode: str, isolation: Isolation | None = None) -> None:

        iso = isolation or Isolation()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if mode == "cpu-interpreter":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        self.budget = iso.budget if iso.sandbox == "bwrap" else None
        self.scratch_fd: int | None = None  # the budgeted sandbox's /scratch, open (sandbox.scratch_fd)
        info_r, info_w = os.pipe() if self.budget is not None else (None, None)
        if iso.sandbox == "bwrap":
            # a host folder only where the sandbox binds one (no budget): a budgeted sandbox's /scratch is a tmpfs
            scratch = iso.scratch or (Path(tempfile.mkdtemp(prefix="solci-scratch-")) if self.budget is None else None)
            inner = sandbox.worker_command(mode, sandbox.CANDIDATE_MOUNT if iso.candidate else None, iso.role)
            cmd, env = sandbox.wrap(
                inner,
                candidate=iso.candidate,
                scratch=scratch,
                env=env,
                gpu=None if mode != "cpu-interpreter" else False,
                triton_cache=iso.triton_cache,
                budget=self.budget,
                info_fd=info_w,
            )
        else:
            cmd = sandbox.worker_command(mode, str(iso.candidate) if iso.candidate else None, iso.role)
            if iso.triton_cache is not None:
                env["TRITON_CACHE_DIR"] = str(iso.triton_cache)
        self.err = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env=env,
            text=True,
            bufsize=1,
            start_new_session=True,
            pass_fds=() if info_w is None else (info_w,),
        )
        self.sandbox_pid: int | None = None  # the budgeted sandbox's pid 1 (bubblewrap's --info-fd)
        if info_r is not None and info_w is not None:
            os.close(info_w)
            self.sandbox_pid = sandbox.read_info(info_r)
        self.lines: queue.Queue[str | MessageOverflow | None] = queue.Queue()
        self.received = 0  # characters of messages since the last request
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        """Queue the worker's lines; past a limit, queue why and stop reading (the worker is then killed)."""
        assert self.proc.stdout is not None
        line_limit = _limit_bytes(MESSAGE_LINE_LIMIT_ENV, DEFAULT_MESSAGE_LINE_LIMIT_MB)
        total_limit = _limit_bytes(MESSAGE_TOTAL_LIMIT_ENV, DEFAULT_MESSAGE_TOTAL_LIMIT_MB)
        while True:
            line = self.proc.stdout.readline(line_limit + 1)
            if not line:
                break
            if len(line) > line_limit:
                self.lines.put(MessageOverflow(f"the worker wrote a message line longer than {line_limit} characters"))
                return
            self.received += len(line)
            if self.received > total_limit:
                self.lines.put(MessageOverflow(f"the worker wrote more than {total_limit} characters of messages"))
                return
            self.lines.put(line)
        self.lines.put(None)

    def send(self, msg: dict) -> None:
        self.received = 0  # a request's messages are counted from here
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise CaseProcessDied(f"worker stdin closed: {exc}") from None

    def recv(self, deadline: float) -> dict:
        """The next message; TimeoutError past the deadline, CaseProcessDied at end of output."""
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError from None
            if line is None:
                raise CaseProcessDied(self.describe_exit())
            if isinstance(line, MessageOverflow):
                self.kill()
                raise line
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue  # not a message

    def describe_exit(self) -> str:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        if rc is not None and rc < 0:
            try:
                what = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                what = f"killed by signal {-rc}"
        else:
            what = f"exit code {rc}"
        return f"worker died ({what})"

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            self.err.flush()
            size = self.err.seek(0, os.SEEK_END)
            self.err.seek(max(0, size - n))
            return self.err.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and any compiler it started
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()

    def open_scratch(self) -> None:
        """Hold the budgeted sandbox's tmpfs open (after the hello: the sandbox is set up); RuntimeError when it
        cannot be, since nothing the process records could then be read."""
        if self.budget is None:
            return
        try:
            if self.sandbox_pid is None:
                raise OSError("bubblewrap said no pid")
            self.scratch_fd = sandbox.scratch_fd(self.proc.pid, self.sandbox_pid)
        except OSError as exc:
            raise RuntimeError(f"the sandbox's scratch cannot be opened: {exc}") from None

    def over_budget(self) -> str | None:
        """Why this worker's case is refused when its sandbox's write budget is spent (checked on the tmpfs the
        parent holds open, so also after the worker died); None while it is within it."""
        if self.scratch_fd is None or self.budget is None:
            return None
        try:
            st = os.fstatvfs(self.scratch_fd)
        except OSError:
            return None
        if st.f_bavail * st.f_frsize >= FULL_SLACK_BYTES:
            return None
        return (
            f"{OVER_BUDGET} the kernel's processes filled their write budget of {self.budget / 2**20:.0f} MiB "
            f"(scratch, /tmp and caches together; ${WRITE_BUDGET_ENV})"
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"type": "exit"})
                self.proc.wait(timeout=30)
            except (CaseProcessDied, subprocess.TimeoutExpired):
                self.kill()
        self.err.close()
        if self.scratch_fd is not None:
            os.close(self.scratch_fd)  # the tmpfs goes with its last reference
            self.scratch_fd = None


class CaseProcessPool:
    """Keeps one worker alive across cases; replaces it after a crash, a timeout or a fatal error."""

    def __init__(self, mode: str, isolation: Isolation | None = None) -> None:
        self.mode = mode
        self.isolation = isolation or Isolation()
        self.worker: CaseProcessHandle | None = None
        self.hello: dict | None = None
        self.starts = 0

    def start(self) -> dict:
        """Start a worker and wait for its hello; RuntimeError with the reason when it does not come up."""
        self.stop()
        w = CaseProcessHandle(self.mode, self.isolation)
        self.starts += 1
        try:
            msg = w.recv(time.monotonic() + WORKER_START_TIMEOUT_S)
        except TimeoutError:
            w.kill()
            tail = w.stderr_tail()
            w.close()
            raise RuntimeError(f"worker did not start within {WORKER_START_TIMEOUT_S:g} s\n{tail}") from None
        except CaseProcessDied as exc:
            tail = w.stderr_tail()
            w.close()
            raise RuntimeError(f"{exc} while starting\n{tail}") from None
        if msg.get("type") != "hello" or msg.get("error"):
            w.kill()
            w.close()
            raise RuntimeError(f"worker failed to start: {msg.get('error') or msg}")
        if msg.get("harness") != harness_version():
            w.kill()
            w.close()
            raise RuntimeError(f"the worker runs harness {msg.get('harness')!r}, not this one ({harness_version()})")
        try:
            w.open_scratch()
        except RuntimeError:
            w.kill()
            w.close()
            raise
        self.worker, self.hello = w, msg
        if self.mode == "auto":
            self.mode = msg["mode"]  # later workers start in the mode the first one found
        return msg

    def stop(self, kill: bool = False) -> None:
        if self.worker is not None:
            if kill:
                self.worker.kill()
            self.worker.close()
            self.worker = None

    def run_case(self, request: dict, timeout_s: float) -> tuple[dict, str | None]:
        """Run one case; returns (the worker's result fields, None) or (an error/timeout stub, its status)."""
        return self.request(request, timeout_s, "result")

    def request(self, request: dict, timeout_s: float, reply: str) -> tuple[dict, str | None]:
        """Send one request and wait for the ``reply`` message that carries its id (a line without it, forged
        or left over from an earlier request, is ignored); (its result fields, None) or (a stub, its status)."""
        request = dict(request, id=uuid.uuid4().hex)
        if self.worker is None or self.worker.proc.poll() is not None:
            try:
                self.start()
            except RuntimeError as exc:
                return _stub("error", str(exc)), "error"
        w = self.worker
        assert w is not None
        result, failed = self._exchange(w, request, timeout_s, reply)
        why = w.over_budget()  # whatever the worker said: its writes reached the budget
        if why is not None and self.worker is w:
            self.stop(kill=True)
        elif self.worker is not w:  # it died, timed out or stopped on a fatal error
            w.close()
        return (_stub("error", why), "error") if why is not None else (result, failed)

    def _exchange(self, w: CaseProcessHandle, request: dict, timeout_s: float, reply: str) -> tuple[dict, str | None]:
        """``request``'s exchange with ``w``; a worker that died or timed out is killed and let go (the caller
        closes it), as is one that stopped on a fatal error."""
        phase = "sending the case"
        deadline = time.monotonic() + timeout_s
        try:
            w.send(request)
            while True:
                msg = w.recv(deadline)
                if not isinstance(msg, dict) or msg.get("id") != request["id"]:
                    continue
                if msg.get("type") == "phase":
                    phase = str(msg.get("phase", phase))[:200]
                elif msg.get("type") == reply:
                    result = msg.get("result") if isinstance(msg.get("result"), dict) else _stub("error", "bad result")
                    if msg.get("fatal"):  # the worker exits by itself; a fresh one takes the next case
                        tail = w.stderr_tail()
                        if result.get("error") and tail:
                            result["error"] = f"{result['error']}\nworker stderr tail:\n{_tail(tail)}"
                        w.describe_exit()  # waits for it to end
                        self.worker = None
                    return result, None
        except TimeoutError:
            w.kill()
            tail = w.stderr_tail()
            self.worker = None
            return _stub("timeout", f"timed out after {timeout_s:g} s during {phase}\n{_tail(tail)}"), "timeout"
        except CaseProcessDied as exc:
            tail = w.stderr_tail()
            self.worker = None
            return _stub("error", f"{exc} during {phase}\nstderr tail:\n{_tail(tail)}"), "error"


def _tail(text: str, n: int = 2000) -> str:
    return text[-n:]


def _stub(status: str, error: str) -> dict:
    return {
        "status": status,
        "error": error,
        "correctness": None,
        "timings": [],
        "config": None,
        "telemetry": None,
        "warnings": [],
    }


# ------------------------------------------------------------------------------------------------ git, time
def _git(args: list[str], cwd: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def git_info(cwd: str) -> tuple[str | None, str | None, str | None]:
    """(commit, branch, repo top-level) of the repository at cwd; None where unknown."""
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    if top is None:
        return None, None, None
    commit = _git(["rev-parse", "--verify", "-q", "HEAD"], cwd)
    branch = _git(["symbolic-ref", "--short", "-q", "HEAD"], cwd)
    return commit, branch, top


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------------ the run
def assemble_case(
    case: Case, fields: dict, protocols: list[Protocol], gpu_model: str | None, mode: str, wall_s: float
) -> dict:
    """A ``cases[]`` object from the worker's fields plus the figures derived here."""
    primary = protocols[0].hash
    rec: dict[str, Any] = {
        "case": case.name,
        "batch_size": case.batch_size,
        "seq_len": case.seq_len,
        "m": case.m,
        "status": fields["status"],
        "error": fields.get("error"),
    }
    rec["correctness"] = fields.get("correctness")
    rec["timings"] = []
    known = {p.hash: p for p in protocols}
    for t in fields.get("timings", []):  # the worker's figures are raw samples; every statistic is made here
        xs = t.get("samples_us")
        proto = known.get(t.get("protocol"))
        ok = (
            isinstance(xs, list)
            and proto is not None
            and len(xs) == proto.iters
            and t.get("impl") in IMPLS
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in xs)
        )
        if not ok:
            rec["status"], rec["error"] = "error", f"the worker sent an invalid timing for {t.get('impl')!r}"
            rec["timings"] = []
            break
        extra = {k: v for k, v in t.items() if k in ("host_enqueue_us", "activities_per_iter", "activity_names")}
        rec["timings"].append(
            {
                "impl": t["impl"],
                "protocol": proto.hash,
                "samples_us": [float(x) for x in xs],
                **timing_stats(xs),
                **extra,
            }
        )
    rec["median_us"] = _median(rec, "kernel", primary) if rec["status"] == "pass" else None
    rec["eager_us"] = _median(rec, "eager", primary)
    rec["cublas_us"] = _median(rec, "cublas", primary)
    rec["t_sol_us"] = t_sol_us(case.m, gpu_model) if mode == "gpu" else None
    rec["score"] = case_score(rec["status"], rec["median_us"], rec["t_sol_us"], rec["eager_us"])
    rec["config"] = fields.get("config")
    rec["telemetry"] = fields.get("telemetry")
    rec["wall_s"] = round(wall_s, 3)
    if fields.get("warnings"):
        rec["warnings"] = fields["warnings"]
    return rec


def _fmt(v: float | None, unit: str = " us") -> str:
    return "-" if v is None else f"{v:.1f}{unit}"


def case_line(rec: dict, protocols: list[Protocol]) -> str:
    parts = [
        f"{rec['case']:>11}",
        f"{rec['status']:<9}",
        f"kernel {_fmt(rec['median_us'])}",
        f"eager {_fmt(rec['eager_us'])}",
        f"cublas {_fmt(rec['cublas_us'])}",
    ]
    for p in protocols[1:]:
        parts.append(f"{p.timer} {_fmt(_median(rec, 'kernel', p.hash))}")
    if rec["score"] is not None:
        parts.append(f"score {rec['score']:.3f}")
    parts.append(f"({rec['wall_s']:.1f} s)")
    line = "  ".join(parts)
    if rec["status"] != "pass" and rec.get("error"):
        line += "\n" + " " * 13 + visible(rec["error"].strip().splitlines()[0][:300])
    return line


class Measurer:
    """The processes of one run and how a case goes through them: recorded then judged (the default), or called
    directly (``--direct``). The judge starts first: its hello (a harness process's) says the mode and the
    hardware; the recording process is started in that mode."""

    def __init__(self, args: argparse.Namespace, kind: str) -> None:
        self.args = args
        self.direct = bool(getattr(args, "direct", False))
        self.own_dirs: list[Path] = []
        # the commit's processes write into a tmpfs of this size in a bwrap sandbox (args.scratch is then unused)
        budget = _limit_bytes(WRITE_BUDGET_ENV, DEFAULT_WRITE_BUDGET_MB) if kind == "bwrap" else None
        if self.direct:
            iso = Isolation(args.candidate, kind, args.scratch, args.triton_cache, budget=budget)
            self.judge = CaseProcessPool(args.mode, iso)
            self.recorder: CaseProcessPool | None = None
            return
        rec_scratch = args.scratch or (None if budget is not None else self._own("solci-record-"))
        judge_scratch = self._own("solci-judge-")  # the harness's own: the commit's code never writes here
        self.judge = CaseProcessPool(
            args.mode, Isolation(None, kind, judge_scratch, judge_scratch / "triton", role="judge")
        )
        self.recorder = CaseProcessPool(
            args.mode, Isolation(args.candidate, kind, rec_scratch, args.triton_cache, role="record", budget=budget)
        )

    def _own(self, prefix: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self.own_dirs.append(path)
        return path

    @property
    def measured_by(self) -> str:
        if self.direct:
            return "direct"
        return "replay" if self.judge.mode == "gpu" else "interpreter"

    @property
    def starts(self) -> int:
        return self.judge.starts + (self.recorder.starts if self.recorder else 0)

    def start(self) -> dict:
        hello = self.judge.start()
        if self.recorder is not None:
            self.recorder.mode = hello["mode"]
            self.recorder.start()
        return hello

    def stop(self, kill: bool = False) -> str | None:
        """Stop both processes (the commit's Triton cache kept first, within its cap); what was said of that."""
        said = None if kill else self._keep_triton_cache()
        for pool in (self.recorder, self.judge):
            if pool is not None:
                pool.stop(kill=kill)
        for d in self.own_dirs:
            shutil.rmtree(d, ignore_errors=True)
        return said

    def _keep_triton_cache(self) -> str | None:
        """Copy the commit's Triton cache out of its budgeted sandbox into the runner's folder for its next run
        (``--triton-cache``), regular files only and at most ``$SOLCI_TRITON_CACHE_KEEP_MB``; over that nothing
        is kept."""
        pool = self.recorder or self.judge
        w, dest = pool.worker, pool.isolation.triton_cache
        if w is None or w.scratch_fd is None or dest is None:
            return None
        cap = _limit_bytes(TRITON_KEEP_ENV, DEFAULT_TRITON_KEEP_MB)
        try:
            kept = sandbox.save_tree(w.scratch_fd, "triton", dest, cap)
        except OSError as exc:
            return f"the kernel's Triton cache was not kept: {exc}"
        if kept:
            return None
        return f"the kernel's Triton cache was not kept (over {cap / 2**20:.0f} MiB: ${TRITON_KEEP_ENV})"

    def case(self, case: Case, protocols: list[Protocol], timeout: float) -> dict:
        """One case's result fields (the judge's, or an error/timeout stub)."""
        args = self.args
        request = {
            "type": "case",
            "batch_size": case.batch_size,
            "seq_len": case.seq_len,
            "protocols": [p.definition() for p in protocols],
            "seed": args.seed,
            "baselines": not args.no_baselines,
        }
        if self.recorder is None:
            return self.judge.run_case(dict(request, impl=args.impl), timeout)[0]
        rec_iso, judge_iso = self.recorder.isolation, self.judge.isolation
        assert judge_iso.scratch is not None
        # A new folder each time, made by the recording process itself: the parent never writes or deletes
        # anything in the commit's scratch, and reads it only through real folders (plan.open_folder): in a
        # budgeted sandbox through the tmpfs it holds open, else in the host folder.
        recorded = Path("record") / f"{case.name}-{uuid.uuid4().hex[:12]}"
        if rec_iso.budget is not None:
            inside = str(Path(sandbox.SCRATCH_MOUNT) / recorded)
        else:
            assert rec_iso.scratch is not None
            recorded = rec_iso.scratch / recorded
            inside = rec_iso.inside(recorded)
        record = {
            "type": "record",
            "batch_size": case.batch_size,
            "seq_len": case.seq_len,
            "impl": args.impl,
            "seed": args.seed,
            "dir": inside,
            "protocols": request["protocols"],
            "rounds": protocols[0].rounds,
        }
        said, failed = self.recorder.request(record, timeout, "recorded")
        if failed:
            return said
        if said.get("error"):
            return _stub("error", str(said["error"]))
        if said.get("refused"):
            return _stub("error", f"{plan_contract.UNREPLAYABLE} {str(said['refused'])[:2000]}")
        judged = judge_iso.scratch / "cases" / case.name
        shutil.rmtree(judged, ignore_errors=True)
        gpu = self.judge.mode == "gpu"
        base = self.recorder.worker.scratch_fd if self.recorder.worker is not None else None
        if rec_iso.budget is not None and base is None:
            return _stub("error", "the recording process's sandbox is gone: nothing it recorded can be read")
        try:
            if gpu:
                plan_contract.collect(recorded, judged, base)
            else:
                rounds = protocols[0].rounds
                plan_contract.collect_rounds(recorded, judged, rounds, case.batch_size, case.seq_len, base)
        except plan_contract.RefusedPlan as exc:
            return _stub("error", f"{plan_contract.UNREPLAYABLE} {exc}")
        key = "plan" if gpu else "outputs"
        fields, failed = self.judge.run_case(dict(request, **{key: judge_iso.inside(judged)}), timeout)
        if gpu or failed:
            return fields
        return _with_interpreter_timing(fields, said, protocols[0])


def _with_interpreter_timing(fields: dict, said: dict, primary: Protocol) -> dict:
    """Under the interpreter the recording process times the kernel (a functional figure); its samples join the
    judge's fields only when the judge found the outputs correct. Its other words can only fail a case."""
    try:
        fields["config"] = plan_contract.config_of(said.get("config"))
    except plan_contract.RefusedPlan as exc:
        fields["warnings"] = [*fields.get("warnings", []), f"the kernel's configuration was not kept: {exc}"]
    if fields["status"] != "pass":
        return fields
    if said.get("incorrect"):
        fields["status"], fields["error"] = "incorrect", str(said["incorrect"])[:2000]
        return fields
    if not isinstance(said.get("samples_us"), list):
        fields["status"], fields["error"] = "error", "the kernel's process sent no timing"
        return fields
    fields["timings"] = [{"impl": "kernel", "protocol": primary.hash, "samples_us": said["samples_us"]}] + [
        t for t in fields["timings"] if t.get("impl") != "kernel"
    ]
    return fields


def run_measure(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    started, t0 = _now(), time.monotonic()
    if args.mode != "auto":  # usage errors before a worker starts, where the mode is known
        try:
            resolve_cases(args.cases, args.mode, args.force)
        except ValueError as exc:
            print(f"solci measure: {exc}", file=sys.stderr)
            return 2

    try:
        kind = sandbox.resolve(args.sandbox)
    except (sandbox.SandboxUnavailable, ValueError) as exc:
        print(f"solci measure: {exc}", file=sys.stderr)
        return 2
    module = args.impl.rpartition(":")[0]
    if (kind == "bwrap" or args.candidate is not None) and (module.endswith(".py") or os.sep in module):
        print(
            f"solci measure: --impl {args.impl}: a kernel given as a file runs only unsandboxed, without --candidate "
            "(--sandbox none); in a sandbox the kernel is a module of the tree measured (MODULE:FUNCTION)",
            file=sys.stderr,
        )
        return 2
    if args.candidate is not None and not (args.candidate / "kernel").is_dir():
        print(f"solci measure: --candidate {args.candidate}: no kernel/ package in that tree", file=sys.stderr)
        return 1
    pool = Measurer(args, kind)
    try:
        hello = pool.start()
    except RuntimeError as exc:
        pool.stop(kill=True)
        print(f"solci measure: {exc}", file=sys.stderr)
        return 2 if args.mode == "gpu" else 1
    try:
        mode = hello["mode"]
        try:
            cases = resolve_cases(args.cases, mode, args.force)
        except ValueError as exc:
            print(f"solci measure: {exc}", file=sys.stderr)
            pool.stop()
            return 2
        cupti = hello.get("cupti", False) and not args.no_cupti
        if args.timer == "cupti" and not cupti:
            print(
                "solci measure: --timer cupti: the CUPTI timer does not work here (CUDA events used)", file=sys.stderr
            )
        protocols = make_protocols(
            mode, rounds=args.rounds, warmup=args.warmup, iters=args.iters, cupti=cupti, primary=args.timer or "cupti"
        )
        hardware = hello["hardware"]
        timeout = args.case_timeout or (GPU_CASE_TIMEOUT_S if mode == "gpu" else CPU_CASE_TIMEOUT_S)
        records: list[dict] = []
        bar = tqdm(total=len(cases), desc="measure", unit="case", file=sys.stderr, disable=None)
        print(
            f"solci measure: {len(cases)} cases on {hardware['label']} ({mode}), impl {args.impl}, "
            f"protocol {protocols[0].name} [{protocols[0].hash}], measured by {pool.measured_by}",
            file=sys.stderr,
        )
        for case in cases:
            bar.set_postfix_str(case.name)
            tc = time.monotonic()
            fields = pool.case(case, protocols, timeout)
            rec = assemble_case(case, fields, protocols, hardware.get("gpu_model"), mode, time.monotonic() - tc)
            records.append(rec)
            tqdm.write(case_line(rec, protocols), file=sys.stderr)
            bar.update(1)
        bar.close()
    except BaseException:  # interrupted: do not wait for a busy worker
        pool.stop(kill=True)
        raise
    said = pool.stop()
    if said:
        print(f"solci measure: {said}", file=sys.stderr)

    commit, branch, repo = git_info(args.repo if args.repo and os.path.isdir(args.repo) else os.getcwd())
    doc = {
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "commit": args.commit or commit,
        "branch": args.branch or branch,
        "repo": args.repo or repo,
        "started_at": started,
        "finished_at": _now(),
        "wall_s": round(time.monotonic() - t0, 3),
        "mode": mode,
        "hardware": hardware,
        "protocol": protocols[0].hash,
        "protocols": [p.entry(hello.get("l2_bytes")) for p in protocols],
        "cases": records,
        "suite": suite_summary(records, protocols[0].hash),
        "impl": args.impl,
        "worker_starts": pool.starts,
        "harness": harness_version(),
        "candidate": args.candidate is not None,
        "sandbox": kind,
        "measured_by": pool.measured_by,
    }
    doc["hardware"]["hostname"] = socket.gethostname()  # the sandbox's own name is not the host's
    validate(doc)
    text = json.dumps(doc, indent=1, allow_nan=False)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    s = doc["suite"]
    score = "-" if s["score"] is None else f"{s['score']:.3f}"
    print(
        f"solci measure: {s['n_pass']}/{s['n_cases']} pass; geomean {_fmt(s['geomean_us'])} "
        f"(eager {_fmt(s['geomean_eager_us'])}, cublas {_fmt(s['geomean_cublas_us'])}); "
        f"score {score}; {doc['wall_s']:.1f} s" + (f"; written to {args.out}" if args.out else ""),
        file=sys.stderr,
    )
    return 0 if s["status"] == "pass" else 1


def main(argv: list[str] | None = None) -> int:
    """``solci measure`` on its own (``python -m ci.harness.measure ...``): what the executors run, so a harness holds
    only what measuring needs (ci, kernel, storage), not the dashboard or the other commands."""
    parser = argparse.ArgumentParser(prog="solci")
    register(parser.add_subparsers(dest="command", required=True))
    return dispatch(parser.parse_args(["measure", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
