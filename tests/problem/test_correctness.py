"""The benchmark's matching rule (problem.correctness) and the workload facts it relies on."""

from __future__ import annotations

import pytest
import torch

from problem.correctness import check_output
from problem.workload import (
    ATOL_BY_M,
    CASES,
    Case,
    atol_for,
    bytes_moved,
    floors_us,
    flops,
    sol_score,
    t_sol_us,
)


def _ref() -> torch.Tensor:
    return torch.randn(64, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)


def test_exact_output_passes() -> None:
    ref = _ref()
    assert check_output(ref.clone(), ref, 256).ok


def test_one_percent_wrong_is_the_limit() -> None:
    ref = _ref()
    out = ref.clone()
    flat = out.view(-1)
    flat[: int(0.01 * flat.numel())] += 100  # just under 1% wrong: passes
    assert check_output(out, ref, 256).ok
    flat[: int(0.02 * flat.numel())] += 100
    assert not check_output(out, ref, 256).ok


def test_nan_inf_zero_shape_dtype_fail() -> None:
    ref = _ref()
    nan = ref.clone()
    nan[0, 0] = float("nan")
    assert check_output(nan, ref, 256).nonfinite == 1 and not check_output(nan, ref, 256).ok
    inf = ref.clone()
    inf[3, 3] = float("inf")
    assert not check_output(inf, ref, 256).ok
    assert not check_output(torch.zeros_like(ref), torch.zeros_like(ref), 256).ok  # all-zero output fails
    assert not check_output(ref[:32], ref, 256).ok
    assert not check_output(ref.float(), ref, 256).ok


def test_tolerance_uses_rtol_and_atol_by_m() -> None:
    ref = torch.full((10, 10), 1.0)
    assert check_output(ref * 1.04, ref, 256).ok  # within rtol 0.05
    assert not check_output(ref * 1.07, ref, 256).ok
    small = torch.full((10, 10), 1e-6)
    assert check_output(small + 3e-3, small, 8192).ok  # atol 3.2e-3 at M=8192
    assert not check_output(small + 3e-3, small, 4096).ok  # atol 7.7e-4


def test_atol_for_unlisted_m_takes_the_stricter_neighbour() -> None:
    assert atol_for(256) == ATOL_BY_M[256]
    assert atol_for(7) == ATOL_BY_M[256]
    assert atol_for(3000) == ATOL_BY_M[2048]
    assert atol_for(100000) == ATOL_BY_M[8192]
    with pytest.raises(ValueError):
        atol_for(0)


def test_sol_model_against_hand_computed_values() -> None:
    assert len(CASES) == 16 and sorted({c.m for c in CASES}) == sorted(ATOL_BY_M)
    assert flops(8192) == 4 * 8192 * 2048 * 2048
    assert bytes_moved(256) == 2 * (3 * 256 * 2048 + 2 * 2048 * 2048)
    # H200: 4*8192*2048^2 / 989e12 = 138.96 us; M=256: 4.295e9 / 989e12 = 4.343 us > 19.92 MB / 4.8e12
    assert t_sol_us(8192, "H200") == pytest.approx(138.96, abs=0.01)
    assert t_sol_us(256, "H200") == pytest.approx(4.343, abs=0.001)
    assert floors_us(256, "H200")[1] == pytest.approx(4.151, abs=0.001)
    # B200 at M=1: 8.4 MB of weights over 7.67 TB/s dominates 16.8 MFLOP: memory bound
    assert t_sol_us(1, "B200") == pytest.approx(bytes_moved(1) / 7.67e12 * 1e6)
    assert t_sol_us(256, None) is None and t_sol_us(256, "MI300") is None
    assert sol_score(24.4, 3.0, 24.4) == pytest.approx(0.5)
    assert sol_score(3.0, 3.0, 24.4) == pytest.approx(1.0)
    assert sol_score(13.7, 3.0, 24.4) == pytest.approx(1 / (1 + 10.7 / 21.4))
    assert sol_score(1.0, 3.0, 24.4) == 1.0  # faster than SOL is clamped
    assert sol_score(10.0, 3.0, 2.0) is None


def test_case_parse() -> None:
    assert Case.parse("4,128") == Case(4, 128)
    assert Case.parse("B4_S128") == Case(4, 128)
    assert Case.parse("4x128").name == "B4_S128"
    for bad in ("4", "a,b", "0,5", "4,128,3"):
        with pytest.raises(ValueError):
            Case.parse(bad)
