"""Device diagnostic (kernel/NOTES.md, item 22): the H200's warpgroup-MMA ceiling with both operands in shared
memory and no loads, for the shapes the Gluon kernel's main loops use, to set its per-K-step figures against.

Usage (GPU): PYTHONPATH=. python scripts/diag_wgmma_ceiling.py [--steps 4096] [--variants n128x2,n256x2,...]
Usage (CPU): PYTHONPATH=. python scripts/diag_wgmma_ceiling.py --compile-only   (sm_90: registers, shared, PTX)

Each program is one warpgroup (4 warps) looping ``steps`` times over a [64, 64] x [64, BN] warpgroup_mma from one
of two shared-memory slots (A K-major as the grad_attn tiles read it, or MN-major as the grad_weight tiles do; B
N-major as both do), one group in flight (``warpgroup_mma_wait(1)``, the kernel's loop) or none (``wait(0)``).
CTAS programs per SM (2: the cooperative kernel's two warpgroups, 1: one warpgroup at a time, as ping-pong's
main loops run). Printed per variant: TFLOP/s, per SM, and "us/step": the time of one 128x128x64 step of the
kernel's trace (2.1 MFLOP per SM) at that rate, beside the SM clock NVML reads while it runs.
"""

from __future__ import annotations

import argparse
import statistics


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4096, help="warpgroup_mma steps per program")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    ap.add_argument("--reps", type=int, default=7, help="timed launches per variant (median)")
    ap.add_argument("--compile-only", action="store_true", help="compile every variant for sm_90 here, no GPU")
    return ap.parse_args(argv)


# name -> (BN, A MN-major, programs per SM, steps in flight, accumulators a warpgroup)
VARIANTS: dict[str, tuple[int, bool, int, int, int]] = {
    "n128x2": (128, False, 2, 1, 1),  # the cooperative grad_attn loop: two warpgroups of m64n128, A K-major
    "n128x2_amn": (128, True, 2, 1, 1),  # the cooperative grad_weight loop: A MN-major (transposed)
    "n128x1": (128, False, 1, 1, 1),  # one warpgroup on the tensor cores (a ping-pong main loop)
    "n256x2": (256, False, 2, 1, 1),  # a 128x256 cooperative tile: two warpgroups of m64n256
    "n256x1": (256, False, 1, 1, 1),
    "n128x2_w0": (128, False, 2, 0, 1),  # no MMA in flight across steps
    "n256x2_2acc": (256, False, 2, 1, 2),  # 128x256 as two m64n128 accumulators a warpgroup (GluonConfig.halves)
}

if __name__ == "__main__":  # --help answers before torch and Triton load
    ARGS = parse_args()

import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

BM = gl.constexpr(64)
BK = gl.constexpr(64)


@gluon.jit
def _stamp():
    """(global timer ns, SM clock), read together."""
    return gl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer; mov.u64 $1, %clock64;",
        "=l,=l",
        [],
        dtype=(gl.int64, gl.int64),
        is_pure=False,
        pack=1,
    )


