"""The local executor: a detached ``git worktree`` of the commit, measured by a subprocess of this Python.

The subprocess runs ``python -m ci.cli measure`` with the worktree as its working directory and first on
``PYTHONPATH``, so the commit's kernel and measure code run (with this environment's dependencies). It gets
its own process group (killed whole on timeout) and dies with the runner (``PR_SET_PDEATHSIG``). Each run
works in ``<work_root>/<gpu>-XXXX/`` (worktree ``src/``, ``result.json``, ``log.txt``, ``pid``), removed
afterwards; ``cleanup_stale`` removes what a killed runner left there.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ci.executors import Execution, MeasureOptions, clip_log, gpu_index, measure_command, read_result
from ci.gitutil import GitError, git

_PR_SET_PDEATHSIG = 1


def default_work_root() -> Path:
    return Path(os.environ.get("SOLCI_WORK") or Path(tempfile.gettempdir()) / f"solci-work-{os.getuid()}")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class LocalExecutor:
    name = "local"

    def __init__(self, *, gpu: str = "gpu0", python: str | None = None, work_root: str | Path | None = None) -> None:
        self.gpu = gpu
        self.python = python or sys.executable
        self.work_root = Path(work_root) if work_root else default_work_root()

    @classmethod
    def from_options(cls, *, gpu: str = "gpu0", **options: object) -> LocalExecutor:
        keys = ("python", "work_root")
        return cls(gpu=gpu, **{k: v for k, v in options.items() if k in keys and v is not None})  # type: ignore[arg-type]

    def describe(self) -> str:
        return f"local ({self.python})"

    # ------------------------------------------------------------------------------------------ running
    def _env(self, worktree: Path, options: MeasureOptions) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("PYTHONHOME", "PYTHONSTARTUP"):
            env.pop(key, None)
        prev = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(worktree) + (os.pathsep + prev if prev else "")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        idx = gpu_index(self.gpu)
        if idx is not None and "CUDA_VISIBLE_DEVICES" not in env:
            env["CUDA_VISIBLE_DEVICES"] = idx
        env.update(options.env)
        return env

    def execute(
        self, source: Path, commit: str, *, branch: str | None, repo: str, options: MeasureOptions
    ) -> Execution:
        start = time.monotonic()
        self.work_root.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=f"{self.gpu}-", dir=self.work_root))
        worktree, out, log_path = workdir / "src", workdir / "result.json", workdir / "log.txt"
        lines = [f"[solci] local executor: commit {commit} of {repo}"]
        try:
            try:
                git("worktree", "prune", cwd=source, check=False)
                git("worktree", "add", "--detach", "--force", str(worktree), commit, cwd=source)
            except GitError as exc:
                lines.append(f"[solci] could not check the commit out: {exc}")
                return Execution("build_failed", None, "\n".join(lines), time.monotonic() - start,
                                 executor=self.name)  # fmt: skip
            cmd = [self.python, "-m", "ci.cli", *measure_command(str(out), commit, branch, repo, options)]
            lines.append(f"[solci] $ {' '.join(cmd)}  (cwd {worktree}, timeout {options.timeout:.0f} s)")
            status, code, output = self._run(cmd, worktree, log_path, workdir, options)
            lines.append(output.rstrip())
            doc = None
            if status == "ok":
                if out.exists():
                    doc, why = read_result(out.read_bytes(), "result.json")
                    if doc is None:
                        status = "crashed"
                        lines.append(f"[solci] {why}")
                else:
                    status = "crashed"
                    lines.append(f"[solci] measure exited with {code} and wrote no result")
            if status == "timed_out":
                lines.append(f"[solci] killed after {options.timeout:.0f} s (timeout)")
            elif doc is not None and code:
                lines.append(f"[solci] measure exit status {code}")
            return Execution(status, doc, clip_log("\n".join(lines)), time.monotonic() - start, code, self.name)
        finally:
            self._remove(source, workdir)

    def _run(
        self, cmd: list[str], cwd: Path, log_path: Path, workdir: Path, options: MeasureOptions
    ) -> tuple[str, int | None, str]:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, cwd=cwd, env=self._env(cwd, options), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
            (workdir / "pid").write_text(str(proc.pid))
            try:
                code = proc.wait(timeout=options.timeout)
                status = "ok"
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                code = proc.wait()
                status = "timed_out"
            finally:
                _kill_group(proc.pid)  # whatever it left running in its group
        return status, code, log_path.read_text(errors="replace")

    def _remove(self, source: Path, workdir: Path) -> None:
        worktree = workdir / "src"
        if worktree.exists():
            git("worktree", "remove", "--force", str(worktree), cwd=source, check=False)
        shutil.rmtree(workdir, ignore_errors=True)
        git("worktree", "prune", cwd=source, check=False)

    # ------------------------------------------------------------------------------------------ recovery
    def cleanup_stale(self) -> list[str]:
        """Kill the measurement a killed runner of this GPU slot left, and remove its work folders."""
        removed: list[str] = []
        if not self.work_root.is_dir():
            return removed
        for workdir in sorted(self.work_root.glob(f"{self.gpu}-*")):
            pid_file = workdir / "pid"
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                if str(workdir) in cmdline:  # still ours: the --out path names this folder
                    _kill_group(pid)
            src = workdir / "src" / ".git"
            if src.is_file():  # a worktree: tell its repository it is gone
                with contextlib.suppress(OSError):
                    gitdir = Path(src.read_text().split("gitdir:", 1)[1].strip())
                    shutil.rmtree(workdir, ignore_errors=True)
                    git("worktree", "prune", cwd=gitdir.parent.parent, check=False)
            shutil.rmtree(workdir, ignore_errors=True)
            removed.append(str(workdir))
        return removed
