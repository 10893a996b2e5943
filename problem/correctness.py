"""The benchmark's correctness rule and the one correctness loop, shared by ``solci measure``'s worker, the
bench and the tests.

Every name this module uses is imported when it is imported (never inside a function): the measuring worker
keeps this module while the commit under test brings its own ``kernel`` package."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from problem.reference import attn_output_proj_backward_ref, make_inputs
from problem.workload import CORRECTNESS_ROUNDS, HEAD_DIM, HIDDEN, MATCH_FRACTION, NUM_HEADS, RTOL, atol_for


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
            self.shape_ok
            and self.dtype_ok
            and self.nonfinite == 0
            and not self.all_zero
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


OUTPUT_NAMES = ("grad_attn_output", "grad_weight")
INPUT_NAMES = ("grad_output", "reshaped", "weight")


def _bits(t: torch.Tensor) -> torch.Tensor:
    views = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(views[t.element_size()]) if t.element_size() in views else t


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (NaN payloads included)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


@dataclass
class Correctness:
    """The result of the correctness loop: ok, the first failing round's reason, the document's figures."""

    ok: bool
    reason: str | None
    doc: dict[str, Any]
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)


def describe(name: str, chk: OutputCheck, shape: tuple, dtype: torch.dtype) -> str:
    if not chk.shape_ok:
        return f"{name}: wrong shape (expected {shape})"
    if not chk.dtype_ok:
        return f"{name}: wrong dtype (expected {dtype})"
    if chk.nonfinite:
        return f"{name}: {chk.nonfinite} NaN/Inf elements (unwritten poisoned outputs stay NaN)"
    if chk.all_zero:
        return f"{name}: all zero"
    return f"{name}: only {chk.match_fraction:.4f} of elements match (max abs err {chk.max_abs_err:.3g})"


def check_rounds(
    fn: Callable, b: int, s: int, device: torch.device, rounds: int = CORRECTNESS_ROUNDS, seed: int = 0
) -> Correctness:
    """The correctness loop (the harness's, the bench's and the tests'): ``rounds`` of fresh inputs, NaN-poisoned
    outputs passed as ``out=`` (they must be written in place), the inputs compared bit for bit afterwards with
    host copies taken before the call, the reference computed from those copies after the call has finished, the
    benchmark's tolerance on both outputs. Stops at the first failing round; figures are the worst over the
    rounds run."""
    m = b * s
    worst: dict[str, dict[str, Any]] = {}
    reason: str | None = None
    inputs_unchanged = True
    run = 0
    for r in range(rounds):
        run = r + 1
        gen = torch.Generator(device=device).manual_seed(seed + r)
        inputs = make_inputs(b, s, device, generator=gen)
        # Host copies: GPU code running in the call cannot reach them; the reference is computed from them only
        # once the call's work has finished.
        pristine = [t.to("cpu", copy=True) for t in inputs]
        ga, gw = poisoned_outputs(b, s, device)
        ret = fn(*inputs, out=(ga, gw))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        refs = attn_output_proj_backward_ref(*(t.to(device) for t in pristine))
        problems: list[str] = []
        if not (isinstance(ret, (tuple, list)) and len(ret) == 2 and all(isinstance(t, torch.Tensor) for t in ret)):
            problems.append(f"returned {type(ret).__name__}, not a pair of tensors")
            outs: tuple = (ga, gw)
        else:
            outs = tuple(ret)
            for name, got, buf in zip(OUTPUT_NAMES, outs, (ga, gw), strict=True):
                if got.data_ptr() != buf.data_ptr():
                    problems.append(f"{name}: not written into the out= tensor")
        for name, got, ref in zip(OUTPUT_NAMES, outs, refs, strict=True):
            chk = check_output(got, ref, m)
            w = worst.setdefault(
                name,
                {
                    "match_fraction": 1.0,
                    "max_abs_err": 0.0,
                    "nonfinite": 0,
                    "all_zero": False,
                    "shape_ok": True,
                    "dtype_ok": True,
                },
            )
            w["match_fraction"] = min(w["match_fraction"], chk.match_fraction)
            w["max_abs_err"] = max(w["max_abs_err"], chk.max_abs_err)
            w["nonfinite"] = max(w["nonfinite"], chk.nonfinite)
            w["all_zero"] = w["all_zero"] or chk.all_zero
            w["shape_ok"] = w["shape_ok"] and chk.shape_ok
            w["dtype_ok"] = w["dtype_ok"] and chk.dtype_ok
            if not chk.ok:
                problems.append(describe(name, chk, tuple(ref.shape), ref.dtype))
        for name, now, before in zip(INPUT_NAMES, inputs, pristine, strict=True):
            if not bitwise_equal(now.to("cpu"), before):
                inputs_unchanged = False
                problems.append(f"input {name} was modified")
        if problems:
            reason = f"round {r}: " + "; ".join(problems)
            break
    doc = {
        "rounds": rounds,
        "rounds_run": run,
        "atol": atol_for(m),
        "rtol": RTOL,
        "seed": seed,
        "inputs_unchanged": inputs_unchanged,
        "outputs": worst,
    }
    return Correctness(reason is None, reason, doc, worst)


def recheck(kept: Sequence[Any], m: int, inputs_of: Callable[[Any], Sequence[torch.Tensor]]) -> str | None:
    """Outputs of timed iterations kept after the loop, each against the float32 reference of its own inputs:
    None when all pass, else what failed and in which timed iteration (a kernel that is right only while
    checked, or that reuses an earlier call's results).

    ``kept``: ``ci.harness.timing.KeptIteration``s (``index``, ``args``, ``kwargs["out"]``). ``inputs_of(k)`` draws
    iteration ``k``'s inputs again as they were made (every iteration's are its own); its args must still
    equal them bit for bit, and the reference is computed from them."""
    for k in kept:
        where = f"timed iteration {k.index}: "
        inputs = tuple(inputs_of(k))
        for name, now, before in zip(INPUT_NAMES, k.args, inputs, strict=True):
            if not bitwise_equal(now, before):
                return where + f"input {name} was modified"
        refs = attn_output_proj_backward_ref(*inputs)
        for name, got, ref in zip(OUTPUT_NAMES, k.kwargs["out"], refs, strict=True):
            chk = check_output(got, ref, m)
            if not chk.ok:
                return where + describe(name, chk, tuple(ref.shape), ref.dtype)
        del inputs, refs
    return None
