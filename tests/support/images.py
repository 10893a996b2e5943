"""The dependency image for the tests that run in it: ``IMAGE`` (solci-deps:cpu, what CI builds),
``needs_image()`` (a skip without an engine or the image, a failure under CI=true) and ``run_in_image``."""

from __future__ import annotations

import os
import subprocess

import pytest

from ci.service.executors.docker import DockerExecutor

IMAGE = "solci-deps:cpu"


def needs_image() -> None:
    why = DockerExecutor.unavailable_reason(base_image=IMAGE)  # the executor's own check: engine, then image
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"in CI the image tests need a real engine and {IMAGE}: {why}")
    pytest.skip(why)


def run_in_image(*cmd: str, user: str = "solci", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``docker run --rm --network none`` of the image (no network: nothing may be fetched at run time)."""
    flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--user", user, *flags, IMAGE, *cmd],
        capture_output=True,
        text=True,
        timeout=300,
    )
