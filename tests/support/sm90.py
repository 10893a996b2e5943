"""Compiling for sm_90 on a machine without a GPU: whether Triton's bundled ``ptxas`` is here, the H200's shared
memory limit, a script of scripts/ run on this host's CUDA path (the interpreter switched off), and ptxas's own
report on a PTX text (its performance advisories: a serialised wgmma pipeline, spills)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import PROJECT

H200_SHARED_MAX = 232448  # bytes of shared memory one block may use on sm_90 (227 KiB)


def _bundled_ptxas() -> Path | None:
    """Triton's own ptxas (the one its compiler runs), or None where Triton is not installed."""
    try:
        import triton  # here, not at the top: a test module imports this where triton may be absent
    except ImportError:
        return None
    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def ptxas_present() -> bool:
    tool = _bundled_ptxas()
    return tool is not None and tool.exists()


def cuda_env(**extra: str) -> dict[str, str]:
    """This process's environment without TRITON_INTERPRET, with the project on PYTHONPATH (and ``extra``)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return env | {"PYTHONPATH": str(PROJECT)} | extra


def run_script(*args: str) -> subprocess.CompletedProcess:
    """A script of scripts/ (``args``: its path from the project root, then its arguments) on the CUDA path."""
    return subprocess.run(
        [sys.executable, *args], cwd=PROJECT, env=cuda_env(), capture_output=True, text=True, timeout=600
    )


def ptxas_report(ptx: str, arch: str = "sm_90a") -> str:
    """What Triton's bundled ptxas says (``-v``) compiling ``ptx`` for ``arch``: resource usage and advisories such as
    C7511/C7514 (every wgmma serialised) or C7517 (a wait injected to read an accumulator). Raises if it fails."""
    import tempfile

    tool = _bundled_ptxas()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        out = subprocess.run([str(tool), f"-arch={arch}", "-v", str(src), "-o", str(Path(tmp) / "k.cubin")],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"ptxas failed: {out.stderr[-2000:]}")
    return out.stdout + out.stderr
