"""A warp-specialised Hopper (sm_90) schedule of the fused backward, written in Triton's Gluon dialect.

Same products and the same tile space as ``kernel/backward.py`` (grad_attn_output tiles of K = 2048 and
grad_weight tiles of K = M, planned per call by ``kernel/schedule.py``), but the pipeline is spelled out:

- one **loader warp** walks the program's tiles in order and keeps a ``STAGES``-deep ring of shared-memory
  stages full with TMA loads (``ready``/``empty`` mbarriers per stage). The ring runs across tile boundaries, so
  the next tile's first stages are loaded while the consumers still run the current tile's last MMAs and its
  epilogue;
- two **consumer warpgroups** (the default partition and one worker) share each stage: a tile of 128 rows is
  split by rows (64 each), a tile of 64 rows by columns. Each issues asynchronous ``warpgroup_mma`` with one group
  in flight and releases a stage as soon as the MMA that read it has retired;
- the **epilogue** is asynchronous: the warpgroup writes its bf16 half-tile to its own shared buffer and hands it
  to a TMA store, and only waits for that store before writing the buffer again (one tile later). grad_attn tiles
  are stored head by head into grad_attn_output viewed (B*32*S, 64), which needs S to be a multiple of the tile's
  rows (the selection table, ``gluon_config_for``, falls back to the tile-language kernel otherwise).

``GluonConfig.pingpong`` (the table's M = 256 entry) gives each warpgroup whole tiles in turn instead: one
warpgroup's epilogue, written into the tile's last ring stage, overlaps the other's main loop. ``lazy_init``: the
loader initialises each stage's mbarriers as it first fills it. The schedules measured and dropped since v19 (held
stages, stream-K, multicast clusters, prefetches, epilogues from registers, two programs an SM, ...) were taken out
of this file after they lost; kernel/NOTES.md item 40 names each, its measurement and the commit that keeps it.

One entry point, ``gluon_bwd_kernel_host_desc``: Gluon host TMA descriptors (the CI's plan contract accepts their
plain NVMMA layout, ci/harness/plan.py). Only Triton 3.6.0's Gluon API is used (``warp_specialize``,
``warpgroup_mma``, ``mbarrier``, ``tma``); the path is selected only on a CUDA device of compute capability 9.x with
that Triton (``gluon_config_for``). No inline PTX: one that read ``%tid`` inside a partition made ptxas loop over
the lanes around the loader's TMAs (``scripts/diag_gluon.py`` counts such loops; a test keeps them at 0).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton

try:  # Gluon is experimental: any import problem leaves the tile-language kernel as the only path
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor

    GLUON_IMPORTED = True
except ImportError:  # pragma: no cover - depends on the installed Triton
    GLUON_IMPORTED = False

from kernel.configs import KernelConfig, bucket_for
from kernel.schedule import Plan, plan_schedule
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS

PINNED_TRITON = "3.6.0"  # the Gluon API this module is written against
BK = 64  # the K-step: a 128-byte row of bf16, the TMA boxes' and the NVMMA swizzle's width


@dataclass(frozen=True)
class GluonConfig:
    """One configuration of the Gluon kernel (tiles as in ``KernelConfig``; two consumer warpgroups)."""

    ga_bm: int
    ga_bn: int
    gw_bm: int
    gw_bn: int
    stages: int = 3
    group: int = 4
    loader_regs: int = 40
    schedule: str = "auto"
    # v19: ping-pong: each consumer warpgroup runs whole tiles (every other tile of the program), so one
    # warpgroup's epilogue, written into the tile's last ring stage, overlaps the other's main loop
    pingpong: bool = False
    # v24: the loader warp initialises each ring stage's two mbarriers as it first fills the stage (its first load
    # leaves after two inits instead of after the whole ring's), and the consumers wait for a boot barrier it
    # arrives on once every stage is initialised; the default partition initialises only that one
    lazy_init: bool = False

    def __post_init__(self) -> None:
        if self.gw_bm != 128 or self.ga_bm not in (64, 128):
            raise ValueError(f"tiles: grad_weight 128 rows, grad_attn 64 or 128 (got {self.ga_bm}, {self.gw_bm})")
        # a cooperative 64-row grad_attn tile is split by columns: each warpgroup's half stores whole heads
        ga_wn = self.ga_bn if (self.ga_bm == 128 or self.pingpong) else self.ga_bn // 2
        if ga_wn % HEAD_DIM or ga_wn < HEAD_DIM:
            raise ValueError(f"tiles: a warpgroup's grad_attn columns ({ga_wn}) whole heads of {HEAD_DIM}")
        if self.gw_bn % 64 or self.gw_bn < 64:
            raise ValueError(f"tiles: grad_weight columns ({self.gw_bn}) whole TMA boxes of 64")
        if self.pingpong and (self.ga_bn > 128 or self.gw_bn > 128):
            raise ValueError("pingpong: tiles of at most 128 columns (a tile's half fits a ring stage's part)")
        if self.stages < 2:  # a stage goes back to the loader only after the next step's MMA is issued
            raise ValueError(f"stages {self.stages}: at least 2 (one stage deadlocks the ring)")

    def kernel_config(self) -> KernelConfig:
        """The tile-language configuration with the same tiles: what ``plan_schedule`` reads."""
        return KernelConfig(self.ga_bm, self.ga_bn, self.gw_bm, self.gw_bn, BK, schedule=self.schedule)


# The selection table: M bucket -> (Gluon configuration, enabled). An entry may be enabled only where it was measured
# faster than the tile-language kernel AND correct (and bit-for-bit repeatable) on the H200. Host descriptors: the
# CI's plan contract (ci/harness/plan.py) accepts their plain NVMMA layout, and the replay runs them (v18); device-built
# ones cost ~4.5 us a launch (gluon_bench_run_d_device_desc.log). Measured (kernel/NOTES.md, v18, v19; side by side
# with cuBLAS and the tile-language kernel, CUPTI span): 128x128 grad_weight tiles (half the bytes of a 128x256 stage)
# let 6 stages fit beside the two epilogue buffers, and the depth made the difference (M = 256: 3 stages of 128x256
# 18.6 us, 5 of 128x128 13.0, 6 of them 11.8). v19 (docs/h200/v19_run_a_*): ping-pong with the epilogue in a held
# stage (7 stages) 0.93x v18 at M = 256, but 1.02-1.06x at M = 512-2048, where the cooperative entries stay; the
# cooperative held-stage variant (7 stages) was slower everywhere. v21 (docs/h200/v21_sweep.log): at M = 4096-8192,
# where a 128x128 loop pulls more from L2 than it can give, 128x256 tiles of both kinds (3 stages beside their
# epilogue buffers) 0.96x the tile-language kernel, which those buckets used before. The entries are written by
# scripts/apply_gluon_selection.py from the sweep's selection file, the same text on the GPU copy and here.
# fmt: off
GLUON_TABLE: dict[int, tuple[GluonConfig, bool]] = {
    256: (GluonConfig(64, 128, 128, 128, stages=7, pingpong=True, lazy_init=True), True),
    512: (GluonConfig(128, 128, 128, 128, stages=6, lazy_init=True), True),
    1024: (GluonConfig(128, 128, 128, 128, stages=6, lazy_init=True), True),
    2048: (GluonConfig(128, 128, 128, 128, stages=6, lazy_init=True), True),
    4096: (GluonConfig(128, 256, 128, 256), True),
    8192: (GluonConfig(128, 256, 128, 256), True),
}
# fmt: on


def gluon_config_for(
    m: int, s: int, device_capability: tuple[int, int] | None, *, include_disabled: bool = False
) -> GluonConfig | None:
    """The Gluon configuration for M rows of seq_len ``s`` on a device of this capability, or None (use the
    tile-language kernel): Hopper only, an enabled table entry for M's bucket, and S a multiple of the grad_attn
    tile's rows (its TMA store writes whole per-batch row blocks)."""
    if device_capability is None or device_capability[0] != 9 or not GLUON_IMPORTED:
        return None
    if triton.__version__ != PINNED_TRITON:
        return None
    entry = GLUON_TABLE.get(bucket_for(m)) if m <= max(GLUON_TABLE) else None
    if entry is None:
        return None
    cfg, enabled = entry
    if not include_disabled and not enabled:
        return None
    if s % cfg.ga_bm or m % cfg.ga_bm:
        return None
    return cfg


