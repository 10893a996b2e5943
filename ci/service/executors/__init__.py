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
    Why it was chosen is kept on the executor (``chosen_because``; ``executor_line`` says it in one line).
    """
    given = kind or os.environ.get(EXECUTOR_ENV)
    source = "--executor" if kind else f"${EXECUTOR_ENV}"
    kind = (kind or default_kind()).lower()
    try:
        executor, why = _choose(kind, gpu, options)
    except SandboxUnavailable as exc:
        raise ExecutorUnavailable(f"local executor: {exc}") from None
    if given and kind != "auto":
        why = f"{source} {kind}"
    if executor.name == "local" and options.get("sandbox") == "none":
        why += "; WITHOUT the bubblewrap sandbox (--trusted)"
    try:
        executor.chosen_because = why  # type: ignore[attr-defined]
    except AttributeError:  # an executor that keeps no attributes (a test's) says only its name
        pass
    return executor


def executor_line(executor: object) -> str:
    """One line saying which executor measures and why, e.g. "executor: docker (auto: a Docker engine answers
    and the base image is there; --executor local to measure in bubblewrap)": what a runner says on start."""
    name = getattr(executor, "name", executor.__class__.__name__)
    why = getattr(executor, "chosen_because", "")
    return f"executor: {name}" + (f" ({why})" if why else "")


def _choose(kind: str, gpu: str, options: dict) -> tuple[Executor, str]:
    if kind not in EXECUTOR_KINDS:
        raise ExecutorUnavailable(f"executor {kind!r}: expected one of {', '.join(EXECUTOR_KINDS)}")
    if kind == "local":
        return LocalExecutor.from_options(gpu=gpu, **options), "local"
    if kind == "docker":
        why = DockerExecutor.unavailable_reason(**options)
        if why:
            raise ExecutorUnavailable(f"docker executor: {why}")
        return DockerExecutor.from_options(gpu=gpu, **options), "docker"
    why = DockerExecutor.unavailable_reason(**options)
    if why is None:
        return DockerExecutor.from_options(gpu=gpu, **options), (
            "auto: a Docker engine answers and the base image is there; --executor local to measure in bubblewrap"
        )
    return LocalExecutor.from_options(gpu=gpu, **options), f"auto: {why}; --executor docker once one is set up"
