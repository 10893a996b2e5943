"""Device diagnostic (kernel/NOTES.md, item 24, Next 2): the Gluon kernel's loader alone, to see how fast its TMA
loads can feed the ring when nothing computes, with the inputs cold (L2 flushed before each launch) or warm.

Usage (GPU): PYTHONPATH=. python scripts/diag_loads_only.py [--ms 1024 2048] [--kinds both,ga,gw] [--reps 10]
             [--hold-ns 0,300] [--stages 6,7]
Usage (CPU): PYTHONPATH=. python scripts/diag_loads_only.py --compile-only   (sm_90: registers, shared, PTX)

Each program runs the table's loader (``kernel.gluon_backward._loader``: the same tiles, order, ring and TMA boxes)
against one warpgroup that releases every stage as soon as it is ready or, with ``--hold-ns H``, as the real
kernel's consumers do with an MMA of H ns a step (item 25): stage k is released once step k + 1's stage is ready and
an emulated MMA of H ns on stage k is over (the MMAs one after another: ``warpgroup_mma_wait(1)``). It stamps the
global timer at its start, at its first stage's arrival, after its first tile, after its first kind of tile and at
its end. Printed per (M, plan, stages, H, L2): the span inside the GPU (first start to last end, median over
launches), the first wait, and per K-step (a 128x128x64 step's 32 KB) the medians over programs of the first tile
(from its first stage), the rest of the first kind and the second kind: with H = 0 the intake the real kernel's
loops (0.31-0.36 us a step, the MMA ceiling 0.303) cannot beat; with H = 300 what the memory system alone makes of
the real kernel's pace. "ga" / "gw": one kind of tile alone on the same programs, as the Gluon trace runs them.
Exit 2 for an M whose table entry has grad_attn and grad_weight tiles of different sizes (no one step size).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ms", nargs="+", type=int, default=[1024, 2048], help="rows M, run as (M/128, 128)")
    ap.add_argument("--kinds", default="both,ga,gw", help="both (the real plan), ga, gw (one kind alone)")
    ap.add_argument("--reps", type=int, default=10, help="timed launches per (M, plan, L2)")
    ap.add_argument("--hold-ns", default="0", help="emulated MMA ns a step (comma list; 0: release on arrival)")
    ap.add_argument("--stages", default="", help="ring depths (comma list; default the table entry's)")
    ap.add_argument("--compile-only", action="store_true", help="compile for sm_90 here, no GPU")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch and Triton load
    ARGS = parse_args()

import torch  # noqa: E402

# scripts/ is on the path when this runs as a script: the compile helpers and one kind of tile alone (the trace's)
from diag_gluon import _resource_usage, compile_sm90, launch_tensors  # noqa: E402
from diag_gluon_timeline import kind_plan  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier  # noqa: E402

from kernel import gluon_backward as gb  # noqa: E402
from kernel.schedule import Plan  # noqa: E402

# start, after the first tile, after the first kind of tile, end; the steps of each part; the first stage's arrival
FIELDS = 8


@gluon.jit
def _now():
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _release(
    ready, empty, boot, stamps_ptr, M, n_ga_m, P_GA, hold_ns,
    GA_FIRST: gl.constexpr, HID: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
    BK: gl.constexpr, STAGES: gl.constexpr, HOLD: gl.constexpr, LAZY: gl.constexpr,
):  # fmt: skip
    """One warpgroup: every stage released as soon as its loads land or (HOLD) as the real consumers release it
    with an MMA of ``hold_ns`` a step; the program's stamps and step counts. With LAZY (the table's loader
    initialises the ring's mbarriers), it waits for the loader's boot barrier first, as the consumers do."""
    if LAZY:
        mbarrier.wait(boot, 0)
    ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw = gb._program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
    ga_tiles = gl.cdiv(gl.maximum(n_ga - ga_lo, 0), ga_step)
    gw_tiles = gl.cdiv(gl.maximum(n_gw - gw_lo, 0), gw_step)
    ga_k = HID // BK
    gw_k = gl.cdiv(M, BK)
    first_kind = gw_tiles * gw_k
    first_tile = gw_k
    if GA_FIRST:
        first_kind = ga_tiles * ga_k
        first_tile = ga_k
    if first_kind == 0:  # a program of the other kind only (a partition's, or one kind zeroed)
        first_kind = ga_tiles * ga_k + gw_tiles * gw_k
        first_tile = gl.where(ga_tiles > 0, ga_k, gw_k)
    n_steps = ga_tiles * ga_k + gw_tiles * gw_k
    t0 = _now()
    t1 = t0
    t2 = t0
    tr = t0
    busy = t0  # HOLD: when the emulated tensor cores finish the MMA issued last
    prev = 0
    for it in range(n_steps):
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        now = _now()
        if it == 0:
            tr = now
        if HOLD:
            done_prev = busy  # the previous step's MMA: over at this time
            busy = gl.maximum(busy, now) + hold_ns  # this step's MMA, issued now, queued behind it
            if it > 0:  # warpgroup_mma_wait(1): the previous MMA retired, its stage handed back
                while _now() < done_prev:
                    pass
                mbarrier.arrive(empty.index(prev), count=1)
            prev = s
        else:
            mbarrier.arrive(empty.index(s), count=1)
        if it == first_tile - 1:
            t1 = _now()
        if it == first_kind - 1:
            t2 = _now()
    rec = stamps_ptr + gl.program_id(0) * 8
    gl.store(rec, t0)
    gl.store(rec + 1, t1)
    gl.store(rec + 2, t2)
    gl.store(rec + 3, _now())
    gl.store(rec + 4, gl.minimum(first_tile, n_steps).to(gl.int64))
    gl.store(rec + 5, first_kind.to(gl.int64))
    gl.store(rec + 6, n_steps.to(gl.int64))
    gl.store(rec + 7, tr)


@gluon.jit
def _load(
    go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, boot, M, n_ga_m, P_GA,
    GA_FIRST: gl.constexpr, HID: gl.constexpr, GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr,
    GW_BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, LAZY: gl.constexpr,
):  # fmt: skip
    gb._loader(go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, M, n_ga_m, P_GA, GA_FIRST, HID, GA_BM, GA_BN,
               GW_BM, GW_BN, BK, STAGES, GROUP, boot, LAZY, 1)  # fmt: skip


@gluon.jit(do_not_specialize=["M", "S", "n_ga_m", "P_GA"])
def loads_only_kernel(
    go_a, w_b, go_t, x_b, ga_out, gw_out, M, S, n_ga_m, P_GA, stamps_ptr, hold_ns,
    GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
    GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
    BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, LOADER_REGS: gl.constexpr,
    PINGPONG: gl.constexpr = False, LAZY: gl.constexpr = False, HOLD: gl.constexpr = False,
):  # fmt: skip
    """The kernel entry's arguments (``launch_arguments``), the stamps and the emulated MMA's ns after them;
    PINGPONG is accepted and unused: nothing computes."""
    dtype: gl.constexpr = go_a.dtype
    A_COLS: gl.constexpr = GW_BM if GW_BM >= GA_BM else GA_BM
    B_COLS: gl.constexpr = GW_BN if GW_BN >= GA_BN else GA_BN
    a_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, A_COLS], go_t.layout)
    b_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, B_COLS], x_b.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    boot = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    if LAZY:  # the table's loader initialises the ring's mbarriers itself, then arrives here
        mbarrier.init(boot.index(0), count=1)
    else:
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)  # starts empty: the loader's first wait is for parity 1
    gl.warp_specialize(
        [
            (_release, (ready, empty, boot.index(0), stamps_ptr, M, n_ga_m, P_GA, hold_ns, GA_FIRST, HID, GA_BN,
                        GW_BM, GW_BN, BK, STAGES, HOLD, LAZY)),
            (_load, (go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, boot.index(0), M, n_ga_m, P_GA, GA_FIRST,
                     HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY)),
        ],
        [1],
        [LOADER_REGS],
    )  # fmt: skip


def arguments(
    m: int, s: int, cfg: gb.GluonConfig, plan: Plan, device: str, hold_ns: int = 0
) -> tuple[tuple, dict, list]:
    """(positional arguments, keyword arguments, the tensors they point into) of one launch; the inputs' values do
    not matter: nothing reads them but the loads."""
    tensors = launch_tensors(m, s, device)
    stamps = torch.zeros(plan.programs, FIELDS, dtype=torch.int64, device=device)
    args, kwargs = gb.launch_arguments(*tensors, s, cfg, plan)
    return (*args, stamps, hold_ns), dict(kwargs, num_warps=4, HOLD=hold_ns > 0), [*tensors, stamps]


def compile_only() -> None:
    for m in (1024, 2048):
        cfg = gb.gluon_config_for(m, 128, (9, 0), include_disabled=True)
        plan = gb.plan_for(m, cfg, 132)
        for hold_ns in (0, 300):
            args, kwargs, _ = arguments(m, 128, cfg, plan, "cpu", hold_ns)
            k = compile_sm90(loads_only_kernel, args, kwargs)
            ptx = k.asm["ptx"]
            print(
                f"M={m} loads only, hold {hold_ns} ns: shared {k.metadata.shared} B, "
                f"{_resource_usage(k.asm['cubin'])}, wgmma {ptx.count('wgmma.mma_async')}, "
                f"tma_load {ptx.count('cp.async.bulk.tensor')}, globaltimer {ptx.count('%globaltimer')}"
            )


def run(m: int, kind: str, reps: int, hold_ns: int, stages: int | None) -> list[str]:
    s = 128
    cfg = gb.gluon_config_for(m, s, torch.cuda.get_device_capability(), include_disabled=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if cfg is None or cfg.ga_bm * cfg.ga_bn != cfg.gw_bm * cfg.gw_bn:  # the per-step figures assume one block size
        print(f"diag_loads_only: M={m} has no Gluon entry with equal grad_attn and grad_weight tiles", file=sys.stderr)
        sys.exit(2)
    if stages:
        cfg = replace(cfg, stages=stages)
    plan = kind_plan(gb.plan_for(m, cfg, sms), kind)
    args, kwargs, keep = arguments(m, s, cfg, plan, "cuda", hold_ns)
    stamps = keep[-1]
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    launch = loads_only_kernel[(plan.programs,)]
    launch(*args, **kwargs)  # compile, warm
    torch.cuda.synchronize()
    scale = (cfg.ga_bm * cfg.ga_bn) / (128 * 128)  # a K-step's bytes against a 128x128x64 step's 32 KB
    rows = []
    for cold in (True, False):
        spans, waits, first, rest, second = [], [], [], [], []
        for _ in range(reps):
            if cold:
                flush.zero_()
            launch(*args, **kwargs)
            torch.cuda.synchronize()
            t = stamps.double().cpu()
            spans.append(float(t[:, 3].max() - t[:, 0].min()) / 1e3)
            waits.append(statistics.median(((t[:, 7] - t[:, 0]) / 1e3).tolist()))
            first.append(_per_step(t[:, 1] - t[:, 7], t[:, 4] - 1, scale))  # from the first stage's arrival
            rest.append(_per_step(t[:, 2] - t[:, 1], t[:, 5] - t[:, 4], scale))
            second.append(_per_step(t[:, 3] - t[:, 2], t[:, 6] - t[:, 5], scale))
        rows.append(
            f"| {m} | {kind} ({plan.kind}, {plan.programs} programs) | {cfg.stages} | {hold_ns} | "
            f"{'cold' if cold else 'warm'} | {_fmt(spans, 2)} | {_fmt(waits, 2)} | {_fmt(first)} | {_fmt(rest)} | "
            f"{_fmt(second)} |"
        )
    return rows


def _per_step(ns: torch.Tensor, steps: torch.Tensor, scale: float) -> float:
    """Median over the programs that ran such steps of their time a 128x128x64-equivalent step, us (nan: none)."""
    ran = steps > 0
    if not bool(ran.any()):
        return float("nan")
    return statistics.median((ns[ran] / 1e3 / steps[ran] / scale).tolist())


def _fmt(values: list[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}f}"


def main(args: argparse.Namespace) -> int:
    if args.compile_only:
        compile_only()
        return 0
    holds = [int(h) for h in args.hold_ns.split(",")]
    depths: list[int | None] = [int(d) for d in args.stages.split(",") if d] or [None]
    print(f"GPU {torch.cuda.get_device_name()}; loads only (the table's loader, nothing computes), medians")
    print(
        "| M | plan | stages | MMA ns | L2 | span us | first wait us | first tile | rest of the first kind "
        "| second kind |   (us a 32 KB step)"
    )
    print("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for m in args.ms:
        for kind in args.kinds.split(","):
            for depth in depths:
                for hold_ns in holds:
                    for row in run(m, kind, args.reps, hold_ns, depth):
                        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(ARGS))
