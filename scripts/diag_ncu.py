"""The fused kernel once per shape, for Nsight Compute (scripts/gpu_kernel_session.sh ncu).

Usage on a GPU host: ncu --clock-control none -k regex:_fused_bwd_kernel ... python3 scripts/diag_ncu.py 1,256 4,128
Each shape runs twice (the first launch compiles; ncu profiles both, the second is the one to read) on fresh
inputs; ncu's default cache control flushes the L2 before each profiled launch, as the benchmark does.
"""

from __future__ import annotations

import sys

import torch

from kernel import attn_output_proj_backward
from kernel.reference import make_inputs


def main(shapes: list[str]) -> None:
    for text in shapes:
        b, s = (int(v) for v in text.split(","))
        for _ in range(2):
            go, x, w = make_inputs(b, s, "cuda")
            attn_output_proj_backward(go, x, w)
            torch.cuda.synchronize()
        print(f"ran ({b},{s}) M={b * s}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["1,256"])
