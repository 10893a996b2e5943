"""Shared checks for the kernel tests: poisoned outputs, the benchmark's rule, inputs unchanged."""

from __future__ import annotations

import torch

from kernel import attn_output_proj_backward, attn_output_proj_backward_ref
from kernel.correctness import check_output, poisoned_outputs
from kernel.reference import make_inputs


def run_and_check(b: int, s: int, device: torch.device | str, seed: int) -> None:
    """Fresh random inputs; outputs poisoned with NaN; every output element checked; inputs unmodified."""
    gen = torch.Generator(device=device).manual_seed(seed)
    go, x, w = make_inputs(b, s, device, generator=gen)
    before = [t.clone() for t in (go, x, w)]
    ga, gw = poisoned_outputs(b, s, device)
    res = attn_output_proj_backward(go, x, w, out=(ga, gw))
    assert res[0] is ga and res[1] is gw
    rga, rgw = attn_output_proj_backward_ref(go, x, w)
    for name, out, ref in (("grad_attn_output", ga, rga), ("grad_weight", gw, rgw)):
        chk = check_output(out, ref, b * s)
        assert chk.nonfinite == 0, f"{name} ({b},{s}): {chk.nonfinite} elements not written or not finite"
        assert chk.ok, f"{name} ({b},{s}): {chk}"
    for t, t0 in zip((go, x, w), before, strict=True):
        assert torch.equal(t.view(torch.int16), t0.view(torch.int16)), "an input was modified"
