"""The launcher's CUDA path compiled for sm_90 on a machine without a GPU (``scripts/diag_compile.py``, which
builds its arguments with the launcher's own ``launch_arguments``): every configuration family compiles, fits
the H200's shared memory and spills nothing. Catches a broken CUDA-only branch that the interpreter never runs."""

from __future__ import annotations

import re

import pytest

from tests.support.sm90 import H200_SHARED_MAX, ptxas_present, run_script


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
@pytest.mark.parametrize("seq", [128, 100])  # 100: grad_attn tiles straddle batches, so no TMA store for them
def test_cuda_launch_compiles_for_sm90_without_spills(seq: int) -> None:
    out = run_script("scripts/diag_compile.py", "256", "1024", "8192", "--seq", str(seq))
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("M=")]
    assert len(lines) == 3, out.stdout
    for line in lines:
        shared = int(re.search(r"shared (\d+) B", line).group(1))
        assert 0 < shared <= H200_SHARED_MAX, line
        assert "local 0" in line and "stack 0" in line, line  # no register spills
        assert int(re.search(r"wgmma (\d+)", line).group(1)) > 0, line  # Hopper tensor-core MMAs, not FMA


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_traced_copy_of_the_kernel_still_builds_and_stamps_each_program() -> None:
    """scripts/diag_timeline.py rewrites the kernel's source at fixed anchors to add per-program stamps; if the
    kernel's text moves on, the rewrite or the compile fails here rather than on the GPU."""
    out = run_script("scripts/diag_timeline.py", "--compile-only", "256", "2048")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if " traced: " in ln]
    assert len(lines) == 2, out.stdout
    for line in lines:
        # two timer reads and two cycle-counter reads (start, end), one SM id, and the kernel's own MMAs
        assert "globaltimer 2," in line and "clock64 2," in line and "smid 1," in line, line
        assert int(re.search(r"wgmma (\d+)", line).group(1)) > 0, line
        assert 0 < int(re.search(r"shared (\d+) B", line).group(1)) <= H200_SHARED_MAX, line
