"""The local executor: the commit's tree measured by this installation's harness, its kernel in a sandbox.

For each commit: ``git archive`` of the commit is unpacked into a fresh work folder (a plain tree: no ``.git``,
nothing that points back at the source repository); then this installation's own ``solci measure`` (the
trusted harness: its timers, reference, correctness rule and statistics, never the commit's ``ci/``) runs as a
subprocess in the work folder with ``--candidate <tree>``, and starts its case workers inside a bubblewrap
sandbox (``ci.harness.sandbox``: the tree read-only, a private scratch folder, the GPU's device nodes, nothing else:
no history file, no source ``.git``, no home, no network). ``sandbox="none"`` (``--trusted``) measures
without the sandbox and says so in the log. The measurement gets its own process group (killed whole on
timeout) and dies with the runner (``PR_SET_PDEATHSIG``).

Work folders are keyed by the runner's history and GPU slot: ``<work_root>/<history>/<gpu>/`` (``history``: a hash
of the runner's database, ``storage.spool.history_key``), so two checkouts or two histories on one host never share
one. Each run works in ``run-XXXX/`` there (``owner.json``, ``tree/``, ``scratch/``, ``result.json``,
``log.txt``, ``pid``), removed afterwards; ``owner.json`` (host, pid and process start time of the runner,
history, slot) is written before anything else. ``cleanup_stale`` removes a run folder only when its owner is a
runner of this host, history and slot that is gone (its pid gone, or reused: another start time); a folder
without a readable owner is left alone. Triton's cache of a commit is ``triton-cache/<commit>`` in the same folder.

The result document the measurement writes is parsed here and handed back as it is: storage validates it
before believing any figure (``storage.result.validate``; a document that fails is a rejected run).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ci.harness import sandbox as sb
from ci.harness.sandbox import boot_code
from ci.service.executors.base import (
    NO_HISTORY,
    Execution,
    MeasureOptions,
    Progress,
    clip_log,
    finish_measurement,
    gpu_index,
    measure_command,
)
from ci.service.gitutil import GitError, archive
from storage.jobs import process_start, this_host

_PR_SET_PDEATHSIG = 1
OWNER_FILE = "owner.json"
RUN_PREFIX = "run-"


def default_work_root() -> Path:
    """Where every local runner of this user keeps its work folders (``$SOLCI_WORK``); each history and slot has
    its own folder inside (``LocalExecutor.slot_root``)."""
    return Path(os.environ.get("SOLCI_WORK") or Path(tempfile.gettempdir()) / f"solci-work-{os.getuid()}")


def _folder_name(text: str) -> str:
    """``text`` as one folder name (no separator, never ``.`` or ``..``)."""
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(text))[:64].strip(".")
    return name or "_"


def owner_record(history: str, slot: str) -> dict:
    """Who a work folder belongs to: this process (host, pid, process start time), its history and slot."""
    pid = os.getpid()
    return {"format": 1, "host": this_host(), "pid": pid, "start": process_start(pid), "history": history, "slot": slot}


def owner_alive(owner: dict) -> bool:
    """Whether the runner ``owner`` names (on this host) is still running: its pid exists with the same process
    start time (a reused pid is another process)."""
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    start = owner.get("start")
    if start is None:  # its start time could not be read when it was written: the pid alone tells
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return process_start(pid) == str(start)


def _read_owner(workdir: Path) -> dict | None:
    try:
        owner = json.loads((workdir / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _resolve_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up once in the runner (never between fork and exec); None where there is none."""
    try:
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _resolve_prctl()


def _die_with_parent() -> None:
    """``preexec_fn`` of the measurement: it runs in the child between fork and exec while the runner has
    other threads (the lease's heartbeat), so it only calls the ``prctl`` resolved at import: no library loading,
    no lock a parent's thread may hold."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def export_tree(source: Path, commit: str, dest: Path) -> None:
    """The commit's tracked files (``git archive``) unpacked into ``dest``; GitError when git cannot."""
    data = archive(source, commit)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(dest, filter="data")  # no links out of the tree, no device files, no set-uid bits


def harness_command(args: list[str]) -> list[str]:
    """This installation's ``solci measure`` (the trusted harness) run isolated: ``python -I`` (no PYTHON* variables,
    no user site, not the working directory on ``sys.path``) with only the harness's folder on ``sys.path``."""

    return [sys.executable, "-I", "-c", boot_code("ci.harness.measure"), *args]


