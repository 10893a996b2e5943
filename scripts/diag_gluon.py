"""Compile the Gluon kernel (kernel/gluon_backward.py) for sm_90 on a machine without a GPU.

Usage (CPU host, triton 3.6.0 installed): python scripts/diag_gluon.py [M ...] [--seq S] [--set stages=4]
Prints per shape the shared memory, registers, spills, the wgmma and TMA counts of the PTX and the SASS's waterfall
loops (``waterfalls``: 0, or the loader's TMAs wait on a loop over the lanes; kernel/NOTES.md item 30): what must
hold before any device time is spent. Every table entry (enabled or not) is compiled by default;
tests/kernel/test_gluon.py runs this in CI.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import fields, replace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ms", nargs="*", type=int, default=[256, 512, 1024], metavar="M", help="rows of each shape")
    ap.add_argument("--seq", type=int, default=128, help="seq_len of the shape compiled (S)")
    ap.add_argument("--set", action="append", default=[], help="GluonConfig override key=value")
    return ap.parse_args(argv)


if __name__ == "__main__":
    ARGS = parse_args()

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import compile, make_backend  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

from kernel import gluon_backward as gb  # noqa: E402
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS  # noqa: E402


def launch_tensors(m: int, s: int, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    """(grad_output, weight, reshaped, grad_weight, grad_attn_output) of M rows of seq_len ``s``, uninitialised, in
    the order ``launch_arguments`` takes them: what a compile needs (shapes, strides, alignment), not values."""
    go2 = torch.empty(m, HIDDEN, dtype=torch.bfloat16, device=device)
    x2 = torch.empty(m, HIDDEN, dtype=torch.bfloat16, device=device)
    w2 = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16, device=device)
    gw = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16, device=device)
    ga = torch.empty(m // s, NUM_HEADS, s, HEAD_DIM, dtype=torch.bfloat16, device=device)
    return go2, w2, x2, gw, ga


def compile_for(m: int, s: int, cfg: gb.GluonConfig, programs: int = 132, module=gb, extra: dict | None = None):
    """Compile ``module``'s Gluon kernel (kernel/gluon_backward.py by default; scripts/diag_gluon_timeline.py passes
    its traced copy, with ``extra`` arguments) for sm_90 with the launcher's own arguments for M rows of seq_len
    ``s``."""
    plan = module.plan_for(m, cfg, programs)
    args, kwargs = module.launch_arguments(*launch_tensors(m, s), s, cfg, plan)
    fn = module.gluon_bwd_kernel_host_desc
    return plan, compile_sm90(fn, args, dict(kwargs, **(extra or {}), num_warps=4))


def compile_sm90(fn, args: tuple, kwargs: dict):
    """A Gluon kernel compiled for sm_90 here, for these launch arguments (constexprs and num_warps in ``kwargs``),
    as its launcher would bind them: Triton's own binder and compiler, no GPU needed."""
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, options = binder(*args, **kwargs)
    options, signature, cexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
    return compile(GluonASTSource(fn, signature, cexprs, attrs), target=target, options=options.__dict__)


def _cubin_tool(tool: str, cubin: bytes, *flags: str) -> str:
    """What one of Triton's bundled CUDA tools (cuobjdump, nvdisasm) prints for a compiled kernel."""
    import os
    import subprocess
    import tempfile

    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        return subprocess.run([path, *flags, fh.name], capture_output=True, text=True).stdout


def _resource_usage(cubin: bytes) -> str:
    out = _cubin_tool("cuobjdump", cubin, "-res-usage")
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    return f"regs {m.group(1)}, stack {m.group(2)}, local {m.group(4)}" if m else out.strip()[-200:]


def sass_counts(cubin: bytes) -> str:
    """What ptxas kept (the cubin's SASS, by nvdisasm): its warpgroup MMAs, shared-memory matrix stores and TMA
    stores, as SASS instructions (a PTX instruction whose result nothing uses is not in it)."""
    words = re.findall(r"\b[A-Z][A-Z0-9_]*\b", _cubin_tool("nvdisasm", cubin))
    return ", ".join(f"SASS {op} {words.count(op)}" for op in ("HGMMA", "STSM", "UTMASTG"))


def waterfalls(cubin: bytes) -> int:
    """The SASS's waterfall loops (``BRA.U.ANY``): where ptxas could not prove a value warp-uniform that an
    instruction needs in a uniform register (a TMA's coordinates, a barrier's address), it loops over the lanes'
    values. v30 run a: one inline-PTX read of %tid in a consumer partition put one around every TMA of
    the loader, 16 % slower (kernel/NOTES.md item 30)."""
    return _cubin_tool("nvdisasm", cubin).count("BRA.U.ANY")


SHARED_MAX = 232448  # bytes of shared memory one program (block) may use on sm_90 (227 KiB)


def describe(m: int, s: int, cfg: gb.GluonConfig) -> str:
    plan, k = compile_for(m, s, cfg)
    ptx = k.asm["ptx"]
    over = ""
    if k.metadata.shared > SHARED_MAX:
        over = f" (OVER the {SHARED_MAX} B a program may have on sm_90: it cannot launch)"
    return (
        f"M={m:<5} S={s:<5} gluon {cfg.ga_bm}x{cfg.ga_bn}|{cfg.gw_bm}x{cfg.gw_bn} stages {cfg.stages} "
        f"plan p_ga={plan.p_ga} programs={plan.programs}: shared {k.metadata.shared} B{over}, "
        f"{_resource_usage(k.asm['cubin'])}, wgmma {len(re.findall(r'wgmma.mma_async', ptx))}, "
        f"tma_load {len(re.findall(r'cp.async.bulk.tensor.[0-9]d.shared::cluster.global', ptx))}, "
        f"tma_store {len(re.findall(r'cp.async.bulk.tensor.[0-9]d.global.shared', ptx))}, "
        f"setmaxnreg {len(re.findall(r'setmaxnreg', ptx))}, waterfalls {waterfalls(k.asm['cubin'])}"
    )


def overrides(pairs: list[str]) -> dict:
    """``--set`` pairs as GluonConfig overrides (integers and True/False parsed); ValueError names a bad one."""
    names = [f.name for f in fields(gb.GluonConfig)]
    over = {}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or k not in names:
            raise ValueError(f"--set {kv}: not key=value of a GluonConfig field ({', '.join(names)})")
        over[k] = int(v) if v.lstrip("-").isdigit() else {"True": True, "False": False}.get(v, v)
    return over


def main(args: argparse.Namespace) -> int:
    try:
        over = overrides(args.set)
        cfgs = {m: gb.gluon_config_for(m, min(args.seq, m), (9, 0), include_disabled=True) for m in args.ms}
        cfgs = {m: cfg and replace(cfg, **over) for m, cfg in cfgs.items()}
    except ValueError as exc:  # a bad --set, or a configuration GluonConfig refuses: one line, nothing compiled
        print(f"diag_gluon: {exc}", file=sys.stderr)
        return 2
    for m, cfg in cfgs.items():
        s = min(args.seq, m)
        if cfg is None:
            print(f"M={m:<5} S={s:<5} no Gluon table entry for this shape")
            continue
        print(describe(m, s, cfg), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
