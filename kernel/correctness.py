"""The benchmark's correctness rule, shared by the tests and ``solci measure``."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from kernel.workload import HEAD_DIM, HIDDEN, MATCH_FRACTION, NUM_HEADS, RTOL, atol_for


def poisoned_outputs(
    b: int, s: int, device: torch.device | str, dtype: torch.dtype = torch.bfloat16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Output tensors filled with NaN, to pass as ``out=``: an element the kernel does not write stays NaN."""
    ga = torch.full((b, NUM_HEADS, s, HEAD_DIM), float("nan"), dtype=dtype, device=device)
    gw = torch.full((HIDDEN, HIDDEN), float("nan"), dtype=dtype, device=device)
    return ga, gw


@dataclass(frozen=True)
class OutputCheck:
    """How one output compares with the reference."""

    match_fraction: float
    max_abs_err: float
    nonfinite: int
    all_zero: bool
    shape_ok: bool
    dtype_ok: bool

    @property
    def ok(self) -> bool:
        return (
            self.shape_ok and self.dtype_ok and self.nonfinite == 0 and not self.all_zero
            and self.match_fraction >= MATCH_FRACTION
        )

    def as_dict(self) -> dict:
        return asdict(self)


def check_output(out: torch.Tensor, ref: torch.Tensor, m: int, rtol: float = RTOL) -> OutputCheck:
    """|out - ref| <= atol + rtol*|ref| on >= 99% of elements; NaN/Inf or an all-zero output fails.

    Shapes and dtypes must match exactly; strides are not checked.
    """
    shape_ok = tuple(out.shape) == tuple(ref.shape)
    dtype_ok = out.dtype == ref.dtype
    if not shape_ok:
        return OutputCheck(0.0, float("inf"), 0, False, False, dtype_ok)
    o = out.detach().float()
    r = ref.detach().float()
    nonfinite = int((~torch.isfinite(o)).sum())
    all_zero = bool((o == 0).all())
    diff = (o - r).abs()
    close = diff <= atol_for(m) + rtol * r.abs()
    frac = float(close.float().mean()) if close.numel() else 1.0
    finite_diff = torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff))
    max_err = float(finite_diff.max()) if diff.numel() else 0.0
    if nonfinite:
        max_err = float("inf")
    return OutputCheck(frac, max_err, nonfinite, all_zero, shape_ok, dtype_ok)
