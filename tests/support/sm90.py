"""Compiling for sm_90 on a machine without a GPU: whether Triton's bundled ``ptxas`` is here, the H200's shared
memory limit, and a script of scripts/ run on this host's CUDA path (the interpreter switched off)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import PROJECT

H200_SHARED_MAX = 232448  # bytes of shared memory one block may use on sm_90 (227 KiB)


def ptxas_present() -> bool:
    try:
        import triton  # here, not at the top: a test module imports this where triton may be absent
    except ImportError:
        return False
    return (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists()


def cuda_env(**extra: str) -> dict[str, str]:
    """This process's environment without TRITON_INTERPRET, with the project on PYTHONPATH (and ``extra``)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return env | {"PYTHONPATH": str(PROJECT)} | extra


def run_script(*args: str) -> subprocess.CompletedProcess:
    """A script of scripts/ (``args``: its path from the project root, then its arguments) on the CUDA path."""
    return subprocess.run(
        [sys.executable, *args], cwd=PROJECT, env=cuda_env(), capture_output=True, text=True, timeout=600
    )
