"""``solci doctor`` against a real engine (CPU host: every line ok), against no engine, and as a GPU host
with a fake ``nvidia-smi`` on PATH and no NVIDIA container toolkit (the GPU lines FAIL with their advice).

The engine tests skip when no engine answers or solci-deps:cpu is missing, except in CI (CI=true).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.cli.doctor import FAIL, OK, TOOLKIT_TOOLS, Doctor, variant_pins
from tests.support import PROJECT
from tests.support.images import IMAGE, needs_image

FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu*) echo "0, NVIDIA H200, 580.159.04" ;;
  *) echo "| NVIDIA-SMI 580.159.04      Driver Version: 580.159.04      CUDA Version: 13.0     |" ;;
esac
"""
BROKEN_SMI = """#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." >&2
exit 9
"""
NO_ENGINE = "unix:///nonexistent/solci-test-docker.sock"


def fake_bin(tmp_path: Path, script: str) -> str:
    """A PATH with a fake nvidia-smi first (and no NVIDIA container toolkit anywhere on it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    found = [t for t in TOOLKIT_TOOLS if shutil.which(t, path=path)]
    if found:
        pytest.skip(f"this host has the NVIDIA container toolkit ({found}): the missing-toolkit case cannot be made")
    return path


def doctor(*args: str, **env: str) -> tuple[int, list[str], str]:
    res = subprocess.run(
        [sys.executable, "-m", "ci.cli", "doctor", *args],
        cwd=PROJECT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return res.returncode, res.stdout.splitlines(), res.stderr


def line(lines: list[str], prefix: str) -> str:
    hits = [ln for ln in lines if ln.startswith(prefix)]
    assert len(hits) == 1, f"one line starting {prefix!r} expected in:\n" + "\n".join(lines)
    return hits[0]


def check_lines(lines: list[str]) -> list[str]:
    """The check lines (between the header and the summary), each ok / FAIL / skip."""
    assert lines[0].startswith("solci doctor: a ") and lines[-1].startswith("solci doctor: ")
    body = lines[1:-1]
    assert body and all(ln.startswith(("ok   ", "FAIL ", "skip ")) for ln in body), "\n".join(lines)
    return body


# ------------------------------------------------------------------------------------------------ no engine
def test_no_engine_says_what_to_do() -> None:
    code, lines, _ = doctor("--cpu", DOCKER_HOST=NO_ENGINE)
    assert code == 1
    body = check_lines(lines)
    engine = line(body, f"FAIL Docker engine at {NO_ENGINE}")
    assert "docker/ci_setup.sh" in engine
    assert line(body, f"skip image {IMAGE}").endswith("needs an engine")
    assert "checks failed" in lines[-1]


def test_broken_driver_is_a_fail_line(tmp_path: Path) -> None:
    path = fake_bin(tmp_path, BROKEN_SMI)
    code, lines, _ = doctor(DOCKER_HOST=NO_ENGINE, PATH=path)
    assert code == 1 and lines[0].startswith("solci doctor: a gpu host")  # nvidia-smi on PATH: a GPU host
    host = line(check_lines(lines), "FAIL host GPU")
    assert "couldn't communicate with the NVIDIA driver" in host and "install or repair the driver" in host
    assert line(lines, "FAIL NVIDIA container toolkit")


def test_bad_arguments_are_usage_errors() -> None:
    code, _, err = doctor("--device", "first", DOCKER_HOST=NO_ENGINE)
    assert code == 2 and "solci: error: --device" in err
    code, _, err = doctor("--gpu", "--cpu")
    assert code == 2 and "not allowed with" in err


def test_stack_checks_against_the_lock_and_the_driver() -> None:
    lines: list[str] = []
    doc = Doctor("gpu", "solci-deps:cuda", "0", echo=lines.append)
    cuda_build = {"python": "3.11.2", "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0"}
    assert variant_pins("cuda")["torch"] == "2.11.0"  # PyPI's CUDA build reports 2.11.0+cu130: the same pin
    doc.host_cuda = "13.0"
    doc.check_stack("stack", cuda_build)
    doc.host_cuda = "12.8"
    doc.check_stack("stack", cuda_build)
    doc.check_stack("stack", {**cuda_build, "triton": "3.9.0"})
    doc.check_stack("stack", {**cuda_build, "torch": "2.13.0+cpu", "cuda": None})
    assert lines[0].startswith("ok   stack: python 3.11.2, torch 2.11.0+cu130 (CUDA 13.0), triton 3.6.0")
    assert lines[1].startswith("FAIL stack:") and "update the driver" in lines[1]
    assert lines[2].startswith("FAIL stack: triton 3.9.0 (constraints.txt: 3.6.0)") and "--gpu --force" in lines[2]
    assert lines[3].startswith("FAIL stack:") and "CPU build cannot use the GPU" in lines[3]
    assert [c.status for c in doc.checks] == [OK, FAIL, FAIL, FAIL]


# ------------------------------------------------------------------------------------------------ real engine
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cpu_host_passes_every_check() -> None:
    needs_image()
    code, lines, err = doctor("--cpu")
    body = check_lines(lines)
    assert code == 0, "\n".join(lines) + err
    assert all(ln.startswith("ok   ") for ln in body)
    assert line(body, f"ok   image {IMAGE}: variant cpu, torch {variant_pins('cpu')['torch']}")
    assert "/usr/bin/gcc (gcc " in line(body, f"ok   C compiler Triton uses in {IMAGE}")
    assert line(body, f"ok   a C extension against Python.h compiles and imports in {IMAGE}")
    assert line(body, f"ok   a Triton kernel runs under the interpreter in {IMAGE}")
    assert "all" in lines[-1] and "checks passed" in lines[-1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fake_gpu_host_without_toolkit_fails_the_gpu_lines(tmp_path: Path) -> None:
    import docker

    needs_image()
    path = fake_bin(tmp_path, FAKE_SMI)
    client = docker.from_env()
    try:
        # a doctor run killed before its clean-up (another process's) may have left one: only this run's count
        before = {c.id for c in client.containers.list(all=True, filters={"label": "solci.doctor=1"})}
        code, lines, err = doctor("--image", IMAGE, PATH=path)  # GPU host by default: nvidia-smi is on PATH
        body = check_lines(lines)
        assert code == 1, err
        assert lines[0] == f"solci doctor: a gpu host (image {IMAGE})"
        assert line(body, "ok   host GPU 0, NVIDIA H200, 580.159.04, driver supports CUDA 13.0")
        toolkit = line(body, "FAIL NVIDIA container toolkit")
        assert "nvidia-container-toolkit" in toolkit and "nvidia-ctk runtime configure --runtime=docker" in toolkit
        assert "not the cuda variant" in line(body, f"FAIL image {IMAGE}")
        assert "CPU build cannot use the GPU" in line(body, f"FAIL stack in {IMAGE}")
        assert line(body, f"ok   C compiler Triton uses in {IMAGE}")  # the CPU-side checks still run
        assert line(body, f"ok   Triton's CUDA driver module (driver.c) compiles in {IMAGE}")
        gpu = line(body, f"FAIL GPU 0 visible inside a container of {IMAGE}")
        assert "the engine could not start it" in gpu and "install the NVIDIA container toolkit" in gpu
        assert line(body, "skip a Triton kernel compiles and runs on the GPU").endswith(
            "needs the GPU inside a container"
        )
        # the containers the engine could not start are removed too
        after = {c.id for c in client.containers.list(all=True, filters={"label": "solci.doctor=1"})}
        assert not after - before, after - before
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gpu_host_without_the_cuda_image_says_how_to_build_it(tmp_path: Path) -> None:
    needs_image()
    path = fake_bin(tmp_path, FAKE_SMI)
    code, lines, _ = doctor("--gpu", "--image", "solci-test-no-such-image:cuda", PATH=path)
    assert code == 1
    body = check_lines(lines)
    assert line(body, "FAIL image solci-test-no-such-image:cuda").endswith("docker/ci_setup.sh --gpu")
    assert line(body, "skip GPU 0 visible inside a container")
