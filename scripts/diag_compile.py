"""Compile the fused kernel for sm_90 on a machine without a GPU: shared memory, registers, spills, PTX facts.

Usage (CPU host, triton installed): python scripts/diag_compile.py [M ...] [--set num_stages=5 --set tma_store=False]
Catches compile errors, shared-memory overflows and register spills of a configuration before any device time is
spent on it. ``--dump DIR`` also writes each shape's PTX and SASS with the debug line information left out, so two
trees (before and after a change that should not touch the kernel's code) compare with ``diff -r``. The arguments
are the launcher's own (`launch_arguments`), on its CUDA path with host tensor descriptors and bf16 wgmma;
tests/kernel/test_kernel_compile.py runs it in CI.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "ms", nargs="*", type=int, default=[256, 512, 1024, 2048, 4096, 8192], metavar="M", help="rows of each shape"
    )
    ap.add_argument("--seq", type=int, default=128, help="seq_len of the shape compiled (S)")
    ap.add_argument("--set", action="append", default=[], help="config override key=value (int or str)")
    ap.add_argument("--dump", metavar="DIR", help="write M<m>_S<s>.ptx and .sass (line info left out) into DIR")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch, Triton and the kernel load (5-8 s on a 2-core host)
    ARGS = parse_args()

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, compile, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

from kernel import backward as kernel_module  # noqa: E402  (the launcher's module)
from kernel.configs import config_for  # noqa: E402
from kernel.schedule import plan_schedule  # noqa: E402
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS  # noqa: E402


def compile_for(m: int, s: int, cfg, programs: int = 132, module=kernel_module, extra: dict | None = None):
    """Compile ``module``'s kernel (the launcher's by default; scripts/diag_timeline.py passes its traced copy,
    with ``extra`` arguments) for sm_90 with the launcher's arguments for M rows of seq_len ``s``."""
    plan = plan_schedule(m, cfg, programs)
    b = m // s
    go2 = torch.empty(m, HIDDEN, dtype=torch.bfloat16)
    x2 = torch.empty(m, HIDDEN, dtype=torch.bfloat16)
    w2 = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16)
    gw = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16)
    ga = torch.empty(b, NUM_HEADS, s, HEAD_DIM, dtype=torch.bfloat16)
    cfg = replace(cfg, device_desc=False)  # the CUDA path with host tensor descriptors
    specs, args, constexprs = module.launch_arguments(go2, w2, x2, gw, ga, s, cfg, plan, cuda=True)

    args = (*module.tensor_descriptors(specs), *args)
    kwargs = dict(zip(module.CONSTEXPR_NAMES, constexprs, strict=True))
    kwargs.update(extra or {})
    kwargs.update(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    fn = module._fused_bwd_kernel
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, options = binder(*args, **kwargs)
    options, signature, cexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
    return plan, compile(ASTSource(fn, signature, cexprs, attrs), target=target, options=options.__dict__)


def _cuobjdump(cubin: bytes, *flags: str) -> str:
    """Triton's own copy of cuobjdump run on one cubin."""
    import os
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        return subprocess.run([tool, *flags, fh.name], capture_output=True, text=True).stdout


def code_without_line_info(compiled) -> tuple[str, str]:
    """(PTX, SASS) of a compiled kernel without what names source lines: ``.loc``/``.file`` and the debug
    sections of the PTX, the addresses and line comments of the SASS."""
    ptx = "\n".join(ln for ln in compiled.asm["ptx"].splitlines() if not re.match(r"\s*(\.loc|\.file|//)", ln))
    ptx = re.sub(r"\.section\s+\.debug_\w+\s*\{.*?\}", "", ptx, flags=re.S)
    sass = _cuobjdump(compiled.asm["cubin"], "-sass")
    instr = re.compile(r"^\s+/\*[0-9a-f]{4}\*/")
    sass = "\n".join(re.sub(r"/\*[0-9a-f]{4}\*/", "", ln).strip() for ln in sass.splitlines() if instr.search(ln))
    return ptx + "\n", sass + "\n"


def _resource_usage(cubin: bytes) -> str:
    """REG / STACK / local-memory figures from cuobjdump (Triton's own copy) for one cubin."""
    out = _cuobjdump(cubin, "-res-usage")
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    return f"regs {m.group(1)}, stack {m.group(2)}, local {m.group(4)}" if m else out.strip()[-200:]


def main(args: argparse.Namespace) -> None:
    over = {}
    for kv in args.set:
        k, v = kv.split("=", 1)
        over[k] = int(v) if v.lstrip("-").isdigit() else {"True": True, "False": False}.get(v, v)
    for m in args.ms:
        cfg = replace(config_for(m, (9, 0)), **over)
        plan, k = compile_for(m, min(args.seq, m), cfg)
        ptx = k.asm["ptx"]
        res = _resource_usage(k.asm["cubin"])
        print(
            f"M={m:<5} {cfg.ga_bm}x{cfg.ga_bn}|{cfg.gw_bm}x{cfg.gw_bn} k{cfg.bk} w{cfg.num_warps} "
            f"s{cfg.num_stages} g{cfg.group} plan p_ga={plan.p_ga} programs={plan.programs}: "
            f"shared {k.metadata.shared} B, {res}, "
            f"atom {len(re.findall(r'atom[.]', ptx))}, wgmma {len(re.findall(r'wgmma.mma_async', ptx))}"
        )
        if args.dump:
            out = Path(args.dump)
            out.mkdir(parents=True, exist_ok=True)
            for suffix, text in zip(("ptx", "sass"), code_without_line_info(k), strict=True):
                (out / f"M{m}_S{min(args.seq, m)}.{suffix}").write_text(text)


if __name__ == "__main__":
    main(ARGS)
