"""The Docker executor: the commit's tree measured by this installation's harness in a locked-down container.

Images (built with the network off: the dependency image already holds every package):

- ``solci-harness:<tag>``: the dependency image (``solci-deps:*``, ``docker/``) plus this installation's own
  harness packages (``ci``, ``kernel``, ``storage``) at ``/opt/solci``; the tag is a hash of exactly the files
  it copies and of the base image (``harness_tag``), so any change of them builds a new one, and the runner's
  code on disk is what Docker measures with, as the local executor does; from the runner's code, never from
  a commit's;
- ``solci-run:<commit>-<harness tag>``: the harness image plus the commit's tracked files (``git archive``)
  at ``/candidate``, with a Dockerfile of the runner's (the commit's own Dockerfile is not used); built once
  and reused by every later run of the commit on that harness (its confirmation runs too).

Run: the harness's ``solci measure --candidate /candidate`` under ``timeout`` (so a container ends by itself even
when no runner is left to stop it), as a non-root user (uid 10001), with a read-only root filesystem and a
private ``/tmp``, every capability dropped, ``no-new-privileges``, no network, memory (at most 80 % of the
engine host's), pids and time limits, the GPU when the host has one (device requests). The result document
comes back from a per-run volume mounted at ``/out`` (``get_archive``, which also works when the runner itself
is a container using the host's Docker socket); storage validates it before believing a figure. Containers
and volumes carry the labels ``solci.gpu=<slot>``, ``solci.history=<history>`` (``storage.spool.history_key`` of
the runner's database) and ``solci.owner=<host:pid:start>`` (the runner's process, ``storage.jobs.owner_id``);
``cleanup_stale`` removes only what a dead runner of this history and slot left: its owner on this host is gone
(pid gone, or reused: another start time), or, for an owner of another host name (a runner container
recreated), the container exited longer than a lease timeout ago and no runner came back for it.

What it does not isolate: inside the container the recording process (the commit's code) and the judging
process that replays it run as one user, without a sandbox between them, so the commit's code could reach the
judge's files there; the container is the boundary (docs/replay.md). Figures still come only from the judge.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ci.harness.sandbox import harness_roots
from ci.harness.timing import harness_version
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
from storage.jobs import lease_timeout_s, parse_owner, process_start, this_host
from storage.jobs import owner_id as process_owner

DEFAULT_BASE_IMAGE = "solci-deps:latest"
BASE_IMAGE_ENV = "SOLCI_BASE_IMAGE_FOR_RUNS"
HARNESS_REPO = "solci-harness"
IMAGE_REPO = "solci-run"
LABEL = "solci.gpu"
OWNER_LABEL = "solci.owner"
HISTORY_LABEL = "solci.history"
RUN_USER = "10001:10001"
HARNESS_DIR = "/opt/solci"
HOST_MEMORY_SHARE = 0.8
_BOOT = f"import sys; sys.path.insert(0, {HARNESS_DIR!r}); from ci.harness.measure import main; sys.exit(main())"


def _docker() -> Any:
    import docker  # imported lazily: the SDK is only needed for this executor

    return docker


def host_has_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


def _bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = str(text).strip().lower().rstrip("b")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(float(t))


def owner_id() -> str:
    """``host:pid:start`` of this runner process (``storage.jobs.owner_id``): what a container's owner label says."""
    return process_owner()


def owner_gone(owner: str | None) -> bool | None:
    """Whether the runner an owner label names is gone: True (on this host, its pid is gone or is another process
    now), False (alive), None (not known here: another host's, or no such label)."""
    parsed = parse_owner(owner)
    if parsed is None or parsed[0] != this_host():
        return None
    _, pid, start = parsed
    return process_start(pid) != start


def _finished_long_ago(container: Any, seconds: float) -> bool:
    """Whether ``container`` has exited, more than ``seconds`` ago (Docker's ``State.FinishedAt``)."""
    state = (container.attrs or {}).get("State") or {}
    if state.get("Status") not in ("exited", "dead"):
        return False
    text = str(state.get("FinishedAt") or "")
    try:  # "2026-12-01T22:05:03.123456789Z": seconds are enough
        finished = datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return False
    return (datetime.now(UTC) - finished).total_seconds() > seconds


