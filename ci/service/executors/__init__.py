"""Executors: build a commit's code somewhere isolated, run ``solci measure`` on it, return the result.

- ``local``: the commit's tree (``git archive``) measured by this installation's harness, the kernel's worker
  in a bubblewrap sandbox (``ci.harness.sandbox``); ``--trusted`` measures without the sandbox;
- ``docker``: the commit's tree copied into an image of this installation's harness (on the dependency image),
  measured in a locked-down container (no network, non-root, read-only root, no capabilities, limits).

In both, the commit supplies only its kernel package: the harness is the runner's own code.

What every executor shares (options, the execution's result, progress, the command) is in ``base``;
``choose_executor("auto")`` takes Docker when an engine answers and the base image is there, else local.
``$SOLCI_EXECUTOR`` sets the default choice.
"""

from __future__ import annotations

import os

from ci.harness.sandbox import SandboxUnavailable
from ci.service.executors.base import EXECUTOR_ENV, EXECUTOR_KINDS, Executor, ExecutorUnavailable
from ci.service.executors.docker import DockerExecutor
from ci.service.executors.local import LocalExecutor


def default_kind() -> str:
    kind = os.environ.get(EXECUTOR_ENV, "auto").strip().lower() or "auto"
    if kind not in EXECUTOR_KINDS:
        raise ExecutorUnavailable(f"${EXECUTOR_ENV}={kind!r}: expected one of {', '.join(EXECUTOR_KINDS)}")
    return kind


def choose_executor(kind: str | None = None, *, gpu: str = "gpu0", **options: object) -> Executor:
    """The executor for ``kind`` (auto / docker / local; None: ``$SOLCI_EXECUTOR`` or auto).

    auto: docker when an engine answers and the base image exists (or can be built from the commit's
    Dockerfile alone), otherwise local. ``options`` go to the executor's constructor (unknown ones ignored).
    """
    kind = (kind or default_kind()).lower()
    try:
        return _choose(kind, gpu, options)
    except SandboxUnavailable as exc:
        raise ExecutorUnavailable(f"local executor: {exc}") from None


def _choose(kind: str, gpu: str, options: dict) -> Executor:
    if kind not in EXECUTOR_KINDS:
        raise ExecutorUnavailable(f"executor {kind!r}: expected one of {', '.join(EXECUTOR_KINDS)}")
    if kind == "local":
        return LocalExecutor.from_options(gpu=gpu, **options)
    if kind == "docker":
        why = DockerExecutor.unavailable_reason(**options)
        if why:
            raise ExecutorUnavailable(f"docker executor: {why}")
        return DockerExecutor.from_options(gpu=gpu, **options)
    if DockerExecutor.unavailable_reason(**options) is None:
        return DockerExecutor.from_options(gpu=gpu, **options)
    return LocalExecutor.from_options(gpu=gpu, **options)
