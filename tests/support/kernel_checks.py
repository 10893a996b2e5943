"""Shared checks for the kernel tests: the harness's own correctness loop (problem.correctness.check_rounds:
NaN-poisoned outputs written in place, the benchmark's rule on both outputs, inputs unchanged bit for bit)."""

from __future__ import annotations

import torch

from kernel import attn_output_proj_backward
from problem.correctness import check_rounds


def run_and_check(b: int, s: int, device: torch.device | str, seed: int) -> None:
    """One round of fresh random inputs through the correctness loop; fails with the loop's reason."""
    res = check_rounds(attn_output_proj_backward, b, s, torch.device(device), rounds=1, seed=seed)
    assert res.ok, f"({b},{s}): {res.reason}"
    for name, figures in res.outputs.items():
        assert figures["nonfinite"] == 0, f"{name} ({b},{s}): {figures['nonfinite']} elements not written"
    assert res.doc["inputs_unchanged"]
