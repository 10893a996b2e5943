"""The sandbox the commit's code runs in on the local executor: bubblewrap (``bwrap``, Debian's package).

``wrap(cmd, ...)`` turns the measuring worker's command into one that runs in fresh namespaces (user, pid,
network, ipc, uts, cgroup) with a filesystem made of:

- read-only: the system (``/usr`` and the merged-usr links, the dynamic loader's cache), this Python (its
  base prefix and the virtual environment, the runner's site folders), the tools' folders outside /usr (the
  C compiler Triton builds with, the PATH's folders), the runner's own harness packages (``ci``, ``kernel``,
  ``storage`` of this installation, at their own paths), and the commit's tree at ``/candidate``;
- read-write: a private scratch folder (``/scratch``: HOME, TMPDIR, Triton's cache) and ``/tmp``. With a write
  ``budget`` (the commit's processes) ``/scratch`` is a tmpfs of that size (TMPDIR points into it), ``/tmp`` and
  ``/dev/shm`` tmpfs of ``SIDE_BYTES`` each: nothing the commit writes reaches the runner's disk, and
  ``scratch_fd`` opens the tmpfs for the parent (``--info-fd``: the sandbox's pid 1). Without one (the harness's
  judge) ``/scratch`` is the host folder ``scratch``. Triton's cache of a commit (``triton_cache``, kept across
  the runs of one commit: only that commit's code ever writes it) is bound read-only at ``TRITON_SEED`` and
  copied into the tmpfs by the harness before the kernel is imported;
- the GPU's device nodes (``/dev/nvidia*``), ``/proc/driver/nvidia`` and ``/sys`` read-only, when the host has
  a GPU; a private ``/proc`` and a minimal ``/dev`` otherwise.

Nothing else exists inside: not the history file, not the source repository or its ``.git``, not the home
folder, no network (a private loopback only). The environment is cleared down to an allow-list. The worker dies
with its parent and every process it started dies with the sandbox's own pid 1.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

SANDBOX_KINDS = ("auto", "bwrap", "none")
CANDIDATE_MOUNT = "/candidate"
SCRATCH_MOUNT = "/scratch"
TRITON_SEED = "/triton-seed"  # a commit's kept Triton cache, read-only (``TRITON_SEED_ENV`` names it)
TRITON_SEED_ENV = "SOLCI_TRITON_SEED"
SIDE_BYTES = 64 * 2**20  # /tmp and /dev/shm of a budgeted sandbox, each, beside the budget
# Variables that pass into the sandbox (everything else is cleared).
PASS_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "TRITON_INTERPRET",
    "TRITON_PTXAS_PATH",
    "CC",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here; the message says what to do."""


def harness_roots() -> list[Path]:
    """The folders of this installation's harness packages (what the worker imports besides the commit's
    kernel): ``ci``, ``problem``, ``kernel``, ``storage``."""
    root = harness_root()
    return [root / name for name in ("ci", "problem", "kernel", "storage")]


def harness_root() -> Path:
    """The folder that holds this installation's ``ci`` package (put first on the worker's ``sys.path``)."""
    return Path(__file__).resolve().parents[2]


def trusted_path() -> list[str]:
    """The ``sys.path`` a harness process gets: the harness's folder, then this (trusted) process's own
    entries that are absolute folders (the runner's PYTHONPATH or site folders), never the working directory."""
    out = [str(harness_root())]
    for p in sys.path:
        if p and os.path.isabs(p) and os.path.isdir(p) and p not in out:
            out.append(p)
    return out


def boot_code(module: str) -> str:
    """``python -I -c`` code that runs ``module.main()`` with ``trusted_path()`` as the front of ``sys.path``."""
    return f"import sys; sys.path[:0] = {trusted_path()!r}; from {module} import main; sys.exit(main())"


def worker_command(mode: str, candidate: str | None, role: str = "direct") -> list[str]:
    """The worker's command: this Python, isolated (``-I``: no PYTHON* variables, no user site, no cwd on
    ``sys.path``), with the harness's trusted ``sys.path`` (``trusted_path``); ``candidate``: the commit's tree as
    the worker sees it (``CANDIDATE_MOUNT`` inside the sandbox); ``role``: record, judge or direct
    (``ci.harness.case_process``)."""
    cmd = [sys.executable, "-I", "-c", boot_code("ci.harness.case_process"), "--mode", mode, "--role", role]
    return [*cmd, "--candidate", candidate] if candidate else cmd