if GLUON_IMPORTED:

    @gluon.constexpr_function
    def _wgmma_layout(bm: int, bn: int) -> gl.NVMMADistributedLayout:
        """Accumulator layout of one warpgroup (4 warps) owning a bm x bn block (bm a multiple of 64)."""
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, bn, 16])

    @gluon.constexpr_function
    def _consumers(pingpong: int) -> int:
        """Arrivals that release a stage: one warpgroup in ping-pong, both cooperative."""
        return 1 if pingpong else 2

    @gluon.jit
    def _tile_coords(tile, n_m, n_n, GROUP: gl.constexpr):
        """Grouped tile order (the tile-language kernel's): GROUP row-blocks share column-blocks in flight."""
        width = GROUP * n_n
        group_id = tile // width
        first_m = group_id * GROUP
        group_size = gl.minimum(n_m - first_m, GROUP)
        pid_m = first_m + (tile % width) % group_size
        pid_n = (tile % width) // group_size
        return pid_m, pid_n

    @gluon.jit
    def _program_tiles(
        M,
        n_ga_m,
        P_GA,
        GA_FIRST: gl.constexpr,
        HID: gl.constexpr,
        GA_BN: gl.constexpr,
        GW_BM: gl.constexpr,
        GW_BN: gl.constexpr,
    ):
        """(ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw): the same arithmetic as the tile-language kernel."""
        n_ga = n_ga_m * (HID // GA_BN)
        n_gw = (HID // GW_BM) * (HID // GW_BN)
        pid = gl.program_id(0)
        nprog = gl.num_programs(0)
        if P_GA > 0:
            if pid < P_GA:
                ga_lo = pid
                ga_step = P_GA
                gw_lo = n_gw
                gw_step = 1
            else:
                ga_lo = n_ga
                ga_step = 1
                gw_lo = pid - P_GA
                gw_step = nprog - P_GA
        else:
            n_first = n_gw
            if GA_FIRST:
                n_first = n_ga
            second_lo = pid + gl.cdiv(gl.maximum(n_first - pid, 0), nprog) * nprog - n_first
            ga_lo = second_lo
            gw_lo = pid
            if GA_FIRST:
                ga_lo = pid
                gw_lo = second_lo
            ga_step = nprog
            gw_step = nprog
        return ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw

    @gluon.jit
    def _loader(
        go_a, w_b, go_t, x_b,
        a_ring, b_ring, ready, empty,
        M, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr,
        boot=None, LAZY: gl.constexpr = False, CONSUMERS: gl.constexpr = 2,
    ):  # fmt: skip
        """One warp: TMA loads of every K-step of the program's tiles, in order, into the stage ring (with LAZY,
        each stage's mbarriers initialised here as it is first filled, and ``boot`` arrived on once all are)."""
        ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw = _program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
        n_ga_n: gl.constexpr = HID // GA_BN
        n_gw_n: gl.constexpr = HID // GW_BN
        dtype: gl.constexpr = go_a.dtype
        # The ring is allocated for the larger (grad_weight) blocks; grad_attn stages use a view of the same bytes.
        ga_bytes: gl.constexpr = (GA_BM * BK + BK * GA_BN) * 2
        gw_bytes: gl.constexpr = (BK * GW_BM + BK * GW_BN) * 2
        it = 0  # the ring's fills so far
        for phase in gl.static_range(2):
            if (phase == 0) == GA_FIRST:
                for t in range(ga_lo, n_ga, ga_step):
                    am, an = _tile_coords(t, n_ga_m, n_ga_n, GROUP)
                    off_m = am * GA_BM
                    off_n = an * GA_BN
                    for k in range(0, HID, BK):
                        s, bar = _next_stage(ready, empty, boot, it, ga_bytes, STAGES, LAZY, CONSUMERS)
                        # grad_attn blocks are smaller: a view of the start of stage s (each stage keeps its
                        # bytes whatever kind of tile used it last, so the shared schedule's switch is safe)
                        a_s = a_ring.index(s)._reinterpret(dtype, [GA_BM, BK], go_a.layout)
                        tma.async_copy_global_to_shared(go_a, [off_m, k], bar, a_s)
                        bs = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], w_b.layout)
                        _load_b(w_b, k, off_n, bar, bs, GA_BN // 64)
                        it += 1
            else:
                for t in range(gw_lo, n_gw, gw_step):
                    wm, wn = _tile_coords(t, HID // GW_BM, n_gw_n, GROUP)
                    off_o = wm * GW_BM
                    off_i = wn * GW_BN
                    for k in range(0, M, BK):  # rows past M are zero-filled by the descriptor
                        s, bar = _next_stage(ready, empty, boot, it, gw_bytes, STAGES, LAZY, CONSUMERS)
                        As = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], go_t.layout)
                        for j in gl.static_range(GW_BM // 64):
                            tma.async_copy_global_to_shared(go_t, [k, off_o + j * 64], bar, As.slice(j * 64, 64, dim=1))
                        bs = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], x_b.layout)
                        _load_b(x_b, k, off_i, bar, bs, GW_BN // 64)
                        it += 1
        if LAZY:  # a program of fewer steps than stages: the rest initialised, and the consumers let go
            for i in range(it, STAGES):
                _lazy_init(ready, empty, boot, i, i, STAGES, CONSUMERS)

    @gluon.jit
    def _next_stage(
        ready, empty, boot, it, n_bytes: gl.constexpr, STAGES: gl.constexpr, LAZY: gl.constexpr,
        CONSUMERS: gl.constexpr,
    ):  # fmt: skip
        """The loader's fill ``it``: its stage once the consumers have released it (every stage starts empty: the
        first wait is for parity 1, which a fresh mbarrier has passed), initialised first with LAZY, its ready
        barrier expecting ``n_bytes``. Returns (stage, ready barrier)."""
        s = it % STAGES
        if LAZY:
            _lazy_init(ready, empty, boot, s, it, STAGES, CONSUMERS)
        mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
        bar = ready.index(s)
        mbarrier.expect(bar, n_bytes)
        return s, bar

    @gluon.jit
    def _lazy_init(ready, empty, boot, s, it, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
        """LAZY: stage s's mbarriers initialised before its first fill (it < STAGES); after the last stage's, the
        inits fenced for the TMA engine and ``boot`` arrived on, so the consumers touch no stage before it is."""
        if it < STAGES:
            mbarrier.init(ready.index(s), count=1)
            mbarrier.init(empty.index(s), count=CONSUMERS)
            fence_async_shared()
            if it == STAGES - 1:
                mbarrier.arrive(boot, count=1)

    @gluon.jit
    def _load_b(desc, k, off, bar, bs, NB: gl.constexpr):
        """A K-step's B block: NB boxes of 64 columns from column ``off`` into ``bs``."""
        for j in gl.static_range(NB):
            tma.async_copy_global_to_shared(desc, [k, off + j * 64], bar, bs.slice(j * 64, 64, dim=1))

    @gluon.jit
    def _ga_a_block(a_ring, s, GA_BM: gl.constexpr, BK: gl.constexpr):
        """Stage s's grad_attn A block (GA_BM rows of grad_output, BK deep): a view of the stage's A bytes."""
        return a_ring.index(s)._reinterpret(a_ring.dtype, [GA_BM, BK], a_ring.layout)

    @gluon.jit
    def _mma_step(a, b, acc):
        """A cooperative K-step's MMA, the step before's retired on return (its stage may be released)."""
        acc = warpgroup_mma(a, b, acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        return acc

    @gluon.jit
    def _release(empty, s):
        """A cooperative warpgroup's release of stage ``s`` to the loader."""
        mbarrier.arrive(empty.index(s), count=1)

    @gluon.jit
    def _epilogue_pass(epi, acc, dtype: gl.constexpr):
        """A cooperative epilogue's accumulator into the warpgroup's buffer ``epi``, fenced for the TMA stores that
        follow."""
        epi.store(acc.to(dtype))
        fence_async_shared()
        gl.thread_barrier()

    @gluon.jit
    def _release_held(empty, prev):
        """Ping-pong: the stage ``prev`` (the tile's last) held the epilogue; once its TMA stores have read it, hand it
        back to the loader."""
        tma.store_wait(0)
        gl.thread_barrier()
        mbarrier.arrive(empty.index(prev), count=1)

    @gluon.jit
    def _consumer(
        WG: gl.constexpr,
        ga_out, gw_out,
        a_ring, b_ring, ready, empty, epi,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr,
    ):  # fmt: skip
        """Cooperative: warpgroup WG (0 or 1) runs its half of every tile's MMAs, then its half of the epilogue into
        its own buffer ``epi``."""
        ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw = _program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
        n_ga_n: gl.constexpr = HID // GA_BN
        n_gw_n: gl.constexpr = HID // GW_BN
        dtype: gl.constexpr = a_ring.dtype
        # grad_attn: a 128-row tile is split by rows, a 64-row one by columns.
        GA_SPLIT_M: gl.constexpr = GA_BM >= 128
        GA_WM: gl.constexpr = GA_BM // 2 if GA_SPLIT_M else GA_BM
        GA_WN: gl.constexpr = GA_BN if GA_SPLIT_M else GA_BN // 2
        GW_WM: gl.constexpr = GW_BM // 2
        ga_layout: gl.constexpr = _wgmma_layout(GA_WM, GA_WN)
        gw_layout: gl.constexpr = _wgmma_layout(GW_WM, GW_BN)
        it = 0
        prev = 0
        nt = 0  # tiles done
        for phase in gl.static_range(2):
            if (phase == 0) == GA_FIRST:
                for t in range(ga_lo, n_ga, ga_step):
                    am, an = _tile_coords(t, n_ga_m, n_ga_n, GROUP)
                    off_m = am * GA_BM
                    off_n = an * GA_BN
                    acc = gl.zeros([GA_WM, GA_WN], gl.float32, ga_layout)
                    for k in range(0, HID, BK):
                        s = it % STAGES
                        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                        a = _ga_a_block(a_ring, s, GA_BM, BK)
                        b = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], b_ring.layout)
                        if GA_SPLIT_M:
                            a = a.slice(WG * GA_WM, GA_WM, dim=0)
                        else:
                            b = b.slice(WG * GA_WN, GA_WN, dim=1)
                        acc = _mma_step(a, b, acc)
                        if k > 0:
                            _release(empty, prev)
                        prev = s
                        it += 1
                    acc = warpgroup_mma_wait(0, deps=(acc,))
                    _release(empty, prev)
                    epi_ga = epi._reinterpret(dtype, [GA_WM, GA_WN], epi.layout)
                    tma.store_wait(0)  # the previous tile's store has left the buffer
                    gl.thread_barrier()
                    nt += 1
                    # Epilogue: this warpgroup's rows r0.. of the tile, columns c0.. (whole heads of HD columns).
                    r0 = off_m + WG * GA_WM * GA_SPLIT_M
                    c0 = off_n + WG * GA_WN * (1 - GA_SPLIT_M)
                    b0 = r0 // S
                    row0 = b0 * (NH - 1) * S + r0  # (b*NH)*S + s = b*(NH-1)*S + m
                    _epilogue_pass(epi_ga, acc, dtype)
                    for j in gl.static_range(GA_WN // HD):
                        h = c0 // HD + j
                        tma.async_copy_shared_to_global(ga_out, [row0 + h * S, 0], epi_ga.slice(j * HD, HD, dim=1))
            else:
                for t in range(gw_lo, n_gw, gw_step):
                    wm, wn = _tile_coords(t, HID // GW_BM, n_gw_n, GROUP)
                    off_o = wm * GW_BM
                    off_i = wn * GW_BN
                    acc = gl.zeros([GW_WM, GW_BN], gl.float32, gw_layout)
                    for k in range(0, M, BK):
                        s = it % STAGES
                        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                        a = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], a_ring.layout)
                        a = a.slice(WG * GW_WM, GW_WM, dim=1).permute((1, 0))
                        b = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], b_ring.layout)
                        acc = _mma_step(a, b, acc)
                        if k > 0:
                            _release(empty, prev)
                        prev = s
                        it += 1
                    acc = warpgroup_mma_wait(0, deps=(acc,))
                    _release(empty, prev)
                    epi_gw = epi._reinterpret(dtype, [GW_WM, GW_BN], epi.layout)
                    tma.store_wait(0)
                    gl.thread_barrier()
                    nt += 1
                    _epilogue_pass(epi_gw, acc, dtype)
                    for j in gl.static_range(GW_BN // 64):
                        tma.async_copy_shared_to_global(
                            gw_out, [off_o + WG * GW_WM, off_i + j * 64], epi_gw.slice(j * 64, 64, dim=1)
                        )
        tma.store_wait(0)

    @gluon.jit
    def _consumer_pp(
        WG: gl.constexpr,
        ga_out, gw_out,
        a_ring, b_ring, ready, empty, sync,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr,
    ):  # fmt: skip
        """Ping-pong: warpgroup WG runs the program's tiles WG, WG + 2, ... whole (128 rows as two 64-row
        accumulators), skipping the other warpgroup's stages in the ring; while it writes a tile's epilogue (into
        the tile's last stage, released once its TMA stores have read it), the other warpgroup runs the next
        tile's main loop.

        The turns are ordered (``sync[1 + w]`` completes a phase when warpgroup w has waited for every stage of its
        tile): a warpgroup waits for the other's previous main loop before it waits on its own first stage. Without
        that, a warpgroup that skipped ahead in the ring could take a stage's earlier fill (the same mbarrier
        parity two fills back) for its own."""
        ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw = _program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
        n_ga_n: gl.constexpr = HID // GA_BN
        n_gw_n: gl.constexpr = HID // GW_BN
        dtype: gl.constexpr = a_ring.dtype
        GA_TWO: gl.constexpr = GA_BM == 128  # a 128-row grad_attn tile: two accumulators of 64 rows
        ga_layout: gl.constexpr = _wgmma_layout(64, GA_BN)
        gw_layout: gl.constexpr = _wgmma_layout(64, GW_BN)
        ga_steps: gl.constexpr = HID // BK
        gw_steps = gl.cdiv(M, BK)
        it = 0
        nt = 0  # the program's tiles seen (this warpgroup's are those with nt % 2 == WG)
        for phase in gl.static_range(2):
            if (phase == 0) == GA_FIRST:
                for t in range(ga_lo, n_ga, ga_step):
                    if nt % 2 == WG:
                        if nt > 0:  # the other warpgroup's main loop of the previous tile has passed
                            mbarrier.wait(sync.index(2 - WG), ((nt - 1) // 2) & 1)
                        am, an = _tile_coords(t, n_ga_m, n_ga_n, GROUP)
                        off_m = am * GA_BM
                        off_n = an * GA_BN
                        acc0 = gl.zeros([64, GA_BN], gl.float32, ga_layout)
                        acc1 = gl.zeros([64, GA_BN], gl.float32, ga_layout)
                        prev = 0
                        for k in range(0, HID, BK):
                            s = it % STAGES
                            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                            a = a_ring.index(s)._reinterpret(dtype, [GA_BM, BK], a_ring.layout)
                            b = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], b_ring.layout)
                            if GA_TWO:
                                acc0 = warpgroup_mma(a.slice(0, 64, dim=0), b, acc0, is_async=True)
                                acc1 = warpgroup_mma(a.slice(64, 64, dim=0), b, acc1, is_async=True)
                                acc0, acc1 = warpgroup_mma_wait(2, deps=(acc0, acc1))
                            else:
                                acc0 = warpgroup_mma(a, b, acc0, is_async=True)
                                acc0 = warpgroup_mma_wait(1, deps=(acc0,))
                            if k > 0:
                                mbarrier.arrive(empty.index(prev), count=1)
                            prev = s
                            it += 1
                        mbarrier.arrive(sync.index(1 + WG), count=1)  # the other warpgroup's turn
                        if GA_TWO:
                            acc0, acc1 = warpgroup_mma_wait(0, deps=(acc0, acc1))
                        else:
                            acc0 = warpgroup_mma_wait(0, deps=(acc0,))
                        # the epilogue in the tile's last stage: rows 0-63 in its A bytes, 64-127 in its B bytes
                        e0 = a_ring.index(prev)._reinterpret(dtype, [64, GA_BN], a_ring.layout)
                        e0.store(acc0.to(dtype))
                        if GA_TWO:
                            e1 = b_ring.index(prev)._reinterpret(dtype, [64, GA_BN], b_ring.layout)
                            e1.store(acc1.to(dtype))
                        fence_async_shared()
                        gl.thread_barrier()
                        b0 = off_m // S
                        row0 = b0 * (NH - 1) * S + off_m  # (b*NH)*S + s = b*(NH-1)*S + m
                        for j in gl.static_range(GA_BN // HD):
                            h = off_n // HD + j
                            tma.async_copy_shared_to_global(ga_out, [row0 + h * S, 0], e0.slice(j * HD, HD, dim=1))
                            if GA_TWO:
                                tma.async_copy_shared_to_global(
                                    ga_out, [row0 + h * S + 64, 0], e1.slice(j * HD, HD, dim=1)
                                )
                        _release_held(empty, prev)
                    else:
                        it += ga_steps
                    nt += 1
            else:
                for t in range(gw_lo, n_gw, gw_step):
                    if nt % 2 == WG:
                        if nt > 0:
                            mbarrier.wait(sync.index(2 - WG), ((nt - 1) // 2) & 1)
                        wm, wn = _tile_coords(t, HID // GW_BM, n_gw_n, GROUP)
                        off_o = wm * GW_BM
                        off_i = wn * GW_BN
                        acc0 = gl.zeros([64, GW_BN], gl.float32, gw_layout)
                        acc1 = gl.zeros([64, GW_BN], gl.float32, gw_layout)
                        prev = 0
                        for k in range(0, M, BK):
                            s = it % STAGES
                            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                            a = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], a_ring.layout)
                            b = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], b_ring.layout)
                            acc0 = warpgroup_mma(a.slice(0, 64, dim=1).permute((1, 0)), b, acc0, is_async=True)
                            acc1 = warpgroup_mma(a.slice(64, 64, dim=1).permute((1, 0)), b, acc1, is_async=True)
                            acc0, acc1 = warpgroup_mma_wait(2, deps=(acc0, acc1))
                            if k > 0:
                                mbarrier.arrive(empty.index(prev), count=1)
                            prev = s
                            it += 1
                        mbarrier.arrive(sync.index(1 + WG), count=1)
                        acc0, acc1 = warpgroup_mma_wait(0, deps=(acc0, acc1))
                        e0 = a_ring.index(prev)._reinterpret(dtype, [64, GW_BN], a_ring.layout)
                        e1 = b_ring.index(prev)._reinterpret(dtype, [64, GW_BN], b_ring.layout)
                        e0.store(acc0.to(dtype))
                        e1.store(acc1.to(dtype))
                        fence_async_shared()
                        gl.thread_barrier()
                        for j in gl.static_range(GW_BN // 64):
                            tma.async_copy_shared_to_global(
                                gw_out, [off_o, off_i + j * 64], e0.slice(j * 64, 64, dim=1)
                            )
                            tma.async_copy_shared_to_global(
                                gw_out, [off_o + 64, off_i + j * 64], e1.slice(j * 64, 64, dim=1)
                            )
                        _release_held(empty, prev)
                    else:
                        it += gw_steps
                    nt += 1
        tma.store_wait(0)

    @gluon.jit
    def _consumer_part(WG: gl.constexpr, ga_out, gw_out, a_ring, b_ring, ready, empty, epi, sync, M, S, n_ga_m, P_GA,
                       GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
                       GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
                       BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, PINGPONG: gl.constexpr,
                       LAZY: gl.constexpr):  # fmt: skip
        if LAZY:  # the loader initialises the ring's mbarriers: none is touched before it says so
            mbarrier.wait(sync.index(3), 0)
        if PINGPONG:
            _consumer_pp(WG, ga_out, gw_out, a_ring, b_ring, ready, empty, sync, M, S, n_ga_m, P_GA, GA_FIRST, HID,
                         NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP)  # fmt: skip
        else:
            _consumer(WG, ga_out, gw_out, a_ring, b_ring, ready, empty, epi, M, S, n_ga_m, P_GA, GA_FIRST, HID,
                      NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP)  # fmt: skip

    @gluon.jit
    def _consumer0(ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                   GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
                   GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
                   BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, PINGPONG: gl.constexpr,
                   LAZY: gl.constexpr):  # fmt: skip
        _consumer_part(0, ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, sync, M, S, n_ga_m, P_GA, GA_FIRST, HID,
                       NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, PINGPONG, LAZY)  # fmt: skip

    @gluon.jit
    def _consumer1(ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                   GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
                   GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
                   BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, PINGPONG: gl.constexpr,
                   LAZY: gl.constexpr):  # fmt: skip
        _consumer_part(1, ga_out, gw_out, a_ring, b_ring, ready, empty, epi1, sync, M, S, n_ga_m, P_GA, GA_FIRST, HID,
                       NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, PINGPONG, LAZY)  # fmt: skip

    @gluon.jit
    def _loader_part(go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, sync, M, S, n_ga_m, P_GA,
                     GA_FIRST: gl.constexpr, HID: gl.constexpr, GA_BM: gl.constexpr, GA_BN: gl.constexpr,
                     GW_BM: gl.constexpr, GW_BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                     GROUP: gl.constexpr, PINGPONG: gl.constexpr, LAZY: gl.constexpr):  # fmt: skip
        CONSUMERS: gl.constexpr = _consumers(PINGPONG)
        _loader(go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, M, n_ga_m, P_GA, GA_FIRST, HID, GA_BM, GA_BN,
                GW_BM, GW_BN, BK, STAGES, GROUP, sync.index(3), LAZY, CONSUMERS)  # fmt: skip

    @gluon.jit(do_not_specialize=["M", "S", "n_ga_m", "P_GA"])
    def gluon_bwd_kernel_host_desc(
        go_a, w_b, go_t, x_b, ga_out, gw_out,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, LOADER_REGS: gl.constexpr,
        PINGPONG: gl.constexpr = False,
        LAZY: gl.constexpr = False,
    ):  # fmt: skip
        """The kernel's entry, with host TMA descriptors (Gluon ``TensorDescriptor``). Persistent: a loader warp and
        two consumer warpgroups per program (num_warps = 4: the default partition is consumer 0)."""
        dtype: gl.constexpr = go_a.dtype
        gl.static_assert(GW_BM == 128 and GA_BM % 64 == 0, "two warpgroups of 64 rows")
        # A stage holds either kind's blocks: sized by the larger of each, viewed per kind (_reinterpret).
        A_COLS: gl.constexpr = GW_BM if GW_BM >= GA_BM else GA_BM
        B_COLS: gl.constexpr = GW_BN if GW_BN >= GA_BN else GA_BN
        a_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, A_COLS], go_t.layout)
        b_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, B_COLS], x_b.layout)
        GA_WN: gl.constexpr = GA_BN if GA_BM >= 128 else GA_BN // 2
        EPI_COLS: gl.constexpr = GW_BN if GW_BN >= GA_WN else GA_WN
        if PINGPONG:
            # the epilogue goes into a held ring stage: 64 rows of up to A_COLS (B_COLS) columns per part
            gl.static_assert(BK == 64 and EPI_COLS <= A_COLS and EPI_COLS <= B_COLS, "an epilogue part fits a stage")
            gl.static_assert(GA_BN <= A_COLS and GA_BN <= B_COLS, "a ping-pong grad_attn half fits a stage part")
            epi0 = a_ring  # no buffers of their own: the ring's stages stand in for them
            epi1 = b_ring
        else:
            # one epilogue buffer per warpgroup: 64 rows by the wider of its two kinds of half-tile
            epi0 = gl.allocate_shared_memory(dtype, [64, EPI_COLS], gw_out.layout)
            epi1 = gl.allocate_shared_memory(dtype, [64, EPI_COLS], gw_out.layout)
        CONSUMERS: gl.constexpr = _consumers(PINGPONG)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        # [1], [2]: the ping-pong turns ([0] unused); [3] (LAZY): the loader's word that every stage's mbarriers are
        # initialised
        SYNCS: gl.constexpr = 4 if LAZY else 3
        sync = gl.allocate_shared_memory(gl.int64, [SYNCS, 1], mbarrier.MBarrierLayout())
        # Every stage starts empty: the loader's first wait on a stage is for parity 1, the phase before a fresh
        # mbarrier's first, which counts as completed (v24: no arrivals here). The allocations' inits interleave:
        # Triton puts a warpgroup barrier between two writes to one allocation, so one barrier a stage (v23: two).
        if LAZY:  # the loader initialises the ring's (_lazy_init); here the boot barrier and the ones in use
            mbarrier.init(sync.index(3), count=1)
            if PINGPONG:
                for i in gl.static_range(3):
                    mbarrier.init(sync.index(i), count=2 if i == 0 else 1)
        else:
            for i in gl.static_range(STAGES):
                mbarrier.init(ready.index(i), count=1)
                mbarrier.init(empty.index(i), count=CONSUMERS)
                if i < 3:
                    mbarrier.init(sync.index(i), count=2 if i == 0 else 1)
            for i in gl.static_range(STAGES, 3):  # fewer than three stages
                mbarrier.init(sync.index(i), count=2 if i == 0 else 1)
        # (the argument tuples are written out: a tuple held in a variable loses its constexprs)
        gl.warp_specialize(
            [
                (_consumer0, (ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                              GA_FIRST, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, PINGPONG, LAZY)),
                (_consumer1, (ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                              GA_FIRST, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, PINGPONG, LAZY)),
                (_loader_part, (go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, sync, M, S, n_ga_m, P_GA,
                                GA_FIRST, HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, PINGPONG, LAZY)),
            ],
            [4, 1],
            [232, LOADER_REGS],
        )  # fmt: skip


