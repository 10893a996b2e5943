"""Float32 reference with exactly the benchmark's semantics, and PyTorch eager baselines."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch

from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS


def attn_output_proj_backward_ref(
    grad_output: torch.Tensor, reshaped: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The benchmark's reference: compute in float32, cast the outputs to bf16, transpose made contiguous.

    grad_output, reshaped: (B, S, 2048); weight: (2048, 2048).
    Returns grad_attn_output (B, 32, S, 64) and grad_weight (2048, 2048), both bf16 and contiguous.
    """
    b, s, _ = grad_output.shape
    go = grad_output.float()
    grad_reshaped = go @ weight.float()  # (B, S, 2048)
    grad_attn = grad_reshaped.view(b, s, NUM_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
    grad_weight = go.reshape(-1, HIDDEN).t() @ reshaped.float().reshape(-1, HIDDEN)
    return grad_attn.to(grad_output.dtype), grad_weight.to(grad_output.dtype)


def attn_output_proj_backward_eager(
    grad_output: torch.Tensor, reshaped: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch eager baseline in the inputs' dtype: the two matmuls plus the transpose copy."""
    b, s, _ = grad_output.shape
    grad_reshaped = grad_output @ weight
    grad_attn = grad_reshaped.view(b, s, NUM_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
    grad_weight = grad_output.reshape(-1, HIDDEN).t() @ reshaped.reshape(-1, HIDDEN)
    return grad_attn, grad_weight


def two_matmuls(
    grad_output: torch.Tensor, reshaped: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The two cuBLAS matmuls alone, without the transpose copy (a lower bound for an unfused version)."""
    go = grad_output.reshape(-1, HIDDEN)
    return go @ weight, go.t() @ reshaped.reshape(-1, HIDDEN)


def make_inputs(
    batch_size: int,
    seq_len: int,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random inputs as the benchmark draws them: weight randn / sqrt(2048), the others plain randn."""
    kw = {"device": device, "generator": generator}
    go = torch.randn(batch_size, seq_len, HIDDEN, **kw).to(dtype)
    x = torch.randn(batch_size, seq_len, HIDDEN, **kw).to(dtype)
    w = (torch.randn(HIDDEN, HIDDEN, **kw) / HIDDEN**0.5).to(dtype)
    return go, x, w


def iteration_seed(seed: int, call: int) -> int:
    """The generator seed of ``timing_sets``' ``call``-th input set (0-based) for the case seed ``seed``."""
    digest = hashlib.blake2b(f"solci-timing:{seed}:{call}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def timing_sets(
    batch_size: int, seq_len: int, device: str | torch.device, seed: int
) -> Callable[[bool], tuple[tuple, dict]]:
    """The input-set maker of every timed loop: ``make(with_out)`` gives one iteration's inputs, new values
    each call (drawn as ``make_inputs`` draws them, on the device, by a generator seeded from ``seed`` and the
    call's number: reproducible), new addresses, and, for the kernel (``with_out``), zeroed output tensors.

    ``make.draw(i)`` draws the inputs of call ``i`` (0-based) again, pristine, to check an iteration's outputs
    against."""
    device = torch.device(device)
    calls = 0

    def draw(call: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gen = torch.Generator(device).manual_seed(iteration_seed(seed, call))
        return make_inputs(batch_size, seq_len, device, generator=gen)

    def make(with_out: bool) -> tuple[tuple, dict]:
        nonlocal calls
        args = draw(calls)
        calls += 1
        if not with_out:
            return args, {}
        ga = torch.zeros((batch_size, NUM_HEADS, seq_len, HEAD_DIM), dtype=torch.bfloat16, device=device)
        gw = torch.zeros((HIDDEN, HIDDEN), dtype=torch.bfloat16, device=device)
        return args, {"out": (ga, gw)}

    make.draw = draw  # type: ignore[attr-defined]
    return make
