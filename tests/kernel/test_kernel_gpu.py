"""The kernel on a GPU: the 16 cases with 10 rounds of fresh inputs each, plus off-grid shapes."""

from __future__ import annotations

import pytest
import torch

from kernel import attn_output_proj_backward
from problem.reference import make_inputs
from problem.workload import CASES, CORRECTNESS_ROUNDS
from tests.support.kernel_checks import run_and_check

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_workload_case_ten_rounds(case) -> None:
    for r in range(CORRECTNESS_ROUNDS):
        run_and_check(case.batch_size, case.seq_len, "cuda", seed=r * 7919 + case.m)


@pytest.mark.parametrize(("b", "s"), [(3, 100), (1, 1), (1, 7), (2, 333), (5, 77), (1, 8200), (7, 1000)])
def test_off_grid_shapes(b: int, s: int) -> None:
    for r in range(3):
        run_and_check(b, s, "cuda", seed=r + 31 * s)


def test_gpu_output_aliasing_input_rejected() -> None:
    g, x, w = make_inputs(1, 64, "cuda")
    ga = torch.empty(1, 32, 64, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="aliases the input weight"):
        attn_output_proj_backward(g, x, w, out=(ga, w))


def test_mixed_devices_rejected() -> None:
    g, x, w = make_inputs(1, 64, "cuda")
    with pytest.raises(ValueError, match="weight: on cpu"):
        attn_output_proj_backward(g, x, w.cpu())