@gluon.jit
def wgmma_loop(
    src_ptr,
    out_ptr,
    steps,
    BN: gl.constexpr,
    A_MN: gl.constexpr,
    DEPTH: gl.constexpr,
    NACC: gl.constexpr = 1,
    stamps_ptr=None,
    STAMP: gl.constexpr = False,
):
    """``steps`` warpgroup MMAs of [64, 64] x [64, BN] from two shared slots filled with random bf16 from
    ``src_ptr`` (the tensor cores' power, and so the clock, depends on the data); the accumulator's sum to out.
    ``STAMP`` (scripts/diag_floor.py): the global timer and the SM's clock at the loop's start and end, four int64 a
    program into ``stamps_ptr``: the loop's clock rate."""
    lay: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    QN: gl.constexpr = BN // NACC  # NACC accumulators of QN columns, each step's B split between them
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, QN, 16])
    if A_MN:
        a_s = gl.allocate_shared_memory(gl.bfloat16, [2, BK, BM], lay)
    else:
        a_s = gl.allocate_shared_memory(gl.bfloat16, [2, BM, BK], lay)
    b_s = gl.allocate_shared_memory(gl.bfloat16, [2, BK, BN], lay)
    blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, blocked))
    cols = gl.arange(0, 64, layout=gl.SliceLayout(0, blocked))
    wide = gl.arange(0, BN, layout=gl.SliceLayout(0, blocked))
    tile = gl.load(src_ptr + rows[:, None] * 256 + cols[None, :])
    b_tile = gl.load(src_ptr + 64 * 256 + rows[:, None] * 256 + wide[None, :])
    for slot in gl.static_range(2):
        a_s.index(slot).store(tile)
        b_s.index(slot).store(b_tile)
    fence_async_shared()
    if STAMP:
        t0, c0 = _stamp()
    acc = gl.zeros([BM, QN], gl.float32, acc_layout)
    acc_hi = gl.zeros([BM, QN], gl.float32, acc_layout)
    for i in range(steps):
        s = i % 2
        if A_MN:
            a = a_s.index(s).permute((1, 0))
        else:
            a = a_s.index(s)
        if NACC == 2:
            acc = warpgroup_mma(a, b_s.index(s).slice(0, QN, dim=1), acc, is_async=True)
            acc_hi = warpgroup_mma(a, b_s.index(s).slice(QN, QN, dim=1), acc_hi, is_async=True)
            acc, acc_hi = warpgroup_mma_wait(2 * DEPTH, deps=(acc, acc_hi))
        else:
            acc = warpgroup_mma(a, b_s.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(DEPTH, deps=(acc,))
    if NACC == 2:
        acc, acc_hi = warpgroup_mma_wait(0, deps=(acc, acc_hi))
        acc = acc + acc_hi
    else:
        acc = warpgroup_mma_wait(0, deps=(acc,))
    if STAMP:
        t1, c1 = _stamp()
        stamps = stamps_ptr + gl.program_id(0) * 4
        gl.store(stamps, t0)
        gl.store(stamps + 1, c0)
        gl.store(stamps + 2, t1)
        gl.store(stamps + 3, c1)
    total = gl.sum(gl.sum(acc, axis=1), axis=0)
    gl.store(out_ptr + gl.program_id(0), total)


def compile_only() -> None:
    """Every variant compiled for sm_90 without a GPU: shared memory, the wgmma count of the PTX, the clock stamps'
    reads, registers and spills (``local``); and ``n128x2_stamp``, the floor's stamped loop (scripts/diag_floor.py)."""
    from diag_gluon import _resource_usage, compile_sm90  # scripts/ is on the path when this runs as a script

    out = torch.empty(264, dtype=torch.float32)
    src = torch.empty(128, 256, dtype=torch.bfloat16)
    stamps = torch.empty(264, 4, dtype=torch.int64)
    runs = [(name, *v, {}) for name, v in VARIANTS.items()]
    runs.append(("n128x2_stamp", *VARIANTS["n128x2"], {"stamps_ptr": stamps, "STAMP": True}))
    for name, bn, a_mn, _, depth, nacc, extra in runs:
        kwargs = {"BN": bn, "A_MN": a_mn, "DEPTH": depth, "NACC": nacc, "num_warps": 4, **extra}
        k = compile_sm90(wgmma_loop, (src, out, 16), kwargs)
        ptx = k.asm["ptx"]
        print(
            f"{name:11s} shared {k.metadata.shared:6d} B, wgmma in PTX {ptx.count('wgmma.mma_async')}, globaltimer "
            f"{ptx.count('%globaltimer')}, clock64 {ptx.count('%clock64')}, {_resource_usage(k.asm['cubin'])}"
        )


def sm_clock_mhz() -> float | None:
    """The SM clock NVML reads now (None without nvidia-ml-py): read while a long launch runs."""
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))


def time_variant(name: str, steps: int, reps: int, sms: int) -> str:
    bn, a_mn, per_sm, depth, nacc = VARIANTS[name]
    programs = sms * per_sm
    out = torch.empty(programs, dtype=torch.float32, device="cuda")
    src = torch.randn(128, 256, device="cuda").to(torch.bfloat16)
    kwargs = {"BN": bn, "A_MN": a_mn, "DEPTH": depth, "NACC": nacc, "num_warps": 4}
    wgmma_loop[(programs,)](src, out, 16, **kwargs)  # compile, warm
    torch.cuda.synchronize()
    times = []
    clocks = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        wgmma_loop[(programs,)](src, out, steps, **kwargs)
        end.record()
        clock = sm_clock_mhz()  # the launch is still running (a few ms)
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)  # us
        if clock is not None:
            clocks.append(clock)
    us = statistics.median(times)
    flop = 2.0 * 64 * bn * 64 * steps * programs
    tflops = flop / us / 1e6
    per_sm_tf = tflops / sms
    step_us = 2 * 128 * 128 * 64 / (per_sm_tf * 1e12) * 1e6
    clock = f"{statistics.median(clocks):.0f}" if clocks else "-"
    cells = [name, bn, "MN" if a_mn else "K", per_sm, depth, f"{us:.0f}", f"{tflops:.0f}", f"{per_sm_tf:.2f}"]
    return "| " + " | ".join(map(str, [*cells, f"{step_us:.3f}", clock])) + " |"


def main() -> None:
    if ARGS.compile_only:
        compile_only()
        return
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    print(f"GPU {props.name}, {sms} SMs; {ARGS.steps} steps a program, median of {ARGS.reps} launches (CUDA events)")
    print("| variant | BN | A | per SM | in flight | us | TFLOP/s | per SM | us/step (128x128x64) | SM MHz |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in ARGS.variants.split(","):
        print(time_variant(name, ARGS.steps, ARGS.reps, sms), flush=True)


if __name__ == "__main__":
    main()