@functools.cache
def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def probe() -> str | None:
    """None when bubblewrap can make a sandbox here, else why not (and what to do)."""
    path = bwrap_path()
    if path is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        proc = subprocess.run(
            [path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if proc.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {proc.stderr.strip()[-300:]}"
    return None


def resolve(kind: str) -> str:
    """The sandbox to use for ``kind`` (auto: bwrap when it works); SandboxUnavailable for bwrap without it."""
    if kind not in SANDBOX_KINDS:
        raise ValueError(f"sandbox {kind!r}: expected one of {', '.join(SANDBOX_KINDS)}")
    if kind == "none":
        return "none"
    why = probe()
    if why is None:
        return "bwrap"
    raise SandboxUnavailable(
        f"no sandbox for the commit's code: {why}. Install it, or pass --trusted to measure without one "
        "(the commit's code then sees everything this user can)"
    )


def _gpu_nodes() -> list[str]:
    dev = Path("/dev")
    nodes = sorted(str(p) for p in dev.glob("nvidia*") if not p.is_dir())
    caps = dev / "nvidia-caps"
    if caps.is_dir():
        nodes += sorted(str(p) for p in caps.iterdir())
    return nodes


def _system_binds() -> list[str]:
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for etc in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf"):
        p = Path("/etc") / etc
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    return args


def _inside_a_checkout(path: Path) -> bool:
    """Whether ``path`` lies in a repository's checkout or a history's folder (never bound into a sandbox)."""
    for p in (path, *path.parents):
        if (p / ".git").exists() or (p / ".solci").exists():
            return True
    return False


def tool_dirs(env: dict[str, str]) -> list[Path]:
    """Folders outside /usr that the worker's tools live in: the C compiler Triton builds its driver module
    with (``$CC`` or cc/gcc on PATH: its install prefix, e.g. /opt/gcc) and the PATH's folders; never one in a
    repository's checkout or the home folder."""
    out: list[Path] = []
    home = Path.home().resolve()
    path_dirs = [Path(p) for p in env.get("PATH", "").split(os.pathsep) if p]
    compilers = [env.get("CC")] + [shutil.which(c, path=env.get("PATH")) for c in ("cc", "gcc")]
    for cc in compilers:
        if cc and Path(cc).exists():
            real = Path(cc).resolve()
            out.append(real.parent.parent if real.parent.name == "bin" else real.parent)
    for d in path_dirs:
        if d.is_dir():
            out.append(d.resolve())
    keep = []
    for d in out:
        if str(d).startswith("/usr/") or d == Path("/usr") or _inside_a_checkout(d):
            continue
        if d == home or home in d.parents:
            continue
        if d not in keep:
            keep.append(d)
    return keep


def _ro(path: Path, seen: set[str]) -> list[str]:
    """A read-only bind of ``path`` (resolved) unless it lies under a folder already bound."""
    real = str(Path(path).resolve())
    if any(real == s or real.startswith(s.rstrip("/") + "/") for s in seen) or not Path(real).exists():
        return []
    seen.add(real)
    return ["--ro-bind", real, real]


def wrap(
    cmd: list[str],
    *,
    candidate: Path | None,
    scratch: Path | None,
    env: dict[str, str],
    gpu: bool | None = None,
    triton_cache: Path | None = None,
    budget: int | None = None,
    info_fd: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """``cmd`` run inside a bubblewrap sandbox (see the module docstring); returns (command, environment).
    ``budget``: bytes the sandbox may write (a tmpfs ``/scratch``; ``scratch`` is then unused); ``info_fd``: a
    descriptor bubblewrap writes its JSON information to (``read_info``), passed on to it by the caller."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable("bubblewrap is not installed (apt-get install bubblewrap)")
    args = [
        path,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "solci-sandbox",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if budget is None:
        if scratch is None:
            raise ValueError("a sandbox without a write budget binds a host scratch folder: give one")
        scratch.mkdir(parents=True, exist_ok=True)
        for sub in ("tmp", "triton", "cache"):
            (scratch / sub).mkdir(exist_ok=True)
        args += ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
    else:  # everything the commit can write, in memory and bounded (TMPDIR is /scratch/tmp)
        args += ["--size", str(budget), "--tmpfs", SCRATCH_MOUNT]
        for sub in ("tmp", "triton", "cache"):
            args += ["--dir", f"{SCRATCH_MOUNT}/{sub}"]
        for small in ("/tmp", "/dev/shm"):
            args += ["--size", str(SIDE_BYTES), "--tmpfs", small]
    args += _system_binds()
    seen = {"/usr"}
    for p in (Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).resolve().parent.parent):
        args += _ro(p, seen)
    for p in harness_roots():
        args += _ro(p, seen)
    for p in tool_dirs(env):
        args += _ro(p, seen)
    root = harness_root()
    for p in trusted_path()[1:]:
        # site folders only: never a repository's checkout (its history file, its .git) or the harness's root
        if Path(p) == root or _inside_a_checkout(Path(p)):
            continue
        args += _ro(Path(p), seen)
    if candidate is not None:
        args += ["--ro-bind", str(Path(candidate).resolve()), CANDIDATE_MOUNT]
    if scratch is not None and budget is None:
        args += ["--bind", str(scratch.resolve()), SCRATCH_MOUNT]
    args += ["--chdir", SCRATCH_MOUNT]
    if triton_cache is not None:  # kept across the runs of one commit (only that commit's code writes it)
        triton_cache.mkdir(parents=True, exist_ok=True)
        if budget is None:
            args += ["--bind", str(triton_cache.resolve()), f"{SCRATCH_MOUNT}/triton"]
        else:
            args += ["--ro-bind", str(triton_cache.resolve()), TRITON_SEED]
    use_gpu = bool(_gpu_nodes()) if gpu is None else gpu
    if use_gpu:
        for node in _gpu_nodes():
            args += ["--dev-bind", node, node]
        for extra in ("/proc/driver/nvidia", "/sys"):
            if Path(extra).exists():
                args += ["--ro-bind", extra, extra]
    args.append("--clearenv")
    inner = {k: v for k, v in env.items() if k in PASS_ENV}
    inner.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    inner.update(
        HOME=SCRATCH_MOUNT,
        TMPDIR=f"{SCRATCH_MOUNT}/tmp",
        TRITON_CACHE_DIR=f"{SCRATCH_MOUNT}/triton",
        XDG_CACHE_HOME=f"{SCRATCH_MOUNT}/cache",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    if budget is not None and triton_cache is not None:
        inner[TRITON_SEED_ENV] = TRITON_SEED
    for k, v in inner.items():
        args += ["--setenv", k, v]
    return [*args, "--", *cmd], {k: v for k, v in env.items() if k in ("PATH", "LANG")}


def read_info(fd: int) -> int | None:
    """The host pid of the sandbox's pid 1 from bubblewrap's ``--info-fd`` (read to its end, then closed); None
    when bubblewrap wrote none (it failed before the sandbox existed)."""
    raw = b""
    try:
        while chunk := os.read(fd, 65536):
            raw += chunk
            if len(raw) > 65536:
                break
    finally:
        os.close(fd)
    try:
        pid = json.loads(raw)["child-pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) and pid > 1 else None


def scratch_fd(bwrap_pid: int, child_pid: int) -> int:
    """A descriptor of the tmpfs ``/scratch`` of the sandbox whose pid 1 is ``child_pid``, opened through its
    ``/proc/PID/root`` once the sandbox is set up (its command has started: bubblewrap reports the pid before it
    mounts anything), then checked to be a child of ``bwrap_pid`` (the bubblewrap this process started) so a
    reused pid is never taken for it. The descriptor keeps the tmpfs readable after the sandbox has ended, so
    what a crashed worker wrote can still be measured against its budget. OSError when it cannot be opened."""
    fd = os.open(f"/proc/{child_pid}/root{SCRATCH_MOUNT}", os.O_RDONLY | os.O_DIRECTORY)
    try:
        stat_line = Path(f"/proc/{child_pid}/stat").read_text()
        ppid = int(stat_line.rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError) as exc:
        os.close(fd)
        raise OSError(f"the sandbox's pid {child_pid} is gone: {exc}") from None
    if ppid != bwrap_pid:
        os.close(fd)
        raise OSError(f"pid {child_pid} is not the sandbox bubblewrap {bwrap_pid} started")
    return fd


def seed_triton_cache() -> None:
    """In the sandbox, before any of the commit's code: copy the commit's kept Triton cache (read-only at
    ``$SOLCI_TRITON_SEED``) into ``$TRITON_CACHE_DIR``, inside the write budget."""
    seed, cache = os.environ.get(TRITON_SEED_ENV), os.environ.get("TRITON_CACHE_DIR")
    if seed and cache and os.path.isdir(seed):
        shutil.copytree(seed, cache, symlinks=True, dirs_exist_ok=True)


def save_tree(base: int, name: str, dest: Path, cap: int, depth: int = 8) -> bool:
    """Replace ``dest`` with a copy of the folder ``name`` in the folder ``base`` (a descriptor): real folders
    and regular files only (no symbolic link followed, anything else left out), at most ``cap`` bytes and
    ``depth`` levels. False, and ``dest`` removed, when it is over the cap; OSError when it cannot be read."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    left = [cap]

    def copy(dir_fd: int, to: Path, level: int) -> bool:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                flags = os.O_RDONLY | os.O_NOFOLLOW
                if entry.is_dir(follow_symlinks=False) and level < depth:
                    sub = os.open(entry.name, flags | os.O_DIRECTORY, dir_fd=dir_fd)
                    try:
                        (to / entry.name).mkdir()
                        if not copy(sub, to / entry.name, level + 1):
                            return False
                    finally:
                        os.close(sub)
                elif entry.is_file(follow_symlinks=False):
                    fd = os.open(entry.name, flags, dir_fd=dir_fd)
                    with os.fdopen(fd, "rb") as src:
                        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                            continue
                        data = src.read(left[0] + 1)
                    left[0] -= len(data)
                    if left[0] < 0:
                        return False
                    (to / entry.name).write_bytes(data)
        return True

    try:
        top = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=base)
        try:
            kept = copy(top, tmp, 1)
        finally:
            os.close(top)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)
    if kept:
        os.replace(tmp, dest)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return kept
