"""The Docker executor: build an image of the commit and measure inside it.

Build: the context is ``git archive`` of the commit (tracked files only), built with the commit's own
``Dockerfile`` (the runner's checkout's Dockerfile when the commit has none) and ``BASE_IMAGE`` = the prebuilt
dependency image (``solci-deps:latest``, made by ``docker/build_base_image.sh``), so dependencies are a cached
layer and a commit costs a source copy. A failed build is ``build_failed`` with the build log.

Run: ``python -m ci.cli measure --out /out/result.json ...`` with the network off, memory and pids limits,
the GPU when the host has one (device requests), a wall-clock timeout (then ``timed_out``). The result is
copied out with ``get_archive`` (so it also works when the runner itself is a container using the host's
Docker socket). Containers carry the label ``solci.gpu=<slot>``; ``cleanup_stale`` removes those a killed
runner left.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci.executors import Execution, MeasureOptions, clip_log, gpu_index, measure_command, read_result
from ci.gitutil import GitError

DEFAULT_BASE_IMAGE = "solci-deps:latest"
BASE_IMAGE_ENV = "SOLCI_BASE_IMAGE_FOR_RUNS"
IMAGE_REPO = "solci-run"
LABEL = "solci.gpu"
_RUNNER_DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def _docker() -> Any:
    import docker  # imported lazily: the SDK is only needed for this executor

    return docker


def host_has_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None


@dataclass
class ContainerRun:
    status: str  # ok | timed_out | error
    exit_code: int | None
    log: str
    fetched: bytes | None  # the file asked for, when the container wrote it


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
    ) -> None:
        self.gpu = gpu
        self.base_image = base_image or os.environ.get(BASE_IMAGE_ENV) or DEFAULT_BASE_IMAGE
        self.gpus = gpus  # auto | all | none
        self.mem_limit = mem_limit
        self.pids_limit = pids_limit
        self.build_timeout = build_timeout
        self.keep_images = keep_images
        self.client = client or _docker().from_env(timeout=int(build_timeout))

    @classmethod
    def from_options(cls, *, gpu: str = "gpu0", **options: object) -> DockerExecutor:
        keys = ("base_image", "gpus", "mem_limit", "pids_limit", "build_timeout", "keep_images")
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
            return f"base image {image} is missing: run docker/build_base_image.sh"
        except Exception as exc:
            return f"cannot inspect base image {image}: {exc}"
        finally:
            client.close()
        return None

    def describe(self) -> str:
        return f"docker (base {self.base_image})"

    # -------------------------------------------------------------------------------------------- build
    def build_context(self, source: Path, commit: str) -> bytes:
        """``git archive`` of the commit as a tar, with the runner's Dockerfile added when it has none."""
        import subprocess

        from ci.gitutil import git_env

        tar = subprocess.run(
            ["git", "archive", "--format=tar", commit], cwd=source, env=git_env(), capture_output=True,
            check=False, timeout=600,
        )  # fmt: skip
        if tar.returncode != 0:
            raise GitError(f"git archive {commit}: {tar.stderr.decode(errors='replace').strip()}")
        data = tar.stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tf:
            names = set(tf.getnames())
        if "Dockerfile" in names or not _RUNNER_DOCKERFILE.exists():
            return data
        buf = io.BytesIO()
        with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=buf, mode="w") as dst:
            for member in src.getmembers():
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
            dst.add(str(_RUNNER_DOCKERFILE), arcname="Dockerfile")
        return buf.getvalue()

    def build(self, source: Path, commit: str, lines: list[str]) -> str | None:
        """Build the commit's image; its tag, or None (the build log is in ``lines``)."""
        tag = f"{IMAGE_REPO}:{commit[:12]}"
        try:
            context = self.build_context(source, commit)
        except GitError as exc:
            lines.append(f"[solci] {exc}")
            return None
        lines.append(f"[solci] docker build {tag} (BASE_IMAGE={self.base_image}, context {len(context)} bytes)")
        ok = False
        try:
            stream = self.client.api.build(
                fileobj=io.BytesIO(context), custom_context=True, tag=tag, rm=True, forcerm=True,
                pull=False, decode=True, buildargs={"BASE_IMAGE": self.base_image},
                labels={"solci.commit": commit}, timeout=int(self.build_timeout),
            )  # fmt: skip
            for chunk in stream:
                if "stream" in chunk:
                    lines.append(chunk["stream"].rstrip("\n"))
                if "error" in chunk:
                    lines.append(f"[solci] build error: {chunk['error'].strip()}")
                    return None
                if "aux" in chunk and "ID" in chunk["aux"]:
                    ok = True
            ok = ok or self._image_exists(tag)
        except Exception as exc:
            lines.append(f"[solci] build error: {exc.__class__.__name__}: {exc}")
            return None
        if ok:
            self.prune_images(keep=self.keep_images, protect=tag)
        return tag if ok else None

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

    def execute(
        self, source: Path, commit: str, *, branch: str | None, repo: str, options: MeasureOptions
    ) -> Execution:
        start = time.monotonic()
        lines = [f"[solci] docker executor: commit {commit} of {repo}"]
        image = self.build(source, commit, lines)
        if image is None:
            return Execution("build_failed", None, clip_log("\n".join(lines)), time.monotonic() - start,
                             executor=self.name)  # fmt: skip
        out = "/out/result.json"
        measure = ["python", "-m", "ci.cli", *measure_command(out, commit, branch, repo, options)]
        cmd = ["sh", "-c", 'mkdir -p /out && exec "$@"', "sh", *measure]
        lines.append(f"[solci] docker run {image} (network none, gpu {'yes' if self._device_requests() else 'no'}, "
                     f"timeout {options.timeout:.0f} s): {' '.join(measure)}")  # fmt: skip
        run = self.run_in_image(image, cmd, env=options.env, timeout=options.timeout, fetch=out, commit=commit)
        lines.append(run.log.rstrip())
        status, doc = run.status, None
        if status == "ok":
            if run.fetched is None:
                status = "crashed"
                lines.append(f"[solci] measure exited with {run.exit_code} and wrote no result")
            else:
                doc, why = read_result(run.fetched, "result.json")
                if doc is None:
                    status = "crashed"
                    lines.append(f"[solci] {why}")
            if doc is not None and run.exit_code:
                lines.append(f"[solci] measure exit status {run.exit_code}")
        elif status == "timed_out":
            lines.append(f"[solci] killed after {options.timeout:.0f} s (timeout)")
        return Execution(status, doc, clip_log("\n".join(lines)), time.monotonic() - start, run.exit_code,
                         self.name)  # fmt: skip

    def run_in_image(
        self, image: str, cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 3600.0,
        fetch: str | None = None, commit: str = "",
    ) -> ContainerRun:  # fmt: skip
        """Run ``cmd`` in a fresh container of ``image`` (network off, limits, the GPU when there is one),
        wait at most ``timeout`` s, copy out the file ``fetch``; the container is removed afterwards."""
        name = f"solci-{self.gpu}-{(commit or 'adhoc')[:12]}-{uuid.uuid4().hex[:6]}"
        container = None
        try:
            container = self.client.containers.run(
                image, cmd, detach=True, name=name, network_mode="none", mem_limit=self.mem_limit,
                pids_limit=self.pids_limit, device_requests=self._device_requests(),
                environment={"PYTHONUNBUFFERED": "1", **(env or {})},
                labels={LABEL: self.gpu, "solci.commit": commit}, shm_size="1g",
            )  # fmt: skip
            status, code = self._wait(container, timeout)
            log = container.logs(stdout=True, stderr=True).decode(errors="replace")
            fetched = self._fetch(container, fetch) if fetch and status == "ok" else None
            return ContainerRun(status, code, log, fetched)
        except Exception as exc:
            return ContainerRun("error", None, f"[solci] docker run failed: {exc.__class__.__name__}: {exc}", None)
        finally:
            if container is not None:
                try:
                    container.remove(force=True)
                except Exception:
                    pass

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
        removed = []
        for c in self.client.containers.list(all=True, filters={"label": f"{LABEL}={self.gpu}"}):
            try:
                c.remove(force=True)
                removed.append(c.name)
            except Exception:
                pass
        return removed