class LocalExecutor:
    name = "local"

    def __init__(
        self,
        *,
        gpu: str = "gpu0",
        python: str | None = None,
        work_root: str | Path | None = None,
        sandbox: str = "auto",
        history: str | None = None,
    ) -> None:

        self.gpu = gpu
        self.python = python or sys.executable
        self.work_root = Path(work_root) if work_root else default_work_root()
        self.history = history or NO_HISTORY  # the runner's history (storage.spool.history_key)
        self.sandbox = sb.resolve(sandbox)  # SandboxUnavailable for auto/bwrap without a working bwrap

    @classmethod
    def from_options(cls, *, gpu: str = "gpu0", **options: object) -> LocalExecutor:
        keys = ("python", "work_root", "sandbox", "history")
        return cls(gpu=gpu, **{k: v for k, v in options.items() if k in keys and v is not None})  # type: ignore[arg-type]

    def describe(self) -> str:
        return f"local ({'sandbox ' + self.sandbox if self.sandbox != 'none' else 'TRUSTED: no sandbox'})"

    @property
    def slot_root(self) -> Path:
        """This runner's own folder: ``<work_root>/<history>/<gpu>/`` (its runs and its Triton caches)."""
        return self.work_root / _folder_name(self.history) / _folder_name(self.gpu)

    KEEP_CACHES = 32

    def triton_cache(self, commit: str) -> Path:
        """Triton's cache for one commit's runs (its confirmation re-runs compile nothing); the oldest of more
        than KEEP_CACHES are removed."""
        root = self.slot_root / "triton-cache"
        path = root / commit[:20]
        if root.is_dir():
            others = sorted((p for p in root.iterdir() if p != path), key=lambda p: p.stat().st_mtime)
            for old in others[: max(0, len(others) - self.KEEP_CACHES + 1)]:
                shutil.rmtree(old, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        os.utime(path)
        return path

    # ------------------------------------------------------------------------------------------ running
    def _env(self, options: MeasureOptions) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "SOLCI_DB", "GIT_"))}
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
        self.slot_root.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=self.slot_root))
        try:
            self._claim(workdir)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        tree, out, log_path = workdir / "tree", workdir / "result.json", workdir / "log.txt"
        lines = [f"[solci] local executor: commit {commit} of {repo}"]
        if self.sandbox == "none":
            lines.append("[solci] TRUSTED mode (--trusted): the commit's kernel runs without a sandbox")
        try:
            try:
                export_tree(Path(source), commit, tree)
            except (GitError, tarfile.TarError, OSError) as exc:
                lines.append(f"[solci] could not export the commit: {exc}")
                return Execution("build_failed", None, "\n".join(lines), time.monotonic() - start, executor=self.name)
            args = measure_command(str(out), commit, branch, repo, options)
            args += [
                "--candidate",
                str(tree),
                "--sandbox",
                self.sandbox,
                "--scratch",
                str(workdir / "scratch"),
                "--triton-cache",
                str(self.triton_cache(commit)),
            ]
            cmd = harness_command(args)
            lines.append(
                f"[solci] $ solci measure {' '.join(args)}  (this installation's harness; "
                f"timeout {options.timeout:.0f} s)"
            )
            status, code, output = self._run(cmd, workdir, log_path, workdir, options)
            lines.append(output.rstrip())
            result = out.read_bytes() if status == "ok" and out.exists() else None
            status, doc = finish_measurement(status, code, result, lines, options.timeout)
            return Execution(status, doc, clip_log("\n".join(lines)), time.monotonic() - start, code, self.name)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _run(
        self, cmd: list[str], cwd: Path, log_path: Path, workdir: Path, options: MeasureOptions
    ) -> tuple[str, int | None, str]:
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=self._env(options),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            (workdir / "pid").write_text(str(proc.pid))
            follow = Progress(options.progress) if options.progress else None
            deadline = time.monotonic() + options.timeout
            try:
                with open(log_path, "rb") as tail:
                    while True:
                        left = deadline - time.monotonic()
                        try:
                            code = proc.wait(timeout=max(0.0, min(left, 1.0) if follow else left))
                            status = "ok"
                            break
                        except subprocess.TimeoutExpired:
                            if time.monotonic() >= deadline:
                                _kill_group(proc.pid)
                                code = proc.wait()
                                status = "timed_out"
                                break
                        finally:
                            if follow:
                                follow.feed(tail.read())
            finally:
                _kill_group(proc.pid)  # whatever it left running in its group
        return status, code, log_path.read_text(errors="replace")

    def _claim(self, workdir: Path) -> None:
        """Write the run folder's owner record (``owner_record``), atomically, before anything else is in it."""
        tmp = workdir / f".{OWNER_FILE}.tmp"
        tmp.write_text(json.dumps(owner_record(self.history, self.gpu)), encoding="utf-8")
        os.replace(tmp, workdir / OWNER_FILE)

    # ------------------------------------------------------------------------------------------ recovery
    def stale(self, workdir: Path) -> bool:
        """Whether ``workdir`` is what a dead runner of this host, history and slot left: its owner record says
        so, and that runner is gone (``owner_alive``)."""
        owner = _read_owner(workdir)
        if owner is None:  # no record: not known to be ours, left alone
            return False
        if (owner.get("host"), owner.get("history"), owner.get("slot")) != (this_host(), self.history, self.gpu):
            return False
        return not owner_alive(owner)

    def cleanup_stale(self) -> list[str]:
        """Kill the measurement a dead runner of this host, history and GPU slot left, and remove its work
        folders; what a live runner, another history, another slot or an unknown owner left stays."""
        removed: list[str] = []
        if not self.slot_root.is_dir():
            return removed
        for workdir in sorted(self.slot_root.glob(f"{RUN_PREFIX}*")):
            if not workdir.is_dir() or workdir.is_symlink() or not self.stale(workdir):
                continue
            pid_file = workdir / "pid"
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                if str(workdir) in cmdline:  # still ours: the --out path names this folder
                    _kill_group(pid)
            shutil.rmtree(workdir, ignore_errors=True)
            removed.append(str(workdir))
        return removed