def _nvmma(block: list[int]) -> gl.NVMMASharedLayout:
    return gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)


def launch_arguments(
    go2: torch.Tensor, w2: torch.Tensor, x2: torch.Tensor, gw: torch.Tensor, ga: torch.Tensor, s: int,
    cfg: GluonConfig, plan: Plan,
) -> tuple[tuple, dict]:  # fmt: skip
    """(positional arguments, constexpr keyword arguments) of one launch of ``gluon_bwd_kernel_host_desc``: for the
    launcher and for compiling ahead of time on a CPU host (``scripts/diag_gluon.py``)."""
    m = go2.shape[0]
    go_a = GluonTensorDescriptor.from_tensor(go2, [cfg.ga_bm, BK], _nvmma([cfg.ga_bm, BK]))
    w_b = GluonTensorDescriptor.from_tensor(w2, [BK, 64], _nvmma([BK, 64]))
    go_t = GluonTensorDescriptor.from_tensor(go2, [BK, 64], _nvmma([BK, 64]))
    x_b = GluonTensorDescriptor.from_tensor(x2, [BK, 64], _nvmma([BK, 64]))
    # grad_attn_output (B, H, S, D) viewed (B*H*S, D): row (b*H + h)*S + s.
    ga_rows = ga.view(m // s * NUM_HEADS * s, HEAD_DIM)
    ga_wm = cfg.ga_bm // 2 if cfg.ga_bm >= 128 else cfg.ga_bm
    ga_out = GluonTensorDescriptor.from_tensor(ga_rows, [ga_wm, HEAD_DIM], _nvmma([ga_wm, HEAD_DIM]))
    gw_out = GluonTensorDescriptor.from_tensor(gw, [cfg.gw_bm // 2, 64], _nvmma([cfg.gw_bm // 2, 64]))
    args = (go_a, w_b, go_t, x_b, ga_out, gw_out, m, s, plan.n_ga_m, plan.p_ga)
    constexprs = {"GA_FIRST": plan.ga_first, "HID": HIDDEN, "NH": NUM_HEADS, "HD": HEAD_DIM, "GA_BM": cfg.ga_bm}
    constexprs.update(GA_BN=cfg.ga_bn, GW_BM=cfg.gw_bm, GW_BN=cfg.gw_bn, BK=BK, STAGES=cfg.stages, GROUP=cfg.group)
    constexprs.update(LOADER_REGS=cfg.loader_regs, PINGPONG=cfg.pingpong, LAZY=cfg.lazy_init)
    return args, constexprs


@functools.lru_cache(maxsize=64)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def plan_for(m: int, cfg: GluonConfig, programs: int) -> Plan:
    """The plan of a launch at M rows on ``programs`` program slots, one an SM."""
    return plan_schedule(m, cfg.kernel_config(), programs)


def launch(
    go2: torch.Tensor, w2: torch.Tensor, x2: torch.Tensor, gw: torch.Tensor, ga: torch.Tensor, s: int,
    cfg: GluonConfig,
) -> None:  # fmt: skip
    """One launch of the Gluon kernel on the current stream of the inputs' device (CUDA, sm_90)."""
    device = go2.device
    index = device.index if device.index is not None else torch.cuda.current_device()
    plan = plan_for(go2.shape[0], cfg, _sm_count(index))
    args, constexprs = launch_arguments(go2, w2, x2, gw, ga, s, cfg, plan)
    with torch.cuda.device(device):
        gluon_bwd_kernel_host_desc[(plan.programs,)](*args, **constexprs, num_warps=4)