@dataclass
class ContainerRun:
    status: str  # ok | timed_out | error
    exit_code: int | None
    log: str
    fetched: bytes | None  # the file asked for, when the container wrote it


_HARNESS_FILES: dict[tuple[str, ...], tuple[tuple, dict[str, bytes]]] = {}


def harness_files(roots: list[Path] | None = None) -> dict[str, bytes]:
    """What the harness image copies to HARNESS_DIR: every file of this installation's harness packages
    (``ci.harness.sandbox.harness_roots``: ``ci``, ``kernel``, ``storage``) but bytecode, as {name in the build
    context: bytes}. Cached: the files are read again only when one was added, removed or changed (its size
    or modification time)."""

    roots = list(roots or harness_roots())
    found = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                st = path.stat()
                found.append((f"solci/{root.name}/{path.relative_to(root)}", str(path), st.st_size, st.st_mtime_ns))
    key = tuple(found)
    cache = tuple(str(r) for r in roots)
    hit = _HARNESS_FILES.get(cache)
    if hit is not None and hit[0] == key:
        return hit[1]
    files = {name: Path(path).read_bytes() for name, path, *_ in found}
    _HARNESS_FILES[cache] = (key, files)
    return files


def harness_tag(files: dict[str, bytes], base: str = "") -> str:
    """The harness image's tag: a short hash of exactly what it holds, the files it copies (names and bytes;
    ``harness_files``) and its base image (``base``: its id). Not ``ci.harness.timing.harness_version``, which hashes
    only the timing files (``Protocol.harness``): a change in any other copied file needs a new image too."""
    h = hashlib.sha256(f"base {base}\n".encode())
    for name in sorted(files):
        data = files[name]
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:12]


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerExecutor:
    name = "docker"

    def __init__(
        self,
        *,
        gpu: str = "gpu0",
        base_image: str | None = None,
        gpus: str = "auto",
        mem_limit: str = "32g",
        pids_limit: int = 4096,
        build_timeout: float = 1800.0,
        keep_images: int = 20,
        client: Any = None,
        history: str | None = None,
    ) -> None:
        self.gpu = gpu
        self.history = history or NO_HISTORY  # the runner's history (storage.spool.history_key)
        self.base_image = base_image or os.environ.get(BASE_IMAGE_ENV) or DEFAULT_BASE_IMAGE
        self.gpus = gpus  # auto | all | none
        self.pids_limit = pids_limit
        self.build_timeout = build_timeout
        self.keep_images = keep_images
        self.client = client or _docker().from_env(timeout=int(build_timeout))
        self.mem_limit = self.memory_limit(mem_limit)

    @classmethod
    def from_options(cls, *, gpu: str = "gpu0", **options: object) -> DockerExecutor:
        keys = ("base_image", "gpus", "mem_limit", "pids_limit", "build_timeout", "keep_images", "history")
        return cls(gpu=gpu, **{k: v for k, v in options.items() if k in keys and v is not None})  # type: ignore[arg-type]

    @staticmethod
    def unavailable_reason(base_image: object = None, **_: object) -> str | None:
        """None when an engine answers and the base image exists; else why the executor cannot run."""
        image = str(base_image or os.environ.get(BASE_IMAGE_ENV) or DEFAULT_BASE_IMAGE)
        try:
            docker = _docker()
        except ImportError:
            return "the Docker SDK is not installed (pip install docker)"
        try:
            client = docker.from_env(timeout=10)
            client.ping()
        except Exception as exc:
            return f"no Docker engine answers ({exc.__class__.__name__}: {str(exc)[:200]})"
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            return f"base image {image} is missing: run docker/ci_setup.sh (--gpu on a GPU host)"
        except Exception as exc:
            return f"cannot inspect base image {image}: {exc}"
        finally:
            client.close()
        return None

    def describe(self) -> str:
        return f"docker (base {self.base_image})"

    def memory_limit(self, requested: str) -> str:
        """``requested``, but never more than HOST_MEMORY_SHARE of the engine host's memory."""
        want = _bytes(requested)
        try:
            total = int(self.client.info().get("MemTotal") or 0)
        except Exception:
            total = 0
        if total:
            want = min(want, int(HOST_MEMORY_SHARE * total))
        return f"{want // (1 << 20)}m"

    # -------------------------------------------------------------------------------------------- build
    def _build(
        self,
        context: bytes,
        tag: str,
        dockerfile: str,
        labels: dict[str, str],
        lines: list[str],
        buildargs: dict[str, str] | None = None,
    ) -> bool:
        try:
            stream = self.client.api.build(
                fileobj=io.BytesIO(context),
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                buildargs=buildargs or {},
                labels=labels,
                dockerfile=dockerfile,
                network_mode="none",
                timeout=int(self.build_timeout),
            )
            ok = False
            for chunk in stream:
                if "stream" in chunk:
                    lines.append(chunk["stream"].rstrip("\n"))
                if "error" in chunk:
                    lines.append(f"[solci] build error: {chunk['error'].strip()}")
                    return False
                if "aux" in chunk and "ID" in chunk["aux"]:
                    ok = True
            return ok or self._image_exists(tag)
        except Exception as exc:
            lines.append(f"[solci] build error: {exc.__class__.__name__}: {exc}")
            return False

    def harness_image(self, lines: list[str]) -> str | None:
        """``solci-harness:<tag>``: the dependency image plus this installation's harness, built when no image
        of exactly these files on this base exists (``harness_tag``)."""

        files = dict(harness_files())
        tag = f"{HARNESS_REPO}:{harness_tag(files, self._image_id(self.base_image))}"
        if self._image_exists(tag):
            return tag
        files["Dockerfile.solci-harness"] = (
            "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nUSER 0\n"
            f"COPY solci {HARNESS_DIR}\n"
            f"RUN mkdir -p /out /candidate && chown {RUN_USER} /out && chmod -R a+rX {HARNESS_DIR}\n"
            "ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp TRITON_CACHE_DIR=/tmp/triton\n"
            f"USER {RUN_USER}\n"
        ).encode()
        lines.append(f"[solci] docker build {tag} (the runner's harness on {self.base_image}, network none)")
        ok = self._build(
            _tar(files),
            tag,
            "Dockerfile.solci-harness",
            {"solci.harness": harness_version(), "solci.harness_tag": tag.split(":", 1)[1]},
            lines,
            {"BASE_IMAGE": self.base_image},
        )
        return tag if ok else None

    def build_context(self, source: Path, commit: str, harness: str) -> tuple[bytes, str]:
        """``git archive`` of the commit as a tar, with the runner's Dockerfile (under a name no commit uses):
        (context, dockerfile name)."""
        tree = archive(source, commit, prefix="candidate/")
        name = f"Dockerfile.solci-{uuid.uuid4().hex[:8]}"
        dockerfile = f"FROM {harness}\nCOPY --chown=0:0 candidate /candidate\n".encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=io.BytesIO(tree)) as src, tarfile.open(fileobj=buf, mode="w") as dst:
            for member in src.getmembers():
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
            info = tarfile.TarInfo(name)
            info.size = len(dockerfile)
            dst.addfile(info, io.BytesIO(dockerfile))
        return buf.getvalue(), name

    @staticmethod
    def run_tag(commit: str, harness: str) -> str:
        """``solci-run:<commit>-<harness tag>``: one image per commit and harness image."""
        return f"{IMAGE_REPO}:{commit}-{harness.rsplit(':', 1)[-1]}"

    def build(self, source: Path, commit: str, lines: list[str]) -> str | None:
        """The commit's image: reused when one of this commit on this harness exists, else built (then the
        oldest per-commit images beyond ``keep_images`` are pruned); its tag, or None (the build log is in
        ``lines``)."""
        harness = self.harness_image(lines)
        if harness is None:
            return None
        tag = self.run_tag(commit, harness)
        if self._image_exists(tag):
            lines.append(f"[solci] reusing {tag} (built before from the commit's tree on {harness})")
            return tag
        try:
            context, dockerfile = self.build_context(source, commit, harness)
        except GitError as exc:
            lines.append(f"[solci] {exc}")
            return None
        lines.append(f"[solci] docker build {tag} (the commit's tree on {harness}, context {len(context)} bytes)")
        if not self._build(context, tag, dockerfile, {"solci.commit": commit}, lines):
            return None
        self.prune_images(keep=self.keep_images, protect=tag)
        return tag

    def prune_images(self, *, keep: int, protect: str = "") -> list[str]:
        """Remove all but the ``keep`` newest per-commit images (shared layers stay: only tags go)."""
        try:
            images = self.client.images.list(name=IMAGE_REPO)
        except Exception:
            return []
        images.sort(key=lambda im: im.attrs.get("Created", ""), reverse=True)
        removed = []
        for image in images[keep:]:
            for tag in image.tags:
                if tag == protect or not tag.startswith(IMAGE_REPO + ":"):
                    continue
                try:
                    self.client.images.remove(tag)
                    removed.append(tag)
                except Exception:
                    pass
        return removed

    def _image_exists(self, tag: str) -> bool:
        try:
            self.client.images.get(tag)
            return True
        except Exception:
            return False

    def _image_id(self, ref: str) -> str:
        """The id of image ``ref`` (what a tag names now); ``ref`` itself when the engine cannot say."""
        try:
            return str(self.client.images.get(ref).id)
        except Exception:
            return ref

    # ---------------------------------------------------------------------------------------------- run
    def _device_requests(self) -> list[Any] | None:
        want = self.gpus
        if want == "none" or (want == "auto" and not host_has_gpu()):
            return None
        types = _docker().types
        idx = gpu_index(self.gpu)
        if want == "all" or idx is None:
            return [types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return [types.DeviceRequest(device_ids=[idx], capabilities=[["gpu"]])]

    def labels(self) -> dict[str, str]:
        """What a container or volume of this runner carries: its slot, its history, its owner (this process)."""
        return {LABEL: self.gpu, HISTORY_LABEL: self.history, OWNER_LABEL: owner_id()}

    def run_options(self, *, timeout: float, env: dict[str, str] | None, commit: str) -> dict[str, Any]:
        """The keyword arguments of ``containers.run``: every limit and lock-down in one place."""
        return {
            "detach": True,
            "network_mode": "none",
            "user": RUN_USER,
            "read_only": True,
            "tmpfs": {"/tmp": "rw,exec,nosuid,size=8g,mode=1777"},
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "mem_limit": self.mem_limit,
            "memswap_limit": self.mem_limit,
            "pids_limit": self.pids_limit,
            "device_requests": self._device_requests(),
            "shm_size": "1g",
            "environment": {"PYTHONUNBUFFERED": "1", "HOME": "/tmp", "TRITON_CACHE_DIR": "/tmp/triton", **(env or {})},
            "labels": {**self.labels(), "solci.commit": commit},
            "stop_signal": "SIGKILL",
        }

    def execute(
        self, source: Path, commit: str, *, branch: str | None, repo: str, options: MeasureOptions
    ) -> Execution:
        start = time.monotonic()
        lines = [f"[solci] docker executor: commit {commit} of {repo}"]
        image = self.build(source, commit, lines)
        if image is None:
            return Execution(
                "build_failed", None, clip_log("\n".join(lines)), time.monotonic() - start, executor=self.name
            )
        out = "/out/result.json"
        args = [*measure_command(out, commit, branch, repo, options), "--candidate", "/candidate", "--sandbox", "none"]
        # the container ends by itself at the time limit, even when no runner is left to stop it
        cmd = ["timeout", "-s", "KILL", str(int(options.timeout) + 30), "python", "-I", "-c", _BOOT, *args]
        lines.append(
            f"[solci] docker run {image} (user {RUN_USER}, read-only root, network none, no capabilities, "
            f"memory {self.mem_limit}, gpu {'yes' if self._device_requests() else 'no'}, timeout "
            f"{options.timeout:.0f} s): solci measure {' '.join(args)}"
        )
        run = self.run_in_image(
            image, cmd, env=options.env, timeout=options.timeout, fetch=out, commit=commit, progress=options.progress
        )
        lines.append(run.log.rstrip())
        status, doc = finish_measurement(run.status, run.exit_code, run.fetched, lines, options.timeout)
        return Execution(status, doc, clip_log("\n".join(lines)), time.monotonic() - start, run.exit_code, self.name)

    def run_in_image(
        self,
        image: str,
        cmd: list[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float = 3600.0,
        fetch: str | None = None,
        commit: str = "",
        progress: Callable[[str], None] | None = None,
    ) -> ContainerRun:
        """Run ``cmd`` in a fresh locked-down container of ``image`` (``run_options``) with a fresh volume at
        ``/out``, wait at most ``timeout`` s, copy out the file ``fetch``; container and volume are removed.
        ``progress``: each case's line while it runs (``Progress``, from the container's log stream)."""
        name = f"solci-{self.gpu}-{(commit or 'adhoc')[:12]}-{uuid.uuid4().hex[:6]}"
        container = volume = None
        try:
            volume = self.client.volumes.create(name=f"{name}-out", labels=self.labels())
            opts = self.run_options(timeout=timeout, env=env, commit=commit)
            container = self.client.containers.run(
                image, cmd, name=name, volumes={volume.name: {"bind": "/out", "mode": "rw"}}, **opts
            )
            if progress is not None:
                threading.Thread(target=_follow_logs, args=(container, Progress(progress)), daemon=True).start()
            status, code = self._wait(container, timeout)
            log = container.logs(stdout=True, stderr=True).decode(errors="replace")
            fetched = self._fetch(container, fetch) if fetch and status == "ok" else None
            run = ContainerRun(status, code, log, fetched)
        except Exception as exc:
            run = ContainerRun("error", None, f"[solci] docker run failed: {exc.__class__.__name__}: {exc}", None)
        left = remove_all([container, volume])
        if left:
            run.log += f"\n[solci] left for cleanup_stale: {'; '.join(left)}"
        return run

    def _wait(self, container: Any, timeout: float) -> tuple[str, int | None]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                container.kill()
                return "timed_out", None
            try:
                res = container.wait(timeout=max(1, min(left, 60)))
                return "ok", int(res.get("StatusCode", -1))
            except Exception as exc:  # requests' ReadTimeout / ConnectionError when the wait runs out
                if "timed out" not in str(exc).lower() and "timeout" not in exc.__class__.__name__.lower():
                    raise

    @staticmethod
    def _fetch(container: Any, path: str) -> bytes | None:
        try:
            bits, _ = container.get_archive(path)
        except Exception:
            return None
        data = b"".join(bits)
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            for member in tf.getmembers():
                if member.isfile():
                    fh = tf.extractfile(member)
                    return fh.read() if fh else None
        return None

    # ------------------------------------------------------------------------------------------ recovery
    def cleanup_stale(self) -> list[str]:
        """Remove the containers and volumes a dead runner of this history and slot left (labels ``solci.gpu``
        and ``solci.history``): its owner on this host is gone (``owner_gone``), or, owned under another host
        name, the container exited more than a lease timeout ago (its runner would have removed it right away)
        and its ``-out`` volume with it. A live runner's, another history's or another slot's stay."""
        mine = {"label": [f"{LABEL}={self.gpu}", f"{HISTORY_LABEL}={self.history}"]}
        removed: list[str] = []
        orphans: set[str] = set()
        for c in self.client.containers.list(all=True, filters=mine):
            gone = owner_gone((c.labels or {}).get(OWNER_LABEL))
            if gone is False or (gone is None and not _finished_long_ago(c, lease_timeout_s())):
                continue
            try:
                c.remove(force=True)
                removed.append(c.name)
                orphans.add(f"{c.name}-out")
            except Exception:
                pass
        for v in self.client.volumes.list(filters=mine):
            if not (owner_gone((v.attrs.get("Labels") or {}).get(OWNER_LABEL)) or v.name in orphans):
                continue
            try:
                v.remove(force=True)
                removed.append(v.name)
            except Exception:
                pass
        return removed


def remove_all(things: list[Any], attempts: int = 5, pause_s: float = 0.2) -> list[str]:
    """Remove each container or volume (forced), retrying what the engine refuses for a moment (a removal
    already in progress, a volume its container still holds); one gone already counts as removed. What could
    not be removed, each as "NAME: why" (``cleanup_stale`` takes it later)."""
    not_found = _docker().errors.NotFound
    left: list[str] = []
    for thing in (t for t in things if t is not None):
        for attempt in range(attempts):
            try:
                thing.remove(force=True)
                break
            except not_found:
                break
            except Exception as exc:
                if attempt == attempts - 1:
                    left.append(f"{getattr(thing, 'name', thing)}: {exc}")
                else:
                    time.sleep(pause_s * 2**attempt)
    return left


def _follow_logs(container: Any, follow: Progress) -> None:
    """Feed the container's output to ``follow`` until it stops (or is removed: then the stream just ends)."""
    try:
        for chunk in container.logs(stream=True, follow=True):
            follow.feed(chunk)
    except Exception:
        pass
