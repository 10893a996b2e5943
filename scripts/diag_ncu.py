"""The fused kernel once per shape, for Nsight Compute (scripts/gpu_kernel_session.sh ncu).

Usage on a GPU host: ncu --clock-control none -k regex:_fused_bwd_kernel ... python3 scripts/diag_ncu.py 1,256 4,128
Each shape runs twice (the first launch compiles; ncu profiles both, the second is the one to read) on fresh
inputs; ncu's default cache control flushes the L2 before each profiled launch, as the benchmark does.
"""

from __future__ import annotations

import argparse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shapes", nargs="*", default=["1,256"], metavar="B,S", help="batch size,seq_len (default 1,256)")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch, Triton and the kernel load (5-8 s on a 2-core host)
    ARGS = parse_args()

import torch  # noqa: E402

from kernel import attn_output_proj_backward  # noqa: E402
from problem.reference import make_inputs  # noqa: E402


def main(shapes: list[str]) -> None:
    for text in shapes:
        b, s = (int(v) for v in text.split(","))
        for _ in range(2):
            go, x, w = make_inputs(b, s, "cuda")
            attn_output_proj_backward(go, x, w)
            torch.cuda.synchronize()
        print(f"ran ({b},{s}) M={b * s}", flush=True)


if __name__ == "__main__":
    main(ARGS.shapes)
