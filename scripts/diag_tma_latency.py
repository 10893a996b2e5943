"""Device diagnostic (kernel/NOTES.md, item 34's Next 1): how long a TMA load takes when it is a program's first.

Usage (GPU): PYTHONPATH=. python scripts/diag_tma_latency.py [--programs 1,132] [--boxes 1,12] [--reps 20]
Usage (CPU): PYTHONPATH=. python scripts/diag_tma_latency.py --compile-only   (sm_90: shared memory, PTX)

One warp a program (``probe``) loads 128 x 64 bf16 boxes (16 KB, the kernel's grad_attn A box) of its own 128-row
block of a bf16 tensor by TMA, in three rounds of B boxes each, every box on its own mbarrier: round 1 columns
0 .. 64 B, round 2 the next B boxes (lines no program read yet), round 3 round 1's boxes again (L2 hits). It
stamps %globaltimer at its entry, after its barriers' inits, and at the arrival of each round's first box and of
its last. With B = 12 a round is the ring's first fill (6 stages of 32 KB) of the real kernel; with 132 programs
every SM asks at once, as there. Conditions, per (programs, B): ``warm`` (the same tensor launched before: L2 and
TLB warm), ``flushed`` (a buffer of twice the L2 written first, the benchmark's cold L2), ``fresh`` (flushed, and a
tensor newly allocated and filled at another address each launch: the benchmark's fresh inputs). Printed: medians
over programs and launches, us from the previous stamp. What it answers: a first load's extra time with one program
and a warm L2 is a first-use cost (descriptor, TLB, TMA unit); the same with 132 programs and B = 12 but not B = 1
is the burst's; flushed minus warm is DRAM's (and the dirty lines the flush left); fresh minus flushed the TLB's.
"""

from __future__ import annotations

import argparse
import statistics
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", default="1,132", help="programs a launch (comma list)")
    ap.add_argument("--boxes", default="1,12", help="16 KB boxes a round (comma list, 1-12)")
    ap.add_argument("--reps", type=int, default=20, help="timed launches per (programs, boxes, condition)")
    ap.add_argument("--compile-only", action="store_true", help="compile for sm_90 here, no GPU")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch and Triton load
    ARGS = parse_args()

import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma  # noqa: E402
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

BM = gl.constexpr(128)  # a box's rows and columns (the kernel's grad_attn A box), as the JIT functions read them
BK = gl.constexpr(64)
COLS = 2048
STAMPS = ("entry", "inits", "r1 first", "r1 last", "r2 first", "r2 last", "r3 first", "r3 last")
MAX_BOXES = 12


@gluon.jit
def _now():
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _round(desc, smem, bars, row, col0, phase, B: gl.constexpr):
    """B boxes of 16 KB from (row, col0), each on its own barrier; returns the first's and the last's arrival."""
    for i in gl.static_range(B):
        mbarrier.expect(bars.index(i), BM * BK * 2)
        tma.async_copy_global_to_shared(desc, [row, col0 + i * BK], bars.index(i), smem.index(i))
    mbarrier.wait(bars.index(0), phase)
    first = _now()
    for i in gl.static_range(1, B):
        mbarrier.wait(bars.index(i), phase)
    return first, _now()


@gluon.jit
def probe(desc, out_ptr, B: gl.constexpr):
    t0 = _now()
    smem = gl.allocate_shared_memory(gl.bfloat16, [B, BM, BK], desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [B, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(B):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()
    t1 = _now()
    row = gl.program_id(0) * BM
    a, b = _round(desc, smem, bars, row, 0, 0, B)
    c, d = _round(desc, smem, bars, row, B * BK, 1, B)
    e, f = _round(desc, smem, bars, row, 0, 0, B)
    rec = out_ptr + gl.program_id(0) * 8
    gl.store(rec, t0)
    gl.store(rec + 1, t1)
    gl.store(rec + 2, a)
    gl.store(rec + 3, b)
    gl.store(rec + 4, c)
    gl.store(rec + 5, d)
    gl.store(rec + 6, e)
    gl.store(rec + 7, f)


def _layout() -> gl.NVMMASharedLayout:
    return gl.NVMMASharedLayout.get_default_for([BM.value, BK.value], gl.bfloat16)


def compile_only() -> None:
    sys.path.insert(0, "scripts")
    from diag_gluon import compile_sm90

    for b in (1, MAX_BOXES):
        x = torch.empty(BM.value, COLS, dtype=torch.bfloat16)
        desc = TensorDescriptor.from_tensor(x, [BM.value, BK.value], _layout())
        k = compile_sm90(probe, (desc, torch.empty(8, dtype=torch.int64)), {"B": b, "num_warps": 1})
        ptx = k.asm["ptx"]
        print(
            f"B={b}: shared {k.metadata.shared} B, tma loads {ptx.count('cp.async.bulk.tensor.2d')}, "
            f"globaltimer {ptx.count('%globaltimer')}"
        )


def main(args: argparse.Namespace) -> int:
    if args.compile_only:
        compile_only()
        return 0
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 * 2**20)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device=dev)
    print(f"GPU {props.name}, L2 {l2 / 2**20:.0f} MiB; us from the previous stamp, medians over programs x launches")
    print("| programs | boxes | condition | " + " | ".join(STAMPS[1:]) + " |")
    print("|---:|---:|---|" + "---:|" * (len(STAMPS) - 1))
    for p in (int(v) for v in args.programs.split(",")):
        for b in (int(v) for v in args.boxes.split(",")):
            if not 1 <= b <= MAX_BOXES:
                print(f"diag_tma_latency: boxes {b}: 1-{MAX_BOXES}", file=sys.stderr)
                return 2
            keep = torch.randn(p * BM.value, COLS, dtype=torch.bfloat16, device=dev)
            out = torch.zeros(p, 8, dtype=torch.int64, device=dev)
            for cond in ("warm", "flushed", "fresh"):
                deltas: list[list[float]] = [[] for _ in STAMPS[1:]]
                held = []  # fresh: every launch's tensor kept, so that each launch's is at a new address
                for rep in range(args.reps + 2):
                    x = keep
                    if cond == "fresh":  # another allocation each launch, filled (as the harness's fresh inputs)
                        x = torch.empty_like(keep).copy_(keep)
                        held.append(x)
                    desc = TensorDescriptor.from_tensor(x, [BM.value, BK.value], _layout())
                    if cond == "warm":
                        probe[(p,)](desc, out, B=b, num_warps=1)
                    else:
                        flush.zero_()
                    probe[(p,)](desc, out, B=b, num_warps=1)
                    torch.cuda.synchronize()
                    if rep < 2:
                        continue
                    t = out.cpu().tolist()
                    for prog in t:
                        for i in range(1, len(STAMPS)):
                            deltas[i - 1].append((prog[i] - prog[i - 1]) / 1000.0)
                cells = " | ".join(f"{statistics.median(d):.2f}" for d in deltas)
                print(f"| {p} | {b} | {cond} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
