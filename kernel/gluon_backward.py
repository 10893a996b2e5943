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

Two schedules of the consumers (v19, ``GluonConfig``): ``epi_hold`` writes the epilogue into the tile's last ring
stage instead of separate buffers (freeing 32 KB: 7 stages of 128x128 blocks fit), releasing it once the TMA stores
have read it; ``pingpong`` gives each warpgroup whole tiles in turn (its epilogue overlaps the other's main loop),
with ``pp_gw_only`` only in the grad_weight programs of a partitioned schedule and ``pp_depth`` stages of MMAs in
flight. The table enables ping-pong with 7 stages at M <= 256, where it measured 0.93x v18 (kernel/NOTES.md, v19).
v20 (``hold_release``, off in the table): the cooperative held stage goes back to the loader a step or two later
in the next tile, once its TMA stores have surely read it (tests/kernel/test_ring_model.py models the ring).
v21: 128x256 tiles (3 stages) at M = 4096-8192. v22 (``halves``, off in the table): those tiles as two 128-column
accumulators a warpgroup, the epilogue in two passes through half the buffer, so a 4th stage fits. v23
(``l2_prefetch``, ``gw_first``, off in the table): L2 prefetches and the grad_weight tiles first. v24: the ring's
stages start empty by parity (no arrivals at init, 5 warpgroup barriers before the partitions start instead of 14);
``k_rotate`` and ``bk`` 32 (off in the table): the K-steps from a per-program offset, K-steps of 32. v25-v26 (all
off in the table, kernel/NOTES.md item 26): ``tmap_prefetch`` and ``next_prefetch`` (the descriptors, and the next
tile's first K-steps into L2, by inline PTX naming the host-descriptor entry's parameters), ``epi_defer`` (the
epilogue beside the next tile's first MMA, ``_consumer_defer``) and ``serpentine`` (every other tile walked back).
v27 (off in the table, item 27): ``epi_global``, the epilogue stored from registers (``_store_half``, no shared
buffers, so a 7th stage fits); 9-23 % slower: the SM's own stores hold its incoming loads. v28 (off in the
table, item 28): ``first_ahead``, the program's first tile's K-steps asked of L2 a few steps ahead of its loads;
1-20 % slower: the prefetches delay the loads they run ahead of. v29 (off in the table, item 29): ``multicast``,
programs 2c and 2c + 1 a 2-CTA cluster sharing each K-step's B block by multicast TMA (inline PTX naming the ring and
barriers by the offsets Triton's allocation pass gives them, ``multicast_offsets``; a cluster launch through the
pinned launcher, ``_launch_multicast``); 1.19-1.23x slower, measured with a waterfall loop around every TMA (below).
v30 (off in the table, item 30): ``stream_k``, one kind of tile whole and the other's K-steps split evenly over
every SM's program, a split tile joined through an fp32 workspace and a flag (``gluon_bwd_kernel_sk``); 1.13-1.40x
slower. No inline PTX inside the partitions reads ``%tid`` / ``%laneid``: one that did made ptxas loop over the
lanes around the loader's TMAs and mbarrier inits (``scripts/diag_gluon.py`` counts the loops; a test keeps them at 0).
v33 (off in the table, item 33): ``epi_vec``, ``epi_global``'s stores in 16-byte stores of whole lines (the pairs
moved within each warp by shuffles, ``_store_rows``); 1.04-1.13x slower: the stores still hold the warps. v34 (off in
the table, item 34): ``first_delay``, the loader's sleep after the ring's first stage; level. v36 (off in the table,
item 36): ``first_prefetch``, the first tile's first K-steps asked of L2 at the program's entry; 1.03-1.21x slower.
v37 (off in the table, item 37): ``stagger``, the upper half of the programs running its grad_weight tiles first
(GA_FIRST 2); 1.02-1.03x slower. v38 (off in the table, item 38): ``solo``, two programs an SM, each one consumer
warpgroup running whole tiles (PINGPONG 3, compiled with ``maxnreg`` 128); 1.035-1.50x slower.

Two entry points: ``gluon_bwd_kernel`` takes plain pointers and builds its TMA descriptors on the device (the CI's
replay accepts its signature, but the descriptors cost ~4.5 us at the start of every program), and
``gluon_bwd_kernel_host_desc`` takes Gluon host descriptors (fast; the table's entries use it, and the CI's plan
contract accepts their plain NVMMA layout). Only Triton 3.6.0's Gluon API is used (``warp_specialize``,
``warpgroup_mma``, ``mbarrier``, ``tma``); the path is selected only on a CUDA device of compute capability 9.x
with that Triton (``gluon_config_for``).
"""

from __future__ import annotations

import functools
import re
import tempfile
from dataclasses import dataclass, replace

import torch
import triton

try:  # Gluon is experimental: any import problem leaves the tile-language kernel as the only path
    from triton._C.libtriton import ir, nvidia, passes  # v29: Triton's own allocation pass (multicast_offsets)
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
from kernel.schedule import Plan, plan_schedule, with_first
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS

PINNED_TRITON = "3.6.0"  # the Gluon API this module is written against
# v25's prefetches name the host-descriptor entry's TMA descriptors by their PTX parameters (Gluon 3.6 has no
# prefetch of a descriptor): each Gluon host descriptor is 5 parameters there (the 128-byte descriptor, its 2
# sizes, its 2 strides), in the entry's order go_a, w_b, go_t, x_b, ga_out, gw_out (tests/kernel/test_gluon.py
# checks the names against the compiled PTX)
HOST_DESC_ENTRY = "gluon_bwd_kernel_host_desc"
DESC_PARAMS = 5

# The schedules' switches that change the ring or the epilogue: the kernels with a ring of their own (multicast,
# stream_k) take none of them (GluonConfig.switches_on)
SCHEDULE_SWITCHES = ("epi_hold", "pingpong", "halves", "epi_defer", "epi_global", "first_ahead", "l2_prefetch",
                     "next_prefetch", "k_rotate", "serpentine", "tmap_prefetch", "gw_first", "first_delay",
                     "first_prefetch", "stagger")  # fmt: skip


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
    bk: int = 64
    schedule: str = "auto"
    host_desc: bool = False  # host Gluon TensorDescriptors instead of device-built ones
    # v19: the epilogue written into the tile's last ring stage, held until its TMA stores have read it (no
    # separate epilogue buffers: 32 KB freed, a 7th stage of 128x128 blocks fits)
    epi_hold: bool = False
    # v19: ping-pong: each consumer warpgroup runs whole tiles (every other tile of the program), so one
    # warpgroup's epilogue overlaps the other's main loop (implies epi_hold)
    pingpong: bool = False
    # v19: ping-pong only in the programs of a partitioned schedule that run grad_weight tiles (several short ones);
    # the grad_attn programs (one long tile each) stay cooperative, with the held-stage epilogue
    pp_gw_only: bool = False
    pp_depth: int = 1  # ping-pong: stages of MMAs a warpgroup keeps in flight (1 or 2)
    # v20: the cooperative held stage (epi_hold, and the cooperative programs of pp_gw_only) is handed back to the
    # loader after the next tile's step ``hold_release`` (1-based; 1: after its first MMA, v19), or its last step if
    # the tile is shorter: the TMA stores have then long read it, so the wait_group.read before the release does not
    # stall. At most stages - 1 (the loader needs it back by the step STAGES of the next tile). Ping-pong proper
    # releases its held stage at the end of its own epilogue (the other warpgroup's main loop covers the wait), so it
    # has no next-tile release to move.
    hold_release: int = 1
    # v22: each warpgroup's 256-column half-tile (128x256 tiles, cooperative) as two accumulators of 128 columns,
    # its epilogue written through one 64x128 buffer in two passes: 32 KB of epilogue buffers instead of 64, so a
    # 4th stage of 128x256 blocks fits (4 x 48 KB + 32 KB = 229,376 B)
    halves: bool = False
    # v23: L2 prefetch (bit flags; the kernel then also takes the inputs' plain pointers): 1 the whole of
    # grad_output, 2 the whole of weight and reshaped, asked of L2 by every program's share at its start, in address
    # order (a grad_attn K-step reads grad_output's column slices, one 128-byte line of every 4 KB row); 4 each
    # grad_attn tile's grad_output rows (one contiguous span) asked by the loader as the tile starts; 8 (run c) the
    # K-step ``pf_distance`` steps ahead of the loader's, during each program's first tile, each program asking for its
    # share of what every program's first tile reads at that step (each byte asked once); 16 (v24 run f) where a
    # program runs both kinds (the shared plan): at the first tile's K-step ``pf_distance``, the program's share of
    # the second kind's other input, whole (reshaped when grad_attn goes first, weight otherwise), so that the
    # switch of kind and the second kind's tiles find it in L2
    l2_prefetch: int = 0
    pf_distance: int = 6
    # v23: the shared schedule with the grad_weight tiles first (their K-steps read whole rows of grad_output and
    # reshaped; a grad_attn K-step reads a 128-byte column slice of every grad_output row), where the plan shares
    gw_first: bool = False
    # v24: each program walks every tile's K-steps from its own offset, (program * k_rotate) steps in and around
    # (0: from the start, as before), so that the programs' first pass over the inputs is not in lockstep (every
    # program reading the same K-step at once); the sums' order changes with the offset, still fixed run to run
    k_rotate: int = 0
    # v24: the loader warp initialises each ring stage's two mbarriers as it first fills the stage (its first load
    # leaves after two inits instead of after the whole ring's, ~0.03 us each), and the consumers wait for a boot
    # barrier it arrives on once every stage is initialised; the default partition initialises only that one
    lazy_init: bool = False
    # v25: every TMA descriptor asked of the TMA unit's descriptor cache (``prefetch.tensormap``) at the program's
    # entry, so that no descriptor's first use (the first loads, the switch of kind, the first stores) waits for it
    tmap_prefetch: bool = False
    # v25: the next tile's first ``next_prefetch`` K-steps asked of L2 by tensor prefetches (one
    # ``cp.async.bulk.prefetch.tensor`` a TMA box), issued by the loader ``np_distance`` steps before it ends a tile
    next_prefetch: int = 0
    np_distance: int = 4
    # v26: the cooperative epilogue deferred into the next tile (128 x 128 tiles of both kinds; v32: or 128 x 256,
    # one accumulator a warpgroup, 32 KB buffers): 1 the finished
    # tile's bf16 half-tile kept in registers and written through the shared buffer to its TMA stores beside the next
    # tile's first MMA; 2 only its TMA stores issued there (the shared buffer written at the tile's end, as before)
    epi_defer: int = 0
    # v26: every other tile of a program walks its K-steps from the last back (the loader alone: the consumers take
    # the stages in order whatever they hold), so that a tile's first loads read the rows its predecessor read last
    serpentine: bool = False
    # v27: the cooperative epilogue stored from registers (``st.global`` in the accumulator's layout, no shared
    # buffers: 32 KB freed, so a 7th stage of 128x128 blocks fits): 1 at the tile's end, 2 beside the next tile's
    # first MMA (``_consumer_defer``); host descriptors for the loads, the outputs' plain pointers for the stores
    epi_global: int = 0
    # v33: ``epi_global``'s stores in 16-byte rows: each warp's part of the half-tile moved within the warp by shuffles
    # so that a lane holds 8 consecutive columns (``_store_rows``), and a warp's store writes four whole 128-byte lines
    # (v27's 4-byte stores touched 8 rows of 16 bytes each); passed to the kernel as EPI_G's bit 4
    epi_vec: bool = False
    # v28: during the program's first tile (every program's first pass over cold inputs, in lockstep) the loader asks
    # L2 for the K-step ``first_ahead`` steps ahead of each step it loads (one ``cp.async.bulk.prefetch.tensor`` a
    # TMA box, the boxes its loads will read), so that the first pass's loads are served from L2, as with a warm L2
    first_ahead: int = 0
    # v34: after issuing the ring's first stage, the loader sleeps ``first_delay`` ns (``nanosleep``) before the
    # next stages' loads, so that the first stage's 32 KB do not share the SMs' intake with the five behind it
    first_delay: int = 0
    # v36: the program's first tile's first ``first_prefetch`` K-steps asked of L2 (one tensor prefetch a TMA box) at
    # its entry, before the barriers' inits and the partitions' start: the first fill's DRAM reads leave ~0.3 us
    # before the loader's first loads (item 35: the first data waits for DRAM)
    first_prefetch: int = 0
    # v37: where the plan shares programs and runs grad_attn tiles first (M = 1024-2048), the upper half of the
    # programs runs its grad_weight tiles first (the same tiles, in the other order), so that no tile boundary comes
    # to every SM at once; each half stays in step with its own neighbours (the kernel's GA_FIRST 2)
    stagger: bool = False
    # v29: programs 2c and 2c + 1 (tiles of one column block in the grouped order) run as a 2-CTA cluster and share
    # each K-step's B block (weight's or reshaped's 128 columns): from the ring's second pass on, each CTA loads one of
    # its two 64-column boxes by multicast TMA into both CTAs' stages (24 KB a step an SM from L2 instead of 32), and a
    # stage goes back to either loader once both CTAs' consumers have released it. 2 (a diagnostic, v29 run c): the
    # same cluster, handshake and stage released to both loaders, but every box loaded locally (no multicast): what
    # the coupling of the pair's rings costs alone. 3 / 4 (v29 run d): 1 with the loader's waits for its empty stages
    # (3), and the consumers' for their full ones too (4), spinning on ``mbarrier.test_wait`` instead of ``try_wait``
    multicast: int = 0
    # v30: stream-K on one program an SM: one kind of tile whole (strided over the programs), the other kind's
    # K-steps, all its tiles' in a row, split evenly over the programs, so that every program runs the same number of
    # K-steps (within one) instead of whole tiles (128 programs of 64 steps at M = 1024, where 132 would run 62.06); a
    # tile split between two programs is joined through an fp32 workspace (``stream_k_kind`` says where it applies;
    # elsewhere the same configuration without it runs). Its own entry, ``gluon_bwd_kernel_sk``
    stream_k: bool = False
    # v38: two programs an SM, each one consumer warpgroup running whole tiles (ping-pong's consumer without the other
    # warpgroup or the turns) beside its loader warp, ``stages`` ring stages each (the epilogue in the tile's held last
    # stage): one program's epilogue, first wait and boundary run while the other program on the SM issues MMAs, with
    # no barrier between them (the kernel's PINGPONG 3; compiled with ``maxnreg`` 128 so that two fit an SM's registers)
    solo: bool = False
    sk_order: str = "interleaved"  # v30 run b: the stream's tiles "interleaved" (``stream_k_interleave``) or "linear"

    def __post_init__(self) -> None:
        if self.sk_order not in ("interleaved", "linear"):
            raise ValueError(f"sk_order {self.sk_order!r}: 'interleaved' or 'linear'")
        if self.stream_k and (
            not self.host_desc
            or self.bk != 64
            or self.ga_bm != 128
            or self.gw_bm != 128
            or self.ga_bn != self.gw_bn
            or self.hold_release != 1
            or self.multicast
            or self.switches_on()
        ):
            raise ValueError(
                "stream_k: cooperative 128-row tiles of one width for both kinds, host descriptors, bk 64 (lazy_init "
                f"may be on; none of the other schedules' switches; on: {', '.join(self.switches_on()) or 'none'})"
            )
        if self.bk not in (32, 64) or (self.bk != 64 and (not self.host_desc or self.pingpong or self.epi_hold)):
            raise ValueError(f"bk {self.bk}: 64, or 32 with host descriptors, cooperative, no held stage")
        if self.k_rotate < 0:
            raise ValueError(f"k_rotate {self.k_rotate}: >= 0")
        if (self.tmap_prefetch or self.next_prefetch) and not self.host_desc:
            raise ValueError("tmap_prefetch / next_prefetch: host descriptors (they name the kernel's parameters)")
        if self.epi_defer not in (0, 1, 2) or (
            self.epi_defer
            and (
                self.epi_hold
                or self.pingpong
                or self.halves
                or self.ga_bm != 128
                or self.ga_bn != self.gw_bn
                or self.gw_bn not in (128, 256)
            )
        ):
            raise ValueError(
                "epi_defer 0-2: cooperative 128x128 or 128x256 tiles, one width for both kinds (no epi_hold, "
                "ping-pong, halves)"
            )
        if self.epi_global not in (0, 1, 2) or (
            self.epi_global
            and (
                self.epi_hold
                or self.pingpong
                or self.halves
                or self.epi_defer
                or not self.host_desc
                or self.bk != 64
                or (self.ga_bm, self.ga_bn, self.gw_bn) != (128, 128, 128)
            )
        ):
            raise ValueError(
                "epi_global 0-2: cooperative 128x128 tiles of both kinds, host descriptors, bk 64 (no epi_hold, "
                "ping-pong, halves, epi_defer)"
            )
        if self.first_prefetch not in range(5) or (self.first_prefetch and (not self.host_desc or self.k_rotate)):
            raise ValueError(f"first_prefetch {self.first_prefetch}: 0-4 K-steps, host descriptors, no k_rotate")
        if not 0 <= self.first_delay <= 10_000 or (self.first_delay and not self.host_desc):
            raise ValueError(f"first_delay {self.first_delay}: 0-10000 ns, host descriptors")
        if self.stagger and (self.pingpong or self.epi_defer or self.epi_global == 2 or self.gw_first):
            raise ValueError("stagger: the cooperative consumers (no ping-pong, deferred epilogue, gw_first)")
        if self.epi_vec and not self.epi_global:
            raise ValueError("epi_vec: the stores from registers of epi_global 1 or 2")
        if self.first_ahead < 0 or (self.first_ahead and (not self.host_desc or self.k_rotate or self.serpentine)):
            raise ValueError(f"first_ahead {self.first_ahead}: >= 0 K-steps, host descriptors, no k_rotate/serpentine")
        if self.multicast not in range(5) or (
            self.multicast
            and (
                not self.host_desc
                or self.bk != 64
                or (self.ga_bm, self.ga_bn, self.gw_bm, self.gw_bn) != (128, 128, 128, 128)
                or self.group % 2
                or self.lazy_init
                or self.switches_on()
            )
        ):
            raise ValueError(
                "multicast 0-4: cooperative 128x128 tiles of both kinds, host descriptors, bk 64, an even group, the "
                f"ring's inits eager (no lazy_init) and none of the other schedules' switches (on: "
                f"{', '.join(self.switches_on()) or 'none'})"
            )
        if self.serpentine and (self.k_rotate or self.next_prefetch or self.l2_prefetch):
            raise ValueError("serpentine: not with k_rotate or the prefetches (they assume tiles walked forwards)")
        if self.next_prefetch not in range(5) or self.np_distance < 1 or (self.next_prefetch and self.k_rotate):
            raise ValueError(f"next_prefetch {self.next_prefetch}: 0-4 K-steps, np_distance >= 1, no k_rotate")
        if self.l2_prefetch not in range(32) or self.pf_distance < 1:
            raise ValueError(f"l2_prefetch {self.l2_prefetch}: bit flags 1, 2, 4, 8, 16 (0-31); pf_distance >= 1")
        if self.halves and (
            self.epi_hold or self.pingpong or self.ga_bm != 128 or self.gw_bn != 256 or self.ga_bn not in (128, 256)
        ):
            raise ValueError("halves: cooperative 128x256 grad_weight tiles (no epi_hold, no ping-pong)")
        if self.hold_release < 1 or (self.hold_release > 1 and self.hold_release > self.stages - 1):
            raise ValueError(f"hold_release {self.hold_release}: must be 1, or at most stages - 1 ({self.stages - 1})")
        if self.solo and (
            not self.pingpong
            or self.pp_gw_only
            or self.pp_depth != 1
            or not self.host_desc
            or self.stages > 3
            or self.ga_bm != 128
            or self.multicast
            or self.stream_k
        ):
            raise ValueError("solo: ping-pong of 128-row tiles, pp_depth 1, host descriptors, at most 3 stages")
        if self.hold_release > 1 and (self.pingpong_mode == 1 or not (self.epi_hold or self.pingpong_mode == 2)):
            raise ValueError("hold_release > 1 needs the cooperative held stage (epi_hold, or pp_gw_only)")

    def switches_on(self) -> list[str]:
        """The schedules' switches (``SCHEDULE_SWITCHES``) this configuration turns on."""
        return [name for name in SCHEDULE_SWITCHES if getattr(self, name)]

    @property
    def pingpong_mode(self) -> int:
        """The kernel's PINGPONG: 0 cooperative, 1 ping-pong, 2 ping-pong in the grad_weight programs only, 3 one
        warpgroup a program, two programs an SM (``solo``)."""
        if self.solo:
            return 3
        return 2 if (self.pingpong and self.pp_gw_only) else int(self.pingpong)

    @property
    def programs_per_sm(self) -> int:
        """Programs launched per SM: two with ``solo``, one otherwise."""
        return 2 if self.solo else 1

    @property
    def maxnreg(self) -> int | None:
        """The compile's register cap per thread (``solo``: two programs of 256 threads in 64K registers)."""
        return 128 if self.solo else None

    def kernel_config(self) -> KernelConfig:
        """The tile-language configuration with the same tiles: what ``plan_schedule`` reads."""
        return KernelConfig(self.ga_bm, self.ga_bn, self.gw_bm, self.gw_bn, self.bk, schedule=self.schedule)


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
    256: (GluonConfig(64, 128, 128, 128, stages=7, host_desc=True, pingpong=True, lazy_init=True), True),
    512: (GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, lazy_init=True), True),
    1024: (GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, lazy_init=True), True),
    2048: (GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, lazy_init=True), True),
    4096: (GluonConfig(128, 256, 128, 256, host_desc=True), True),
    8192: (GluonConfig(128, 256, 128, 256, host_desc=True), True),
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
        """Arrivals that release a stage: one warpgroup in ping-pong proper and solo (PINGPONG 1, 3), both otherwise."""
        return 1 if pingpong == 1 or pingpong == 3 else 2

    @gluon.constexpr_function
    def _buffer_passes(nsplit: int, epi_g: int) -> int:
        """The cooperative epilogue's passes through the shared buffer: one per accumulator (NSPLIT), none when the
        half-tile is stored from registers (EPI_G)."""
        return 0 if epi_g else nsplit

    @gluon.constexpr_function
    def _desc_address(i: int) -> str:
        """PTX that puts the generic address of the host-descriptor entry's descriptor ``i`` (0 go_a, 1 w_b, 2 go_t,
        3 x_b, 4 ga_out, 5 gw_out) into register ``d``, as Triton's own TMA instructions address it."""
        return f"mov.b64 d, {HOST_DESC_ENTRY}_param_{i * DESC_PARAMS}; cvta.param.u64 d, d; "

    @gluon.constexpr_function
    def _tmap_prefetch_asm() -> str:
        """Every descriptor's ``prefetch.tensormap``, from one elected thread of the first warp."""
        each = "".join(_desc_address(i) + "@p prefetch.tensormap [d]; " for i in range(6))
        return (
            "{ .reg .pred p, q; .reg .b32 t; .reg .b64 d; mov.u32 t, %tid.x; setp.lt.u32 q, t, 32; "
            "elect.sync _|p, 0xffffffff; and.pred p, p, q; " + each + "mov.u32 $0, 0; }"
        )

    @gluon.constexpr_function
    def _box_prefetch_asm(i: int) -> str:
        """A ``cp.async.bulk.prefetch.tensor`` of descriptor ``i``'s box at (row $2, column $1), from one elected
        thread of the warp (fire and forget: the box lands in L2 only)."""
        return (
            "{ .reg .pred p; .reg .b64 d; elect.sync _|p, 0xffffffff; "
            + _desc_address(i)
            + "@p cp.async.bulk.prefetch.tensor.2d.L2.global.tile [d, {$1, $2}]; mov.u32 $0, 0; }"
        )

    @gluon.constexpr_function
    def _mc_signal_asm() -> str:
        """MC (v29): the warp's elected lane adds 1 to the cluster's launch counter at $1 (release, GPU scope: the
        CTA's mbarrier inits before it); every lane gets the counter's value before the add. The lane is elected,
        not read: a ``%laneid`` or ``%tid`` read inside a partition's inline PTX makes ptxas give up the loader's
        uniform registers (a waterfall loop around its TMAs and mbarrier inits; kernel/NOTES.md item 30)."""
        return (
            "{ .reg .pred p; .reg .b32 o, l; mov.u32 o, 0; elect.sync l|p, 0xffffffff; "
            "@p atom.add.release.gpu.global.u32 o, [$1], 1; shfl.sync.idx.b32 $0, o, l, 0x1f, 0xffffffff; }"
        )

    @gluon.constexpr_function
    def _mc_load_asm(i: int, b_off: int, rdy_off: int, stage_bytes: int, box_bytes: int) -> str:
        """MC: from one elected thread, descriptor ``i``'s box at (row $2, column $1) multicast into both CTAs of
        the cluster: into box $4 of stage $3's B block (the ring at ``b_off`` into the dynamic shared memory,
        ``stage_bytes`` a stage, ``box_bytes`` a box), completing on each CTA's ready barrier of the stage (at
        ``rdy_off``, 8 bytes a stage): the same offsets in both CTAs, as the multicast addresses them."""
        return (
            "{ .reg .pred p; .reg .b32 g, a, m; .reg .b64 d; .reg .b16 k; elect.sync _|p, 0xffffffff; "
            + _desc_address(i)
            + f"mov.u32 g, global_smem; mul.lo.u32 a, $3, {stage_bytes}; mad.lo.u32 a, $4, {box_bytes}, a; "
            f"add.u32 a, a, {b_off}; add.u32 a, a, g; mul.lo.u32 m, $3, 8; add.u32 m, m, {rdy_off}; "
            "add.u32 m, m, g; mov.u16 k, 3; "
            "@p cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
            "[a], [d, {$1, $2}], [m], k; mov.u32 $0, 0; }"
        )

    @gluon.constexpr_function
    def _mc_arrive_asm(emp_off: int) -> str:
        """MC: the warpgroup's first thread ($1 == 0) arrives on the peer CTA's empty barrier of stage $2
        (``emp_off`` into its dynamic shared memory, 8 bytes a stage; ``mapa`` to the address in the peer, CTA rank
        $3 of the cluster). The arrival's default semantics (release at CTA scope), as CUTLASS's
        ``ClusterBarrier::arrive(cta_id)``: the stage's reads are the retired wgmma's; v29 run a's
        ``.release.cluster`` cost ~0.55 us an arrival (a cluster-scope fence each). Thread and rank come in as
        operands (no special register read in the PTX: see ``_mc_signal_asm``)."""
        return (
            "{ .reg .pred p; .reg .b32 t, a, r; setp.eq.u32 p, $1, 0; "
            f"mov.u32 a, global_smem; mul.lo.u32 t, $2, 8; add.u32 t, t, {emp_off}; add.u32 a, a, t; "
            "mapa.shared::cluster.u32 r, a, $3; @p mbarrier.arrive.shared::cluster.b64 _, [r]; mov.u32 $0, 0; }"
        )

    @gluon.constexpr_function
    def _spin_wait_asm(off: int) -> str:
        """MC 3-4 (v29 run d): wait for parity $2 of the mbarrier of stage $1 (``off`` into the dynamic shared
        memory, 8 bytes a stage) by spinning on ``mbarrier.test_wait`` (never suspended), instead of the
        ``try_wait`` loop Gluon's ``mbarrier.wait`` is."""
        return (
            "{ .reg .pred p; .reg .b32 a, t; mov.u32 a, global_smem; mul.lo.u32 t, $1, 8; "
            f"add.u32 t, t, {off}; add.u32 a, a, t; "
            "MC_SPIN: mbarrier.test_wait.parity.shared::cta.b64 p, [a], $2; @!p bra MC_SPIN; mov.u32 $0, 0; }"
        )

    @gluon.jit
    def _spin_wait(s, parity, OFF: gl.constexpr):
        gl.inline_asm_elementwise(_spin_wait_asm(OFF), "=r,r,r", [s, parity], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _acquire(flag):
        """The int32 at ``flag``, by an acquire at GPU scope (every thread that runs it; no branch in the PTX)."""
        return gl.inline_asm_elementwise("ld.acquire.gpu.global.u32 $0, [$1];", "=r,l", [flag], dtype=gl.int32,
                                         is_pure=False, pack=1)  # fmt: skip

    @gluon.jit
    def _mc_signal(flag):
        """MC: the loader warp's add to the cluster's launch counter (``_mc_signal_asm``); the value before it."""
        return gl.inline_asm_elementwise(_mc_signal_asm(), "=r,l", [flag], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _mc_wait(flag, old):
        """MC: wait until the cluster's launch counter has both CTAs' adds of this launch: at least (old | 1) + 1,
        ``old`` the value this CTA's add found (each launch adds 2; compared by difference, so a wrapped counter
        still works): an acquire a try, ``_acquire``, as stream-K's flag waits."""
        target = (old | 1) + 1
        v = _acquire(flag)
        while v - target < 0:
            v = _acquire(flag)

    @gluon.jit
    def _mc_load(
        DESC: gl.constexpr, row, col, s, rank, B_OFF: gl.constexpr, RDY_OFF: gl.constexpr,
        STAGE_BYTES: gl.constexpr, BOX_BYTES: gl.constexpr,
    ):  # fmt: skip
        gl.inline_asm_elementwise(_mc_load_asm(DESC, B_OFF, RDY_OFF, STAGE_BYTES, BOX_BYTES), "=r,r,r,r,r",
                                  [col, row, s, rank], dtype=gl.int32, is_pure=False, pack=1)  # fmt: skip

    @gluon.jit
    def _mc_arrive(s, EMP_OFF: gl.constexpr):
        thread = gl.arange(0, 128, layout=gl.BlockedLayout([1], [32], [4], [0]))
        peer = 1 - gl.program_id(0) % 2  # the cluster's other CTA (2 CTAs a cluster along the 1-D grid)
        gl.inline_asm_elementwise(_mc_arrive_asm(EMP_OFF), "=r,r,r,r", [thread, s, peer], dtype=gl.int32,
                                  is_pure=False, pack=1)  # fmt: skip

    @gluon.jit
    def _mc_fence_init():
        """MC: the CTA's mbarrier inits made visible to the cluster (the peer's multicasts and arrivals)."""
        gl.inline_asm_elementwise("fence.mbarrier_init.release.cluster; mov.u32 $0, 0;", "=r", [], dtype=gl.int32,
                                  is_pure=False, pack=1)  # fmt: skip

    @gluon.jit
    def _release(empty, s, use, sync, MC: gl.constexpr = 0, EMP_OFF: gl.constexpr = 0):
        """A cooperative warpgroup's release of stage ``s`` (its ``use``-th fill, 0-based) to the loader; with MC to
        the peer CTA's loader too (its multicasts write into this CTA's stage), the first time only once this CTA's
        loader has seen the peer's mbarriers initialised (``sync`` [3])."""
        mbarrier.arrive(empty.index(s), count=1)
        if MC:
            if use == 0:
                mbarrier.wait(sync.index(3), 0)
            _mc_arrive(s, EMP_OFF)

    @gluon.jit
    def _nanosleep(NS: gl.constexpr):
        """FD (v34): the calling warp suspended for about NS ns (``nanosleep``: between 0 and 2 NS)."""
        gl.inline_asm_elementwise(f"nanosleep.u32 {NS}; mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False,
                                  pack=1)  # fmt: skip

    @gluon.jit
    def _tmap_prefetch():
        """TMPF (v25): the six descriptors asked of the TMA unit's descriptor cache before anything uses them."""
        gl.inline_asm_elementwise(_tmap_prefetch_asm(), "=r", [], dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _box_prefetch(DESC: gl.constexpr, row, col):
        gl.inline_asm_elementwise(_box_prefetch_asm(DESC), "=r,r,r", [col, row], dtype=gl.int32, is_pure=False,
                                  pack=1)  # fmt: skip

    @gluon.jit
    def _tile_prefetch(
        IS_GA: gl.constexpr, t, n_ga_m, M, NXPF: gl.constexpr, HID: gl.constexpr, GA_BM: gl.constexpr,
        GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr, BK: gl.constexpr, GROUP: gl.constexpr,
    ):  # fmt: skip
        """NXPF (v25): the first NXPF K-steps of tile ``t`` (a grad_attn one if IS_GA) asked of L2, box by box as the
        loader will load them (grad_weight's rows past M are left out)."""
        if IS_GA:
            am, an = _tile_coords(t, n_ga_m, HID // GA_BN, GROUP)
            for i in gl.static_range(NXPF):
                _box_prefetch(0, am * GA_BM, i * BK)
                for j in gl.static_range(GA_BN // 64):
                    _box_prefetch(1, i * BK, an * GA_BN + j * 64)
        else:
            wm, wn = _tile_coords(t, HID // GW_BM, HID // GW_BN, GROUP)
            for i in gl.static_range(NXPF):
                if i * BK < M:
                    for j in gl.static_range(GW_BM // 64):
                        _box_prefetch(2, i * BK, wm * GW_BM + j * 64)
                    for j in gl.static_range(GW_BN // 64):
                        _box_prefetch(3, i * BK, wn * GW_BN + j * 64)

    @gluon.jit
    def _first_tile_prefetch(
        M, n_ga_m, P_GA, GA_FIRST: gl.constexpr, HID: gl.constexpr, GA_BM: gl.constexpr, GA_BN: gl.constexpr,
        GW_BM: gl.constexpr, GW_BN: gl.constexpr, BK: gl.constexpr, GROUP: gl.constexpr, FPF: gl.constexpr,
    ):  # fmt: skip
        """FPF (v36): the program's first tile's first FPF K-steps asked of L2: the first kind's first tile, or the
        other kind's where the program has none of the first (``_next_tile_prefetch``'s choice, from the start)."""
        ga_lo, _, n_ga, gw_lo, _, n_gw = _program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
        if GA_FIRST:
            _next_tile_prefetch(True, ga_lo, n_ga, True, gw_lo, n_gw, n_ga_m, M, FPF, HID, GA_BM, GA_BN, GW_BM, GW_BN,
                                BK, GROUP)  # fmt: skip
        else:
            _next_tile_prefetch(False, gw_lo, n_gw, True, ga_lo, n_ga, n_ga_m, M, FPF, HID, GA_BM, GA_BN, GW_BM,
                                GW_BN, BK, GROUP)  # fmt: skip

    @gluon.jit
    def _next_tile_prefetch(
        IS_GA: gl.constexpr, t_next, n_kind, OTHER_FOLLOWS: gl.constexpr, other_lo, n_other, n_ga_m, M,
        NXPF: gl.constexpr, HID: gl.constexpr, GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr,
        GW_BN: gl.constexpr, BK: gl.constexpr, GROUP: gl.constexpr,
    ):  # fmt: skip
        """NXPF: the program's next tile asked of L2 from a tile of the kind IS_GA says: ``t_next`` of the same kind
        while one is left (``< n_kind``), else, where the other kind's phase follows, that kind's first tile."""
        if t_next < n_kind:
            _tile_prefetch(IS_GA, t_next, n_ga_m, M, NXPF, HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, GROUP)
        elif OTHER_FOLLOWS and other_lo < n_other:
            _tile_prefetch(not IS_GA, other_lo, n_ga_m, M, NXPF, HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, GROUP)

    @gluon.jit
    def _bulk_prefetch(ptrs, sizes):
        """Each thread asks L2 for ``sizes`` bytes (a multiple of 16; 0: nothing) from its pointer in ``ptrs``: one
        ``cp.async.bulk.prefetch.L2`` each, fire and forget."""
        gl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r",
            [ptrs, sizes],
            dtype=gl.int32,
            is_pure=False,
            pack=1,
        )

    @gluon.jit
    def _l2_prefetch(base, n_bytes, part, parts, WARPS: gl.constexpr):
        """Ask L2 for share ``part`` of ``parts`` of the bytes [0, n_bytes) from ``base`` (2-byte elements): one
        bulk prefetch of a 128-byte-aligned chunk a thread of the WARPS warps running this."""
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
        lane = gl.arange(0, 32 * WARPS, layout=lay)
        chunk = gl.cdiv(gl.cdiv(n_bytes, parts * (32 * WARPS)), 128) * 128
        start = (part * (32 * WARPS) + lane) * chunk
        size = gl.minimum(gl.maximum(n_bytes - start, 0), chunk)
        start = gl.minimum(start, n_bytes - 16)  # a skipped thread's address stays inside the tensor
        _bulk_prefetch(base + start // 2, size)

    @gluon.jit
    def _l2_prefetch_lines(base, rows, stride, part, parts, WARPS: gl.constexpr):
        """Ask L2 for one 128-byte line of each of ``rows`` rows ``stride`` elements apart from ``base``: share
        ``part`` of ``parts`` of them, a line a thread of the WARPS warps running this at a time."""
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
        lane = gl.arange(0, 32 * WARPS, layout=lay)
        for j in range(0, gl.cdiv(rows, parts * (32 * WARPS))):
            row = (j * parts + part) * (32 * WARPS) + lane
            _bulk_prefetch(base + gl.minimum(row, rows - 1) * stride, gl.where(row < rows, 128, 0))

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
        L2PF: gl.constexpr = 0, pf_go=None, pf_w=None, pf_x=None, PF_D: gl.constexpr = 6, KROT: gl.constexpr = 0,
        boot=None, LAZY: gl.constexpr = False, CONSUMERS: gl.constexpr = 2, NXPF: gl.constexpr = 0,
        NX_D: gl.constexpr = 4, SERP: gl.constexpr = False, FA: gl.constexpr = 0, MC: gl.constexpr = 0,
        MC_B: gl.constexpr = 0, MC_RDY: gl.constexpr = 0, mc_flag=None, MC_EMP: gl.constexpr = 0,
        FD: gl.constexpr = 0,
    ):  # fmt: skip
        """One warp: TMA loads of every K-step of the program's tiles, in order, into the stage ring (with L2PF & 4,
        each grad_attn tile's grad_output rows asked of L2 first; with L2PF & 8, in the program's first tile, its
        share of every program's K-step PF_D steps ahead, after each step's loads; with KROT, each tile's K-steps
        from the program's own offset, around; with LAZY, each stage's mbarriers initialised here as it is first
        filled, and ``boot`` arrived on once all are; with NXPF, NX_D steps before a tile's end, the next tile's
        first NXPF K-steps asked of L2; with SERP, every other tile's K-steps from its last back, so that a tile's
        first loads read the rows the tile before it read last; with FA, in the program's first tile, the boxes of the
        K-step FA steps ahead asked of L2 after each step's loads; with MC, once the ring's first pass is issued the
        cluster's launch counter's handshake (the peer's mbarriers initialised), then with MC 1 one of each B block's
        two boxes multicast into both CTAs of the cluster, the peer's the other, and at the end every stage's last use
        released by both CTAs' consumers before the CTA may exit: no multicast or arrival of the peer's is then still
        to come)."""
        ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw = _program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
        # the prefetch shares: among the programs that run the kind of tile (a partition's own programs)
        pid = gl.program_id(0)
        nprog = gl.num_programs(0)
        ga_part = pid
        ga_parts = nprog
        gw_part = pid
        gw_parts = nprog
        if P_GA > 0:
            ga_parts = P_GA
            gw_part = pid - P_GA
            gw_parts = nprog - P_GA
        n_ga_n: gl.constexpr = HID // GA_BN
        n_gw_n: gl.constexpr = HID // GW_BN
        dtype: gl.constexpr = go_a.dtype
        # The ring is allocated for the larger (grad_weight) blocks; grad_attn stages use a view of the same bytes.
        ga_bytes: gl.constexpr = (GA_BM * BK + BK * GA_BN) * 2
        gw_bytes: gl.constexpr = (BK * GW_BM + BK * GW_BN) * 2
        # NXPF: the K offset of the step after whose loads the next tile is asked of L2 (NX_D steps before the end)
        ga_nx: gl.constexpr = (HID // BK - NX_D if HID // BK > NX_D else 0) * BK
        gw_nx = gl.maximum(gl.cdiv(M, BK) - NX_D, 0) * BK
        nt_s = 0  # SERP: the program's tiles so far (the odd ones walk their K-steps backwards)
        if MC:  # the counter of the cluster (pid // 2), through which the pair says its mbarriers are initialised
            mc_ptr = mc_flag + pid // 2
            rank = pid % 2
        else:
            rank = 0
        B_STAGE: gl.constexpr = BK * (GW_BN if GW_BN >= GA_BN else GA_BN) * 2
        it = 0
        for phase in gl.static_range(2):
            # GA_FIRST 2 (v37, stagger): the upper half of the programs runs its grad_weight tiles first (a condition
            # at run time; a static one otherwise, written in one expression: a constexpr cannot be assigned twice)
            if ((phase == 0) != (pid >= nprog // 2)) if GA_FIRST == 2 else ((phase == 0) == GA_FIRST):
                for t in range(ga_lo, n_ga, ga_step):
                    am, an = _tile_coords(t, n_ga_m, n_ga_n, GROUP)
                    off_m = am * GA_BM
                    off_n = an * GA_BN
                    if L2PF & 4:
                        _l2_prefetch(pf_go + off_m * HID, gl.minimum(M - off_m, GA_BM) * (HID * 2), 0, 1, 1)
                    ahead = it == 0  # the program's first tile: every program walks its first K-steps at once
                    ga_rot = ((pid * KROT) % (HID // BK)) * BK
                    for k0 in range(0, HID, BK):
                        k = k0
                        if KROT > 0:
                            k = (k0 + ga_rot) % HID
                        if SERP:  # every other tile of the program from its last K-step back
                            if nt_s % 2 == 1:
                                k = HID - BK - k0
                        if MC:
                            if it == STAGES:  # the first multicast, and the first wait on the peer's releases
                                _mc_handshake(mc_ptr, boot)
                        s, bar = _next_stage(ready, empty, boot, it, ga_bytes, STAGES, LAZY, CONSUMERS, MC >= 3, MC_EMP)
                        # grad_attn blocks are smaller: a view of the start of stage s (each stage keeps its
                        # bytes whatever kind of tile used it last, so the shared schedule's switch is safe)
                        a_s = a_ring.index(s)._reinterpret(dtype, [GA_BM, BK], go_a.layout)
                        tma.async_copy_global_to_shared(go_a, [off_m, k], bar, a_s)
                        bs = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], w_b.layout)
                        _load_b(w_b, 1, k, off_n, bar, bs, s, it, rank, GA_BN // 64, STAGES, MC and MC != 2, MC_B,
                                MC_RDY, B_STAGE, BK)  # fmt: skip
                        if FA > 0:
                            if ahead and k + FA * BK < HID:  # the same boxes FA steps on, into L2
                                _box_prefetch(0, off_m, k + FA * BK)
                                for j in gl.static_range(GA_BN // 64):
                                    _box_prefetch(1, k + FA * BK, off_n + j * 64)
                        if L2PF & 8:
                            kf = k + PF_D * BK  # weight's rows kf.. (contiguous), grad_output's column slice kf..
                            if ahead and kf < HID:
                                _l2_prefetch(pf_w + kf * HID, BK * (HID * 2), ga_part, ga_parts, 1)
                                _l2_prefetch_lines(pf_go + kf, M, HID, ga_part, ga_parts, 1)
                        if L2PF & 16:  # reshaped, whole, for the grad_weight tiles that follow
                            if ahead and P_GA == 0 and k0 == PF_D * BK:
                                _l2_prefetch(pf_x, M * (HID * 2), pid, nprog, 1)
                        if NXPF > 0:
                            if k0 == ga_nx:  # the program's next tile: a grad_attn one, or its first grad_weight
                                _next_tile_prefetch(True, t + ga_step, n_ga, GA_FIRST, gw_lo, n_gw, n_ga_m, M, NXPF,
                                                    HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, GROUP)  # fmt: skip
                        if FD > 0:
                            if it == 0:
                                _nanosleep(FD)
                        it += 1
                    nt_s += 1
            else:
                for t in range(gw_lo, n_gw, gw_step):
                    wm, wn = _tile_coords(t, HID // GW_BM, n_gw_n, GROUP)
                    off_o = wm * GW_BM
                    off_i = wn * GW_BN
                    ahead = it == 0
                    gw_k = gl.cdiv(M, BK) * BK
                    gw_rot = ((pid * KROT) % gl.cdiv(M, BK)) * BK
                    for k0 in range(0, M, BK):  # rows past M are zero-filled by the descriptor
                        k = k0
                        if KROT > 0:
                            k = (k0 + gw_rot) % gw_k
                        if SERP:
                            if nt_s % 2 == 1:
                                k = gw_k - BK - k0
                        if MC:
                            if it == STAGES:
                                _mc_handshake(mc_ptr, boot)
                        s, bar = _next_stage(ready, empty, boot, it, gw_bytes, STAGES, LAZY, CONSUMERS, MC >= 3, MC_EMP)
                        As = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], go_t.layout)
                        for j in gl.static_range(GW_BM // 64):
                            tma.async_copy_global_to_shared(go_t, [k, off_o + j * 64], bar, As.slice(j * 64, 64, dim=1))
                        bs = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], x_b.layout)
                        _load_b(x_b, 3, k, off_i, bar, bs, s, it, rank, GW_BN // 64, STAGES, MC and MC != 2, MC_B,
                                MC_RDY, B_STAGE, BK)  # fmt: skip
                        if FA > 0:
                            if ahead and k + FA * BK < M:
                                for j in gl.static_range(GW_BM // 64):
                                    _box_prefetch(2, k + FA * BK, off_o + j * 64)
                                for j in gl.static_range(GW_BN // 64):
                                    _box_prefetch(3, k + FA * BK, off_i + j * 64)
                        if L2PF & 16:  # weight, whole, for the grad_attn tiles that follow
                            if ahead and P_GA == 0 and k0 == PF_D * BK:
                                _l2_prefetch(pf_w, HID * (HID * 2), pid, nprog, 1)
                        if L2PF & 8:
                            kf = k + PF_D * BK  # the rows kf.. of grad_output and of reshaped (contiguous)
                            if ahead and kf < M:
                                rows = gl.minimum(M - kf, BK)
                                _l2_prefetch(pf_go + kf * HID, rows * (HID * 2), gw_part, gw_parts, 1)
                                _l2_prefetch(pf_x + kf * HID, rows * (HID * 2), gw_part, gw_parts, 1)
                        if NXPF > 0:
                            if k0 == gw_nx:  # the program's next tile: a grad_weight one, or its first grad_attn
                                _next_tile_prefetch(False, t + gw_step, n_gw, not GA_FIRST, ga_lo, n_ga, n_ga_m, M,
                                                    NXPF, HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, GROUP)  # fmt: skip
                        if FD > 0:
                            if it == 0:
                                _nanosleep(FD)
                        it += 1
                    nt_s += 1
        if LAZY:  # a program of fewer steps than stages: the rest initialised, and the consumers let go
            for i in range(it, STAGES):
                _lazy_init(ready, empty, boot, i, i, STAGES, CONSUMERS)
        if MC:
            if it <= STAGES:  # no fill multicast: the handshake still lets the consumers release to the peer
                _mc_handshake(mc_ptr, boot)
            for i in range(it, it + STAGES):  # the tail: each stage's last use released by both CTAs' consumers
                mbarrier.wait(empty.index(i % STAGES), ((i // STAGES) & 1) ^ 1)

    @gluon.jit
    def _mc_handshake(mc_ptr, boot):
        """MC: add 1 to the cluster's launch counter (this CTA's mbarriers are initialised: the add's release orders
        the inits before it) and wait for the peer's add, then tell this CTA's consumers (``boot``) that they may
        arrive on the peer's barriers. Called once the ring's first pass is issued (run b: the add's fence at the
        loader's start held the first loads ~0.5 us)."""
        _mc_wait(mc_ptr, _mc_signal(mc_ptr))
        mbarrier.arrive(boot, count=1)

    @gluon.jit
    def _load_b(
        desc, DESC: gl.constexpr, k, off, bar, bs, s, it, rank, NB: gl.constexpr, STAGES: gl.constexpr,
        SHARE: gl.constexpr, B_OFF: gl.constexpr, RDY_OFF: gl.constexpr, B_STAGE: gl.constexpr, BK: gl.constexpr,
    ):  # fmt: skip
        """Fill ``it``'s B block of NB boxes of 64 columns from ``off`` into ``bs``, all loaded here; with SHARE
        (MC's multicast) so only in the ring's first pass (the peer may not be initialised yet), and after it this
        CTA's box ``rank`` multicast into both CTAs (the peer multicasts the other)."""
        if SHARE:
            if it >= STAGES:
                _mc_load(DESC, k, off + rank * 64, s, rank, B_OFF, RDY_OFF, B_STAGE, BK * 64 * 2)
            else:
                for j in gl.static_range(NB):
                    tma.async_copy_global_to_shared(desc, [k, off + j * 64], bar, bs.slice(j * 64, 64, dim=1))
        else:
            for j in gl.static_range(NB):
                tma.async_copy_global_to_shared(desc, [k, off + j * 64], bar, bs.slice(j * 64, 64, dim=1))

    @gluon.jit
    def _next_stage(
        ready, empty, boot, it, n_bytes: gl.constexpr, STAGES: gl.constexpr, LAZY: gl.constexpr,
        CONSUMERS: gl.constexpr, SPIN: gl.constexpr = False, EMP_OFF: gl.constexpr = 0,
    ):  # fmt: skip
        """The loader's fill ``it``: its stage once the consumers have released it (every stage starts empty: the
        first wait is for parity 1, which a fresh mbarrier has passed), initialised first with LAZY, its ready
        barrier expecting ``n_bytes``. Returns (stage, ready barrier)."""
        s = it % STAGES
        if LAZY:
            _lazy_init(ready, empty, boot, s, it, STAGES, CONSUMERS)
        if SPIN:
            _spin_wait(s, ((it // STAGES) & 1) ^ 1, EMP_OFF)
        else:
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
    def _ga_a_block(a_ring, s, GA_BM: gl.constexpr, BK: gl.constexpr):
        """Stage s's grad_attn A block (GA_BM rows of grad_output, BK deep), in the swizzle its TMA box was loaded
        with: the ring's at BK = 64, a narrower one for rows of BK * 2 < 128 bytes."""
        if BK == 64:
            a = a_ring.index(s)._reinterpret(a_ring.dtype, [GA_BM, BK], a_ring.layout)
        else:
            narrow: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=BK * 2, element_bitwidth=16, rank=2)
            a = a_ring.index(s)._reinterpret(a_ring.dtype, [GA_BM, BK], narrow)
        return a

    @gluon.jit
    def _mma_step(a, b, acc, acc_hi, QN: gl.constexpr, NSPLIT: gl.constexpr):
        """A cooperative K-step's MMAs, the step before's retired on return (its stage may be released): one
        accumulator, or (NSPLIT = 2, ``halves``) two, ``acc`` on b's first QN columns and ``acc_hi`` on the rest."""
        if NSPLIT == 2:
            acc = warpgroup_mma(a, b.slice(0, QN, dim=1), acc, is_async=True)
            acc_hi = warpgroup_mma(a, b.slice(QN, QN, dim=1), acc_hi, is_async=True)
            acc, acc_hi = warpgroup_mma_wait(2, deps=(acc, acc_hi))
        else:
            acc = warpgroup_mma(a, b, acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc,))
        return acc, acc_hi

    @gluon.jit
    def _epilogue_pass(epi, acc, acc_hi, q: gl.constexpr, dtype: gl.constexpr):
        """Pass q of a cooperative epilogue (one per accumulator): once pass q - 1's TMA stores have read the
        buffer, its accumulator (``acc``, then ``acc_hi``) into ``epi``, fenced for the TMA stores that follow."""
        if q > 0:
            tma.store_wait(0)
            gl.thread_barrier()
        if q == 0:
            epi.store(acc.to(dtype))
        else:
            epi.store(acc_hi.to(dtype))
        fence_async_shared()
        gl.thread_barrier()

    @gluon.jit
    def _swap_bits(p, MASK: gl.constexpr, SDIM: gl.constexpr, SBIT: gl.constexpr, DIM: gl.constexpr, BIT: gl.constexpr):
        """EPI_G & 4: one exchange of ``_store_rows``: the lane bit MASK (whose lanes hold bit SBIT of the index of dim
        SDIM) swaps meaning with the register bit holding bit BIT of dim DIM, each lane trading half of those
        registers with its partner (one ``shfl.sync.bfly`` a pair). The tensor's layout, as Triton sees it, is
        unchanged: what moved is which element each register holds (``_store_rows`` computes where each goes)."""
        R: gl.constexpr = p.type.shape[0]
        Q: gl.constexpr = p.type.shape[1]
        L: gl.constexpr = p.type.layout
        if SDIM == 0:
            sel = gl.arange(0, R, layout=gl.SliceLayout(1, L))[:, None] + gl.zeros([R, Q], gl.int32, L)
        else:
            sel = gl.arange(0, Q, layout=gl.SliceLayout(0, L))[None, :] + gl.zeros([R, Q], gl.int32, L)
        sel = (sel >> SBIT) & 1
        if DIM == 0:
            x = gl.permute(gl.reshape(p, [R >> (BIT + 1), 2, 1 << BIT, Q]), (0, 2, 3, 1))
            s = gl.permute(gl.reshape(sel, [R >> (BIT + 1), 2, 1 << BIT, Q]), (0, 2, 3, 1))
        else:
            x = gl.permute(gl.reshape(p, [R, Q >> (BIT + 1), 2, 1 << BIT]), (0, 1, 3, 2))
            s = gl.permute(gl.reshape(sel, [R, Q >> (BIT + 1), 2, 1 << BIT]), (0, 1, 3, 2))
        a, b = gl.split(x)
        sa, _ = gl.split(s)
        # a lane whose bit is 0 keeps a, sends b, and takes its partner's a as its new b; the partner the reverse
        na, nb = gl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .b32 t; setp.ne.b32 p, $4, 0; selp.b32 t, $2, $3, p; "
            f"shfl.sync.bfly.b32 t, t, {MASK}, 0x1f, -1; "
            "selp.b32 $0, t, $2, p; selp.b32 $1, $3, t, p; }",
            "=r,=r,r,r,r", [a, b, sa], dtype=(gl.int32, gl.int32), is_pure=False, pack=1)  # fmt: skip
        x = gl.join(na, nb)
        if DIM == 0:
            p = gl.reshape(gl.permute(x, (0, 3, 1, 2)), [R, Q])
        else:
            p = gl.reshape(gl.permute(x, (0, 1, 3, 2)), [R, Q])
        return p

    @gluon.jit
    def _store_rows(out_ptr, out, kind, r, c, S, HID: gl.constexpr, HD: gl.constexpr):
        """EPI_G & 4 (v33): ``_store_half`` in 16-byte stores of whole 128-byte lines. The wgmma accumulator layout
        of a 64 x 128 half-tile gives a lane 2 consecutive columns of 2 rows per group of 8 columns; its bf16 pairs
        (one 32-bit register each, index q = column / 2) go through four exchanges within each warp (``_swap_bits``:
        lane bits 0-3, which hold q bits 0-1 and row bits 0-1, trade meaning with the register bits of row 8 and q
        bits 2-4), after which a lane's four registers of one group are 8 consecutive columns and a warp's store
        writes 4 rows of 64 columns: four whole lines, no shared memory (v27 stored 4 bytes, 8 rows of 16 bytes a
        warp's store). tests/kernel/test_gluon.py replays the exchanges on the layout's bits."""
        gl.static_assert(out.type.shape[0] == 64 and out.type.shape[1] == 128, "a 64 x 128 half-tile")
        lo, hi = gl.split(gl.reshape(out, [64, 64, 2]))
        p = (lo.to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF) | (hi.to(gl.int16, bitcast=True).to(gl.int32) << 16)
        p = _swap_bits(p, 1, 1, 0, 0, 3)  # lane bit 0 (q bit 0) <-> the register of row 8
        p = _swap_bits(p, 2, 1, 1, 1, 2)  # lane bit 1 (q bit 1) <-> the register of q bit 2
        p = _swap_bits(p, 4, 0, 0, 1, 3)  # lane bit 2 (row bit 0) <-> the register of q bit 3
        p = _swap_bits(p, 8, 0, 1, 1, 4)  # lane bit 3 (row bit 1) <-> the register of q bit 4
        L: gl.constexpr = p.type.layout
        rr = gl.arange(0, 64, layout=gl.SliceLayout(1, L))[:, None] + gl.zeros([64, 64], gl.int32, L)
        qq = gl.arange(0, 64, layout=gl.SliceLayout(0, L))[None, :] + gl.zeros([64, 64], gl.int32, L)
        # the register bits of row 8 (h) and q bit 2 (v) last: t_hv holds q offset h + 2 v of a 16-byte vector
        x0, x1 = gl.split(gl.permute(gl.reshape(p, [4, 2, 8, 8, 2, 4]), (0, 2, 3, 5, 1, 4)))
        t00, t10 = gl.split(x0)
        t01, t11 = gl.split(x1)
        i, _ = gl.split(gl.split(gl.permute(gl.reshape(rr, [4, 2, 8, 8, 2, 4]), (0, 2, 3, 5, 1, 4)))[0])
        j, _ = gl.split(gl.split(gl.permute(gl.reshape(qq, [4, 2, 8, 8, 2, 4]), (0, 2, 3, 5, 1, 4)))[0])
        row = (i & 52) | ((j >> 3) & 1) | (((j >> 4) & 1) << 1) | ((j & 1) << 3)
        col = 2 * ((((j >> 1) & 1) << 2) | ((i & 1) << 3) | (((i >> 1) & 1) << 4) | (((j >> 5) & 1) << 5))
        if kind == 1:
            offs = (r + row) * HD + (c + col // HD) * S * HD + col % HD
        else:
            offs = (r + row) * HID + c + col
        gl.inline_asm_elementwise(
            "st.global.v4.b32 [$1], {$2, $3, $4, $5}; mov.b32 $0, 0;", "=r,l,r,r,r,r",
            [out_ptr + offs, t00, t10, t01, t11], dtype=gl.int32, is_pure=False, pack=1)  # fmt: skip

    @gluon.jit
    def _store_half(out_ptr, out, kind, r, c, S, HID: gl.constexpr, HD: gl.constexpr, VEC: gl.constexpr = False):
        """EPI_G: a warpgroup's bf16 half-tile ``out`` (64 rows, in the accumulator's layout) stored from its
        registers: ``kind`` 1 grad_attn_output (``r``: the (B*H*S, D) row of the half's first row in head 0, ``c``:
        the head of its first column; column j is head c + j // HD, d = j % HD), 2 grad_weight (row ``r``, column
        ``c``). With VEC (v33), ``_store_rows``: 16-byte stores of whole lines."""
        if VEC:
            _store_rows(out_ptr, out, kind, r, c, S, HID, HD)
        else:
            layout: gl.constexpr = out.type.layout
            WM: gl.constexpr = out.type.shape[0]
            WN: gl.constexpr = out.type.shape[1]
            rows = gl.arange(0, WM, layout=gl.SliceLayout(1, layout))
            cols = gl.arange(0, WN, layout=gl.SliceLayout(0, layout))
            if kind == 1:
                offs = (r + rows)[:, None] * HD + ((c + cols // HD) * S * HD + cols % HD)[None, :]
            else:
                offs = (r + rows)[:, None] * HID + (c + cols)[None, :]
            gl.store(out_ptr + offs, out)

    @gluon.jit
    def _release_held(empty, prev, it, REL: gl.constexpr = 1):
        """EPI_HOLD: the stage ``prev`` (the previous tile's last) held the epilogue; once its TMA stores have read
        it, hand it back to the loader (``REL`` arrivals). Nothing is held before the first tile (it == 0)."""
        if it > 0:
            tma.store_wait(0)
            gl.thread_barrier()
            mbarrier.arrive(empty.index(prev), count=REL)

    @gluon.jit
    def _consumer(
        WG: gl.constexpr,
        ga_out, gw_out,
        a_ring, b_ring, ready, empty, epi, sync,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, EPI_HOLD: gl.constexpr,
        HOLD_REL: gl.constexpr = 1,
        NSPLIT: gl.constexpr = 1,
        EPI_G: gl.constexpr = 0,
        MC: gl.constexpr = 0,
        MC_EMP: gl.constexpr = 0,
        MC_RDY: gl.constexpr = 0,
    ):  # fmt: skip
        """Cooperative: warpgroup WG (0 or 1) runs its half of every tile's MMAs, then its half of the epilogue,
        into its own buffer ``epi`` or (EPI_HOLD) into its part of the tile's last stage (WG 0 the A bytes, WG 1
        the B bytes), which it hands back to the loader only after the next tile's first MMA is issued, or with
        ``HOLD_REL`` > 1 after the next tile's step HOLD_REL (1-based; its last step if the tile is shorter), so
        that the ``wait_group.read`` before the release finds the stores long done.

        Why a later release cannot deadlock the in-order loader: at step j (0-based) of a tile the warpgroup has
        released every earlier use of the ring but the held one (the previous tile's last, H) and the one before
        step j (released after this step's MMA wait); the fill it waits for, H + 1 + j, needs use H + 1 + j -
        STAGES released, which is H itself only at j = STAGES - 1; H is released at step min(HOLD_REL, n) - 1 <=
        STAGES - 2 (``GluonConfig`` keeps HOLD_REL <= STAGES - 1), before that. The model in
        tests/kernel/test_ring_model.py checks it with random interleavings (and that HOLD_REL = STAGES deadlocks)."""
        ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw = _program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
        n_ga_n: gl.constexpr = HID // GA_BN
        n_gw_n: gl.constexpr = HID // GW_BN
        dtype: gl.constexpr = a_ring.dtype  # (EPI_G: ga_out and gw_out are the outputs' pointers)
        # grad_attn: a 128-row tile is split by rows, a 64-row one by columns.
        GA_SPLIT_M: gl.constexpr = GA_BM >= 128
        GA_WM: gl.constexpr = GA_BM // 2 if GA_SPLIT_M else GA_BM
        GA_WN: gl.constexpr = GA_BN if GA_SPLIT_M else GA_BN // 2
        GW_WM: gl.constexpr = GW_BM // 2
        # NSPLIT = 2 (``halves``): each warpgroup's columns as two accumulators (acc: the first half, acc_hi: the
        # second), each written through the epilogue buffer in its own pass
        GA_QN: gl.constexpr = GA_WN // NSPLIT
        GW_QN: gl.constexpr = GW_BN // NSPLIT
        PASSES: gl.constexpr = _buffer_passes(NSPLIT, EPI_G)  # the epilogue's passes through its shared buffer
        ga_layout: gl.constexpr = _wgmma_layout(GA_WM, GA_QN)
        gw_layout: gl.constexpr = _wgmma_layout(GW_WM, GW_QN)
        if WG == 0:
            hold_ring = a_ring
        else:
            hold_ring = b_ring
        it = 0
        prev = 0
        held = 0  # HOLD_REL > 1: the stage of the previous tile's epilogue, released at the step HOLD_REL
        nt = 0  # tiles done (EPI_HOLD: the phase of the warpgroups' rendezvous before the epilogue)
        # HOLD_REL > 1: the K offset of the step (0-based HOLD_REL - 1, or the tile's last) that releases ``held``
        ga_rel: gl.constexpr = (HOLD_REL - 1 if HOLD_REL - 1 < HID // BK else HID // BK - 1) * BK
        gw_rel = gl.minimum(HOLD_REL - 1, gl.cdiv(M, BK) - 1) * BK
        for phase in gl.static_range(2):
            # GA_FIRST 2 (v37, stagger): as the loader, the upper half of the programs grad_weight first
            if (
                ((phase == 0) != (gl.program_id(0) >= gl.num_programs(0) // 2))
                if GA_FIRST == 2
                else ((phase == 0) == GA_FIRST)
            ):
                for t in range(ga_lo, n_ga, ga_step):
                    am, an = _tile_coords(t, n_ga_m, n_ga_n, GROUP)
                    off_m = am * GA_BM
                    off_n = an * GA_BN
                    acc = gl.zeros([GA_WM, GA_QN], gl.float32, ga_layout)
                    acc_hi = gl.zeros([GA_WM, GA_QN], gl.float32, ga_layout)
                    for k in range(0, HID, BK):
                        s = it % STAGES
                        if MC == 4:
                            _spin_wait(s, (it // STAGES) & 1, MC_RDY)
                        else:
                            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                        a = _ga_a_block(a_ring, s, GA_BM, BK)
                        b = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], b_ring.layout)
                        if GA_SPLIT_M:
                            a = a.slice(WG * GA_WM, GA_WM, dim=0)
                        else:
                            b = b.slice(WG * GA_WN, GA_WN, dim=1)
                        acc, acc_hi = _mma_step(a, b, acc, acc_hi, GA_QN, NSPLIT)
                        if EPI_HOLD and HOLD_REL > 1:
                            if k > 0:
                                mbarrier.arrive(empty.index(prev), count=1)
                            if k == ga_rel:
                                _release_held(empty, held, nt)
                        elif k > 0:
                            _release(empty, prev, it - 1, sync, MC, MC_EMP)
                        elif EPI_HOLD:
                            _release_held(empty, prev, it)
                        prev = s
                        it += 1
                    if NSPLIT == 2:
                        acc, acc_hi = warpgroup_mma_wait(0, deps=(acc, acc_hi))
                    else:
                        acc = warpgroup_mma_wait(0, deps=(acc,))
                    if EPI_HOLD and HOLD_REL > 1:
                        held = prev
                    if EPI_HOLD:
                        # both warpgroups' MMAs on the stage are done before either writes into it
                        mbarrier.arrive(sync.index(0), count=1)
                        mbarrier.wait(sync.index(0), nt & 1)
                        epi_ga = hold_ring.index(prev)._reinterpret(dtype, [GA_WM, GA_WN], hold_ring.layout)
                    else:
                        _release(empty, prev, it - 1, sync, MC, MC_EMP)
                        if not EPI_G:
                            epi_ga = epi._reinterpret(dtype, [GA_WM, GA_QN], epi.layout)
                            tma.store_wait(0)  # the previous tile's store has left the buffer
                            gl.thread_barrier()
                    nt += 1
                    # Epilogue: this warpgroup's rows r0.. of the tile, columns c0.. (whole heads of HD columns).
                    r0 = off_m + WG * GA_WM * GA_SPLIT_M
                    c0 = off_n + WG * GA_WN * (1 - GA_SPLIT_M)
                    b0 = r0 // S
                    row0 = b0 * (NH - 1) * S + r0  # (b*NH)*S + s = b*(NH-1)*S + m
                    if EPI_G:
                        _store_half(ga_out, acc.to(dtype), 1, row0, c0 // HD, S, HID, HD, EPI_G >= 4)
                    for q in gl.static_range(PASSES):  # through the buffer, one per accumulator
                        _epilogue_pass(epi_ga, acc, acc_hi, q, dtype)
                        for j in gl.static_range(GA_QN // HD):
                            h = c0 // HD + q * (GA_QN // HD) + j
                            tma.async_copy_shared_to_global(ga_out, [row0 + h * S, 0], epi_ga.slice(j * HD, HD, dim=1))
            else:
                for t in range(gw_lo, n_gw, gw_step):
                    wm, wn = _tile_coords(t, HID // GW_BM, n_gw_n, GROUP)
                    off_o = wm * GW_BM
                    off_i = wn * GW_BN
                    acc = gl.zeros([GW_WM, GW_QN], gl.float32, gw_layout)
                    acc_hi = gl.zeros([GW_WM, GW_QN], gl.float32, gw_layout)
                    for k in range(0, M, BK):
                        s = it % STAGES
                        if MC == 4:
                            _spin_wait(s, (it // STAGES) & 1, MC_RDY)
                        else:
                            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                        a = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], a_ring.layout)
                        a = a.slice(WG * GW_WM, GW_WM, dim=1).permute((1, 0))
                        b = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], b_ring.layout)
                        acc, acc_hi = _mma_step(a, b, acc, acc_hi, GW_QN, NSPLIT)
                        if EPI_HOLD and HOLD_REL > 1:
                            if k > 0:
                                mbarrier.arrive(empty.index(prev), count=1)
                            if k == gw_rel:  # a tile shorter than HOLD_REL steps: at its last step
                                _release_held(empty, held, nt)
                        elif k > 0:
                            _release(empty, prev, it - 1, sync, MC, MC_EMP)
                        elif EPI_HOLD:
                            _release_held(empty, prev, it)
                        prev = s
                        it += 1
                    if NSPLIT == 2:
                        acc, acc_hi = warpgroup_mma_wait(0, deps=(acc, acc_hi))
                    else:
                        acc = warpgroup_mma_wait(0, deps=(acc,))
                    if EPI_HOLD and HOLD_REL > 1:
                        held = prev
                    if EPI_HOLD:
                        mbarrier.arrive(sync.index(0), count=1)
                        mbarrier.wait(sync.index(0), nt & 1)
                        epi_gw = hold_ring.index(prev)._reinterpret(dtype, [GW_WM, GW_BN], hold_ring.layout)
                    else:
                        _release(empty, prev, it - 1, sync, MC, MC_EMP)
                        if not EPI_G:
                            epi_gw = epi._reinterpret(dtype, [GW_WM, GW_QN], epi.layout)
                            tma.store_wait(0)
                            gl.thread_barrier()
                    nt += 1
                    if EPI_G:
                        _store_half(gw_out, acc.to(dtype), 2, off_o + WG * GW_WM, off_i, S, HID, HD, EPI_G >= 4)
                    for q in gl.static_range(PASSES):
                        _epilogue_pass(epi_gw, acc, acc_hi, q, dtype)
                        for j in gl.static_range(GW_QN // 64):
                            col = off_i + q * GW_QN + j * 64
                            tma.async_copy_shared_to_global(
                                gw_out, [off_o + WG * GW_WM, col], epi_gw.slice(j * 64, 64, dim=1)
                            )
        tma.store_wait(0)

    @gluon.constexpr_function
    def _defer_mode(defer: int, epi_g: int) -> int:
        """_consumer_defer's MODE: ``epi_defer``'s, or 3 for ``epi_global`` 2 (the stores from registers; 4 with
        ``epi_vec``'s 16-byte rows: EPI_G & 4)."""
        return 3 + (epi_g >= 4) if epi_g % 4 == 2 else defer

    @gluon.constexpr_function
    def _tile_kind(phase: int, ga_first: bool) -> int:
        """The kind of tile a program runs in its phase 0 or 1: 1 grad_attn, 2 grad_weight."""
        return 1 if (phase == 0) == ga_first else 2

    @gluon.jit
    def _pinned(x):
        """``x`` (bf16) through an opaque move: its conversion is made here, not sunk into the next tile's loop, where
        it would read the accumulator's registers under that tile's first MMA (ptxas then serialises every wgmma)."""
        return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=False, pack=2)

    @gluon.jit
    def _epi_write(e, out):
        """DEFER: a bf16 half-tile into this warpgroup's buffer ``e`` once the stores before have read it."""
        tma.store_wait(pendings=0)
        gl.thread_barrier()
        e.store(out)
        fence_async_shared()
        gl.thread_barrier()

    @gluon.jit
    def _epi_flush(
        ga_out, gw_out, e, out, kind, r, c, S, HID: gl.constexpr, HD: gl.constexpr, QN: gl.constexpr, MODE: gl.constexpr
    ):
        """DEFER: the finished tile's epilogue beside the next tile's first MMA (or after the program's last): with
        MODE 1 its half-tile ``out`` written into ``e`` first (MODE 2 wrote it at the tile's end), then the TMA
        stores: ``kind`` 1 a grad_attn tile (``r``: the (B*H*S, D) row of its first head, ``c``: that head), 2 a
        grad_weight tile (``r``, ``c``: the block's row and column); MODE 3 / 4 (``epi_global`` 2) stores ``out`` from
        registers into the outputs' pointers (then ``ga_out``, ``gw_out``) instead."""
        if MODE == 1:
            _epi_write(e, out)
        if MODE >= 3:
            if kind == 1:
                _store_half(ga_out, out, 1, r, c, S, HID, HD, MODE == 4)
            else:
                _store_half(gw_out, out, 2, r, c, S, HID, HD, MODE == 4)
        elif kind == 1:
            for j in gl.static_range(QN // HD):
                tma.async_copy_shared_to_global(ga_out, [r + (c + j) * S, 0], e.slice(j * HD, HD, dim=1))
        else:
            for j in gl.static_range(QN // 64):
                tma.async_copy_shared_to_global(gw_out, [r, c + j * 64], e.slice(j * 64, 64, dim=1))

    @gluon.jit
    def _consumer_defer(
        WG: gl.constexpr,
        ga_out, gw_out,
        a_ring, b_ring, ready, empty, epi,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, MODE: gl.constexpr,
    ):  # fmt: skip
        """v26, cooperative with the epilogue deferred (MODE 1; MODE 2: only its TMA stores, the buffer written at
        the tile's end): warpgroup WG runs its 64 rows of every tile (128 x QN tiles of both kinds, QN 128 or, v32,
        256: one accumulator layout). At a tile's end its accumulator is waited for and converted to bf16
        in registers only; the next tile's first MMA is issued before that half-tile goes through the shared buffer
        to its TMA stores, so the epilogue runs beside the MMA instead of before it. The program's last tile is
        written after the loops. (Deferring the fp32 accumulator itself, its last MMA in flight, makes ptxas copy it
        and serialise every wgmma, C7511.)"""
        ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw = _program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
        gl.static_assert(GA_BM == 128 and GA_BN == GW_BN, "deferred epilogue: 128-row tiles of one width")
        QN: gl.constexpr = GA_BN
        layout: gl.constexpr = _wgmma_layout(64, QN)
        dtype: gl.constexpr = a_ring.dtype  # (MODE 3 / 4: ga_out and gw_out are the outputs' pointers)
        if MODE >= 3:  # no shared buffer (epi is a placeholder)
            e = epi
        else:
            e = epi._reinterpret(dtype, [64, QN], epi.layout)
        it = 0
        prev = 0
        pend = 0  # the finished tile whose epilogue waits: 0 none, 1 grad_attn, 2 grad_weight
        pend_r = 0
        pend_c = 0
        pend_out = gl.zeros([64, QN], dtype, layout)
        for phase in gl.static_range(2):
            if _tile_kind(phase, GA_FIRST) == 1:
                lo = ga_lo
                hi = n_ga
                step = ga_step
                steps = HID
            else:
                lo = gw_lo
                hi = n_gw
                step = gw_step
                steps = M
            for t in range(lo, hi, step):
                if _tile_kind(phase, GA_FIRST) == 1:
                    am, an = _tile_coords(t, n_ga_m, HID // GA_BN, GROUP)
                    r0 = am * GA_BM + WG * 64
                    tile_r = (r0 // S) * (NH - 1) * S + r0  # (b*NH)*S + s = b*(NH-1)*S + m
                    tile_c = an * GA_BN // HD
                else:
                    wm, wn = _tile_coords(t, HID // GW_BM, HID // GW_BN, GROUP)
                    tile_r = wm * GW_BM + WG * 64
                    tile_c = wn * GW_BN
                acc_n = gl.zeros([64, QN], gl.float32, layout)
                for k in range(0, steps, BK):
                    s = it % STAGES
                    ph = (it // STAGES) & 1
                    mbarrier.wait(ready.index(s), ph)
                    if _tile_kind(phase, GA_FIRST) == 1:
                        a = _ga_a_block(a_ring, s, GA_BM, BK).slice(WG * 64, 64, dim=0)
                        b = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], b_ring.layout)
                    else:
                        a = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], a_ring.layout)
                        a = a.slice(WG * 64, 64, dim=1).permute((1, 0))
                        b = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], b_ring.layout)
                    acc_n = warpgroup_mma(a, b, acc_n, is_async=True)
                    acc_n = warpgroup_mma_wait(1, deps=(acc_n,))
                    if k > 0:
                        mbarrier.arrive(empty.index(prev), count=1)
                    elif pend != 0:  # the finished tile's epilogue, beside this tile's first MMA
                        _epi_flush(ga_out, gw_out, e, pend_out, pend, pend_r, pend_c, S, HID, HD, QN, MODE)
                    prev = s
                    it += 1
                acc_n = warpgroup_mma_wait(num_outstanding=0, deps=(acc_n,))
                mbarrier.arrive(empty.index(prev), count=1)
                if MODE != 2:
                    pend_out = _pinned(acc_n.to(dtype))
                else:
                    _epi_write(e, acc_n.to(dtype))
                pend = _tile_kind(phase, GA_FIRST)
                pend_r = tile_r
                pend_c = tile_c
        if pend != 0:  # the program's last tile
            _epi_flush(ga_out, gw_out, e, pend_out, pend, pend_r, pend_c, S, HID, HD, QN, MODE)
        tma.store_wait(pendings=0)

    @gluon.jit
    def _consumer_pp(
        WG: gl.constexpr,
        ga_out, gw_out,
        a_ring, b_ring, ready, empty, sync,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, REL: gl.constexpr, DEPTH: gl.constexpr,
        WGS: gl.constexpr = 2,
    ):  # fmt: skip
        """Ping-pong: warpgroup WG runs the program's tiles WG, WG + 2, ... whole (128 rows as two 64-row
        accumulators), skipping the other warpgroup's stages in the ring; while it writes a tile's epilogue (into
        the tile's last stage, released once its TMA stores have read it), the other warpgroup runs the next
        tile's main loop. ``REL``: the arrivals that release a stage (2 where the empty barriers count both
        warpgroups, PINGPONG 2); ``DEPTH``: stages of MMAs kept in flight (a stage is released DEPTH steps later).

        The turns are ordered (``sync[1 + w]`` completes a phase when warpgroup w has waited for every stage of its
        tile): a warpgroup waits for the other's previous main loop before it waits on its own first stage. Without
        that, a warpgroup that skipped ahead in the ring could take a stage's earlier fill (the same mbarrier
        parity two fills back) for its own. ``WGS`` 1 (solo, PINGPONG 3): the program's only warpgroup runs every
        tile, with no turns."""
        ga_lo, ga_step, n_ga, gw_lo, gw_step, n_gw = _program_tiles(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BN, GW_BM, GW_BN)
        n_ga_n: gl.constexpr = HID // GA_BN
        n_gw_n: gl.constexpr = HID // GW_BN
        dtype: gl.constexpr = a_ring.dtype  # (EPI_G: ga_out and gw_out are the outputs' pointers)
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
                    if nt % WGS == WG:
                        if WGS == 2 and nt > 0:  # the other warpgroup's main loop of the previous tile has passed
                            mbarrier.wait(sync.index(2 - WG), ((nt - 1) // 2) & 1)
                        am, an = _tile_coords(t, n_ga_m, n_ga_n, GROUP)
                        off_m = am * GA_BM
                        off_n = an * GA_BN
                        acc0 = gl.zeros([64, GA_BN], gl.float32, ga_layout)
                        acc1 = gl.zeros([64, GA_BN], gl.float32, ga_layout)
                        prev = 0
                        prev2 = 0
                        for k in range(0, HID, BK):
                            s = it % STAGES
                            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                            a = a_ring.index(s)._reinterpret(dtype, [GA_BM, BK], a_ring.layout)
                            b = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], b_ring.layout)
                            if GA_TWO:
                                acc0 = warpgroup_mma(a.slice(0, 64, dim=0), b, acc0, is_async=True)
                                acc1 = warpgroup_mma(a.slice(64, 64, dim=0), b, acc1, is_async=True)
                                acc0, acc1 = warpgroup_mma_wait(2 * DEPTH, deps=(acc0, acc1))
                            else:
                                acc0 = warpgroup_mma(a, b, acc0, is_async=True)
                                acc0 = warpgroup_mma_wait(DEPTH, deps=(acc0,))
                            if DEPTH == 1:
                                if k > 0:
                                    mbarrier.arrive(empty.index(prev), count=REL)
                            else:
                                if k > BK:
                                    mbarrier.arrive(empty.index(prev2), count=REL)
                            prev2 = prev
                            prev = s
                            it += 1
                        if WGS == 2:
                            mbarrier.arrive(sync.index(1 + WG), count=1)  # the other warpgroup's turn
                        if GA_TWO:
                            acc0, acc1 = warpgroup_mma_wait(0, deps=(acc0, acc1))
                        else:
                            acc0 = warpgroup_mma_wait(0, deps=(acc0,))
                        if DEPTH == 2:  # HID // BK >= 2 steps: the second-to-last stage is still held
                            mbarrier.arrive(empty.index(prev2), count=REL)
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
                        _release_held(empty, prev, 1, REL)
                    else:
                        it += ga_steps
                    nt += 1
            else:
                for t in range(gw_lo, n_gw, gw_step):
                    if nt % WGS == WG:
                        if WGS == 2 and nt > 0:
                            mbarrier.wait(sync.index(2 - WG), ((nt - 1) // 2) & 1)
                        wm, wn = _tile_coords(t, HID // GW_BM, n_gw_n, GROUP)
                        off_o = wm * GW_BM
                        off_i = wn * GW_BN
                        acc0 = gl.zeros([64, GW_BN], gl.float32, gw_layout)
                        acc1 = gl.zeros([64, GW_BN], gl.float32, gw_layout)
                        prev = 0
                        prev2 = 0
                        for k in range(0, M, BK):
                            s = it % STAGES
                            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                            a = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], a_ring.layout)
                            b = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], b_ring.layout)
                            acc0 = warpgroup_mma(a.slice(0, 64, dim=1).permute((1, 0)), b, acc0, is_async=True)
                            acc1 = warpgroup_mma(a.slice(64, 64, dim=1).permute((1, 0)), b, acc1, is_async=True)
                            acc0, acc1 = warpgroup_mma_wait(2 * DEPTH, deps=(acc0, acc1))
                            if DEPTH == 1:
                                if k > 0:
                                    mbarrier.arrive(empty.index(prev), count=REL)
                            else:
                                if k > BK:
                                    mbarrier.arrive(empty.index(prev2), count=REL)
                            prev2 = prev
                            prev = s
                            it += 1
                        if WGS == 2:
                            mbarrier.arrive(sync.index(1 + WG), count=1)
                        acc0, acc1 = warpgroup_mma_wait(0, deps=(acc0, acc1))
                        if DEPTH == 2:
                            if gw_steps >= 2:  # the second-to-last stage is still held
                                mbarrier.arrive(empty.index(prev2), count=REL)
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
                        _release_held(empty, prev, 1, REL)
                    else:
                        it += gw_steps
                    nt += 1
        tma.store_wait(0)

    @gluon.jit
    def _consumer_part(WG: gl.constexpr, ga_out, gw_out, a_ring, b_ring, ready, empty, epi, sync, M, S, n_ga_m, P_GA,
                       GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
                       GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
                       BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, EPI_HOLD: gl.constexpr,
                       PINGPONG: gl.constexpr, PP_DEPTH: gl.constexpr, HOLD_REL: gl.constexpr,
                       NSPLIT: gl.constexpr, LAZY: gl.constexpr, DEFER: gl.constexpr,
                       EPI_G: gl.constexpr, MC: gl.constexpr, MC_EMP: gl.constexpr,
                       MC_RDY: gl.constexpr):  # fmt: skip
        if LAZY:  # the loader initialises the ring's mbarriers: none is touched before it says so
            mbarrier.wait(sync.index(3), 0)
        if PINGPONG == 1 or PINGPONG == 3:  # (3, solo: this warpgroup alone runs every tile of the program)
            _consumer_pp(WG, ga_out, gw_out, a_ring, b_ring, ready, empty, sync, M, S, n_ga_m, P_GA, GA_FIRST, HID,
                         NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, 1, PP_DEPTH,
                         2 if PINGPONG == 1 else 1)  # fmt: skip
        elif PINGPONG == 2:
            # ping-pong in the programs of a partition that run only grad_weight tiles, cooperative elsewhere (the
            # empty barriers count two arrivals: a ping-pong release gives both)
            if P_GA > 0 and gl.program_id(0) >= P_GA:
                _consumer_pp(WG, ga_out, gw_out, a_ring, b_ring, ready, empty, sync, M, S, n_ga_m, P_GA, GA_FIRST,
                             HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, 2, PP_DEPTH)  # fmt: skip
            else:
                _consumer(WG, ga_out, gw_out, a_ring, b_ring, ready, empty, epi, sync, M, S, n_ga_m, P_GA, GA_FIRST,
                          HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, True, HOLD_REL,
                          NSPLIT)  # fmt: skip
        elif DEFER > 0 or EPI_G % 4 == 2:
            _consumer_defer(WG, ga_out, gw_out, a_ring, b_ring, ready, empty, epi, M, S, n_ga_m, P_GA, GA_FIRST,
                            HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP,
                            _defer_mode(DEFER, EPI_G))  # fmt: skip
        else:
            _consumer(WG, ga_out, gw_out, a_ring, b_ring, ready, empty, epi, sync, M, S, n_ga_m, P_GA, GA_FIRST, HID,
                      NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, EPI_HOLD, HOLD_REL, NSPLIT,
                      EPI_G, MC, MC_EMP, MC_RDY)  # fmt: skip

    @gluon.jit
    def _consumer0(ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                   GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
                   GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
                   BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, EPI_HOLD: gl.constexpr,
                   PINGPONG: gl.constexpr, PP_DEPTH: gl.constexpr, HOLD_REL: gl.constexpr,
                   NSPLIT: gl.constexpr, LAZY: gl.constexpr, DEFER: gl.constexpr, EPI_G: gl.constexpr,
                   MC: gl.constexpr, MC_EMP: gl.constexpr, MC_RDY: gl.constexpr):  # fmt: skip
        _consumer_part(0, ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, sync, M, S, n_ga_m, P_GA, GA_FIRST, HID,
                       NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, EPI_HOLD, PINGPONG,
                       PP_DEPTH, HOLD_REL, NSPLIT, LAZY, DEFER, EPI_G, MC, MC_EMP, MC_RDY)  # fmt: skip

    @gluon.jit
    def _consumer1(ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                   GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
                   GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
                   BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, EPI_HOLD: gl.constexpr,
                   PINGPONG: gl.constexpr, PP_DEPTH: gl.constexpr, HOLD_REL: gl.constexpr,
                   NSPLIT: gl.constexpr, LAZY: gl.constexpr, DEFER: gl.constexpr, EPI_G: gl.constexpr,
                   MC: gl.constexpr, MC_EMP: gl.constexpr, MC_RDY: gl.constexpr):  # fmt: skip
        _consumer_part(1, ga_out, gw_out, a_ring, b_ring, ready, empty, epi1, sync, M, S, n_ga_m, P_GA, GA_FIRST, HID,
                       NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, EPI_HOLD, PINGPONG,
                       PP_DEPTH, HOLD_REL, NSPLIT, LAZY, DEFER, EPI_G, MC, MC_EMP, MC_RDY)  # fmt: skip

    @gluon.jit
    def _loader_part(ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                     GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
                     GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
                     BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, EPI_HOLD: gl.constexpr,
                     PINGPONG: gl.constexpr, PP_DEPTH: gl.constexpr, HOLD_REL: gl.constexpr,
                     NSPLIT: gl.constexpr, go_a, w_b, go_t, x_b, L2PF: gl.constexpr, pf_go, pf_w, pf_x,
                     PF_D: gl.constexpr, KROT: gl.constexpr, LAZY: gl.constexpr, NXPF: gl.constexpr,
                     NX_D: gl.constexpr, SERP: gl.constexpr, FA: gl.constexpr, MC: gl.constexpr,
                     MC_B: gl.constexpr, MC_RDY: gl.constexpr, mc_flag, MC_EMP: gl.constexpr,
                     FD: gl.constexpr = 0):  # fmt: skip
        CONSUMERS: gl.constexpr = _consumers(PINGPONG)
        _loader(go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, M, n_ga_m, P_GA, GA_FIRST, HID, GA_BM, GA_BN,
                GW_BM, GW_BN, BK, STAGES, GROUP, L2PF, pf_go, pf_w, pf_x, PF_D, KROT, sync.index(3), LAZY,
                CONSUMERS, NXPF, NX_D, SERP, FA, MC, MC_B, MC_RDY, mc_flag, MC_EMP, FD)  # fmt: skip

    @gluon.jit(do_not_specialize=["M", "S", "n_ga_m", "P_GA"])
    def gluon_bwd_kernel(
        go_ptr, w_ptr, x_ptr, ga_ptr, gw_ptr,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, LOADER_REGS: gl.constexpr,
        EPI_HOLD: gl.constexpr = False, PINGPONG: gl.constexpr = 0, PP_DEPTH: gl.constexpr = 1,
        HOLD_REL: gl.constexpr = 1,
        NSPLIT: gl.constexpr = 1,
        L2PF: gl.constexpr = 0,
        PF_D: gl.constexpr = 6,
        KROT: gl.constexpr = 0,
        LAZY: gl.constexpr = False,
    ):  # fmt: skip
        """The launcher's entry: plain pointers (the replay's signature vocabulary, docs/replay.md, has no Gluon
        descriptor type), the TMA descriptors built on the device (global scratch from Triton's allocator)."""
        lay: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
        GA_WM: gl.constexpr = GA_BM // 2 if GA_BM >= 128 else GA_BM
        go_a = tma.make_tensor_descriptor(go_ptr, [M, HID], [HID, 1], [GA_BM, BK], lay)
        w_b = tma.make_tensor_descriptor(w_ptr, [HID, HID], [HID, 1], [BK, 64], lay)
        go_t = tma.make_tensor_descriptor(go_ptr, [M, HID], [HID, 1], [BK, 64], lay)
        x_b = tma.make_tensor_descriptor(x_ptr, [M, HID], [HID, 1], [BK, 64], lay)
        ga_out = tma.make_tensor_descriptor(ga_ptr, [M * NH, HD], [HD, 1], [GA_WM, HD], lay)
        gw_out = tma.make_tensor_descriptor(gw_ptr, [HID, HID], [HID, 1], [GW_BM // 2, 64], lay)
        _gluon_body(go_a, w_b, go_t, x_b, ga_out, gw_out, M, S, n_ga_m, P_GA, GA_FIRST, HID, NH, HD, GA_BM, GA_BN,
                    GW_BM, GW_BN, BK, STAGES, GROUP, LOADER_REGS, EPI_HOLD, PINGPONG, PP_DEPTH, HOLD_REL,
                    NSPLIT, L2PF, go_ptr, w_ptr, x_ptr, PF_D, KROT, LAZY, False, 0, 4, 0, False, 0, ga_ptr,
                    gw_ptr, 0, 0, 0, 0, 0, None)  # fmt: skip

    @gluon.jit(do_not_specialize=["M", "S", "n_ga_m", "P_GA"])
    def gluon_bwd_kernel_host_desc(
        go_a, w_b, go_t, x_b, ga_out, gw_out,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, LOADER_REGS: gl.constexpr,
        EPI_HOLD: gl.constexpr = False, PINGPONG: gl.constexpr = 0, PP_DEPTH: gl.constexpr = 1,
        HOLD_REL: gl.constexpr = 1,
        NSPLIT: gl.constexpr = 1,
        L2PF: gl.constexpr = 0,
        PF_D: gl.constexpr = 6,
        pf_go=None, pf_w=None, pf_x=None,
        KROT: gl.constexpr = 0,
        LAZY: gl.constexpr = False,
        TMPF: gl.constexpr = False,
        NXPF: gl.constexpr = 0,
        NX_D: gl.constexpr = 4,
        DEFER: gl.constexpr = 0,
        SERP: gl.constexpr = False,
        EPI_G: gl.constexpr = 0,
        ga_ptr=None, gw_ptr=None,
        FA: gl.constexpr = 0,
        MC: gl.constexpr = 0,
        MC_B: gl.constexpr = 0,
        MC_RDY: gl.constexpr = 0,
        MC_EMP: gl.constexpr = 0,
        mc_flag=None,
        FD: gl.constexpr = 0,
        FPF: gl.constexpr = 0,
    ):  # fmt: skip
        """The same kernel with host TMA descriptors (Gluon ``TensorDescriptor``): the table's entry point (the
        CI's plan contract accepts their plain NVMMA layout, ci/harness/plan.py); with L2PF, the inputs' plain
        pointers too (``pf_*``: grad_output, weight, reshaped), for the L2 prefetches; TMPF and NXPF (v25) name
        its descriptors' parameters (HOST_DESC_ENTRY); with EPI_G (v27), the outputs' plain pointers too (``ga_ptr``:
        grad_attn_output, ``gw_ptr``: grad_weight), for the consumers' stores from registers; with MC (v29), the
        shared-memory offsets of the B ring and of the ready and empty barriers (``multicast_offsets``), and
        ``mc_flag``, the clusters' launch counters (int32, one a cluster, zeroed once: each launch adds 2)."""
        _gluon_body(go_a, w_b, go_t, x_b, ga_out, gw_out, M, S, n_ga_m, P_GA, GA_FIRST, HID, NH, HD, GA_BM, GA_BN,
                    GW_BM, GW_BN, BK, STAGES, GROUP, LOADER_REGS, EPI_HOLD, PINGPONG, PP_DEPTH, HOLD_REL,
                    NSPLIT, L2PF, pf_go, pf_w, pf_x, PF_D, KROT, LAZY, TMPF, NXPF, NX_D, DEFER,
                    SERP, EPI_G, ga_ptr, gw_ptr, FA, MC, MC_B, MC_RDY, MC_EMP, mc_flag, FD, FPF)  # fmt: skip

    @gluon.jit
    def _gluon_body(
        go_a, w_b, go_t, x_b, ga_out, gw_out,
        M, S, n_ga_m, P_GA,
        GA_FIRST: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, LOADER_REGS: gl.constexpr,
        EPI_HOLD: gl.constexpr, PINGPONG: gl.constexpr, PP_DEPTH: gl.constexpr, HOLD_REL: gl.constexpr,
        NSPLIT: gl.constexpr, L2PF: gl.constexpr, pf_go, pf_w, pf_x, PF_D: gl.constexpr, KROT: gl.constexpr,
        LAZY: gl.constexpr, TMPF: gl.constexpr, NXPF: gl.constexpr, NX_D: gl.constexpr, DEFER: gl.constexpr,
        SERP: gl.constexpr, EPI_G: gl.constexpr, ga_ptr, gw_ptr, FA: gl.constexpr, MC: gl.constexpr,
        MC_B: gl.constexpr, MC_RDY: gl.constexpr, MC_EMP: gl.constexpr, mc_flag, FD: gl.constexpr = 0,
        FPF: gl.constexpr = 0,
    ):  # fmt: skip
        """Persistent: a loader warp and two consumer warpgroups per program (num_warps = 4: the default
        partition is consumer 0)."""
        if TMPF:  # before anything else: the descriptors on their way into the TMA unit's cache
            _tmap_prefetch()
        if FPF > 0:  # before anything else: the first tile's first K-steps on their way from DRAM into L2
            _first_tile_prefetch(M, n_ga_m, P_GA, GA_FIRST, HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, GROUP, FPF)
        dtype: gl.constexpr = go_a.dtype
        if L2PF & 1:  # this program's share of grad_output, asked of L2 before anything else is loaded
            _l2_prefetch(pf_go, M * (HID * 2), gl.program_id(0), gl.num_programs(0), 4)
        if L2PF & 2:
            _l2_prefetch(pf_w, HID * (HID * 2), gl.program_id(0), gl.num_programs(0), 4)
            _l2_prefetch(pf_x, M * (HID * 2), gl.program_id(0), gl.num_programs(0), 4)
        gl.static_assert(GW_BM == 128 and GA_BM % 64 == 0, "two warpgroups of 64 rows")
        # A stage holds either kind's blocks: sized by the larger of each, viewed per kind (_reinterpret).
        A_COLS: gl.constexpr = GW_BM if GW_BM >= GA_BM else GA_BM
        B_COLS: gl.constexpr = GW_BN if GW_BN >= GA_BN else GA_BN
        a_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, A_COLS], go_t.layout)
        b_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, B_COLS], x_b.layout)
        GA_WN: gl.constexpr = GA_BN if GA_BM >= 128 else GA_BN // 2
        EPI_COLS: gl.constexpr = (GW_BN if GW_BN >= GA_WN else GA_WN) // NSPLIT  # NSPLIT: the epilogue in passes
        HOLD: gl.constexpr = EPI_HOLD or PINGPONG > 0
        if HOLD:
            # the epilogue goes into a held ring stage: 64 rows of up to A_COLS (B_COLS) columns per part
            gl.static_assert(BK == 64 and EPI_COLS <= A_COLS and EPI_COLS <= B_COLS, "an epilogue part fits a stage")
            gl.static_assert(GA_BN <= A_COLS and GA_BN <= B_COLS, "a ping-pong grad_attn half fits a stage part")
        if HOLD or EPI_G:  # no buffers of their own (EPI_G stores from registers): the rings stand in for them
            epi0 = a_ring
            epi1 = b_ring
        else:
            # one epilogue buffer per warpgroup: 64 rows by the wider of its two kinds of half-tile
            epi0 = gl.allocate_shared_memory(dtype, [64, EPI_COLS], gw_out.layout)
            epi1 = gl.allocate_shared_memory(dtype, [64, EPI_COLS], gw_out.layout)
        CONSUMERS: gl.constexpr = _consumers(PINGPONG)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        # [0]: the cooperative EPI_HOLD rendezvous before the epilogue; [1], [2]: the ping-pong turns; [3] (LAZY):
        # the loader's word that every stage's mbarriers are initialised
        # (MC: [3] is the loader's word that the peer's mbarriers are initialised, so the consumers may release to it)
        SYNCS: gl.constexpr = 4 if (LAZY or MC) else 3
        sync = gl.allocate_shared_memory(gl.int64, [SYNCS, 1], mbarrier.MBarrierLayout())
        # Every stage starts empty: the loader's first wait on a stage is for parity 1, the phase before a fresh
        # mbarrier's first, which counts as completed (v24: no arrivals here). The allocations' inits interleave:
        # Triton puts a warpgroup barrier between two writes to one allocation, so one barrier a stage (v23: two).
        if LAZY:  # the loader initialises the ring's (_lazy_init); here the boot barrier and the ones in use
            mbarrier.init(sync.index(3), count=1)
            if EPI_HOLD or PINGPONG > 0:
                for i in gl.static_range(3):
                    mbarrier.init(sync.index(i), count=2 if i == 0 else 1)
        else:
            for i in gl.static_range(STAGES):
                mbarrier.init(ready.index(i), count=1)
                # MC: both CTAs' consumers release a stage (the peer's multicasts write into it)
                mbarrier.init(empty.index(i), count=CONSUMERS * (2 if MC else 1))
                if i < 3:
                    mbarrier.init(sync.index(i), count=2 if i == 0 else 1)
            for i in gl.static_range(STAGES, 3):  # fewer than three stages
                mbarrier.init(sync.index(i), count=2 if i == 0 else 1)
            if MC:
                mbarrier.init(sync.index(3), count=1)
                _mc_fence_init()
        if EPI_G:  # the consumers' outputs: the plain pointers in place of the descriptors
            c_ga = ga_ptr
            c_gw = gw_ptr
        else:
            c_ga = ga_out
            c_gw = gw_out
        # (the argument tuples are written out: a tuple held in a variable loses its constexprs)
        if PINGPONG == 3:  # solo: the default partition's warpgroup and the loader warp, no second consumer
            gl.warp_specialize(
                [
                    (_consumer0, (c_ga, c_gw, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                                  GA_FIRST, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, EPI_HOLD,
                                  PINGPONG, PP_DEPTH, HOLD_REL, NSPLIT, LAZY, DEFER, EPI_G, MC, MC_EMP, MC_RDY)),
                    (_loader_part, (ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M,
                                    S, n_ga_m, P_GA, GA_FIRST, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES,
                                    GROUP, EPI_HOLD, PINGPONG, PP_DEPTH, HOLD_REL, NSPLIT, go_a, w_b, go_t, x_b, L2PF,
                                    pf_go, pf_w, pf_x, PF_D, KROT, LAZY, NXPF, NX_D, SERP, FA, MC, MC_B, MC_RDY,
                                    mc_flag, MC_EMP, FD)),
                ],
                [1],
                [LOADER_REGS],
            )  # fmt: skip
        else:
            gl.warp_specialize(
                [
                    (_consumer0, (c_ga, c_gw, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                                  GA_FIRST, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, EPI_HOLD,
                                  PINGPONG, PP_DEPTH, HOLD_REL, NSPLIT, LAZY, DEFER, EPI_G, MC, MC_EMP, MC_RDY)),
                    (_consumer1, (c_ga, c_gw, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                                  GA_FIRST, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, EPI_HOLD,
                                  PINGPONG, PP_DEPTH, HOLD_REL, NSPLIT, LAZY, DEFER, EPI_G, MC, MC_EMP, MC_RDY)),
                    (_loader_part, (ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, epi1, sync, M, S, n_ga_m, P_GA,
                                    GA_FIRST, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, EPI_HOLD,
                                    PINGPONG, PP_DEPTH, HOLD_REL, NSPLIT, go_a, w_b, go_t, x_b, L2PF, pf_go, pf_w, pf_x,
                                    PF_D, KROT, LAZY, NXPF, NX_D, SERP, FA, MC, MC_B, MC_RDY, mc_flag, MC_EMP, FD)),
                ],
                [4, 1],
                [232, LOADER_REGS],
            )  # fmt: skip

    # ------------------------------------------------------------------------------------------ v30: stream-K
    @gluon.jit
    def _sk_publish(flag):
        """SK (v30): after the warpgroup's barrier (every thread's partial stored), each thread sets the flag to 1 by
        a release at GPU scope (the barrier orders every thread's stores before each release; CUTLASS's stream-K
        has one thread do it). No thread-dependent predicate in the PTX: a ``%tid`` read made ptxas give up the
        loader's uniform registers (v30 run a: a waterfall loop around each of its TMAs and mbarrier inits)."""
        gl.inline_asm_elementwise("st.release.gpu.global.u32 [$1], 1; mov.u32 $0, 0;", "=r,l", [flag],
                                  dtype=gl.int32, is_pure=False, pack=1)  # fmt: skip

    @gluon.jit
    def _sk_wait(flag):
        """SK: wait until the flag is 1 (each thread's own acquire, so each may read the partial after it), then,
        once every thread of the warpgroup has seen it (its barrier), set it back to 0 for the next launch (launches
        on a stream run one after the other; the replay's scratch starts at 0xFF, -1, never 1)."""
        v = _acquire(flag)
        while v != 1:
            v = _acquire(flag)
        gl.thread_barrier()
        gl.inline_asm_elementwise("st.relaxed.gpu.global.u32 [$1], 0; mov.u32 $0, 0;", "=r,l", [flag],
                                  dtype=gl.int32, is_pure=False, pack=1)  # fmt: skip

    @gluon.jit
    def _sk_join(sk_part, offs, flag, layout: gl.constexpr, WM: gl.constexpr, WN: gl.constexpr, DIAG: gl.constexpr):
        """SK: the earlier program's fp32 partial at ``offs`` into the workspace, once ``flag`` says it is stored
        (``_sk_wait``). DIAG 2: no wait; DIAG 1: zeros instead of the load (``gluon_bwd_kernel_sk``'s diagnostics)."""
        if DIAG & 2 == 0:
            _sk_wait(flag)
        if DIAG & 1 == 0:
            part = gl.load(sk_part + offs)
        else:
            part = gl.zeros([WM, WN], gl.float32, layout)
        return part

    @gluon.jit
    def _sk_ranges(M, n_ga_m, SK: gl.constexpr, HID: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr,
                   GW_BN: gl.constexpr, BK: gl.constexpr):  # fmt: skip
        """SK: (n_w, l_w, n_s, l_s, z0, z1): the whole kind's tiles and K-steps a tile (program p runs its tiles p,
        p + P, ...), the stream kind's tiles and K-steps a tile, and this program's range [z0, z1) of the stream
        kind's K-steps, all tiles' in a row (``stream_k_ranges`` on the host: the same arithmetic)."""
        n_ga = n_ga_m * (HID // GA_BN)
        n_gw = (HID // GW_BM) * (HID // GW_BN)
        l_ga = HID // BK
        l_gw = gl.cdiv(M, BK)
        if SK == 2:  # grad_weight tiles split, grad_attn tiles whole
            n_w = n_ga
            l_w = l_ga
            n_s = n_gw
            l_s = l_gw
        else:
            n_w = n_gw
            l_w = l_gw
            n_s = n_ga
            l_s = l_ga
        total = n_ga * l_ga + n_gw * l_gw
        pid = gl.program_id(0)
        nprog = gl.num_programs(0)
        base = n_w // nprog
        rem = n_w % nprog
        z0 = (pid * total) // nprog - l_w * (pid * base + gl.minimum(pid, rem))
        z1 = ((pid + 1) * total) // nprog - l_w * ((pid + 1) * base + gl.minimum(pid + 1, rem))
        return n_w, l_w, n_s, l_s, z0, z1

    @gluon.jit
    def _sk_tile(x, n_s, sk_c):
        """SK: the stream kind's tile at position ``x`` of the stream: positions interleaved by ``sk_c`` (each
        program's ranges span about sk_c tiles; its i-th one is then about tile i * n_s / sk_c + program, so the
        tiles the programs run at once are neighbours in the grouped order, as in a whole-tile plan)."""
        return (x % sk_c) * (n_s // sk_c) + x // sk_c

    @gluon.jit
    def _sk_load(
        KIND: gl.constexpr, t, j0, j1, it, go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, boot, n_ga_m,
        HID: gl.constexpr, GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, LAZY: gl.constexpr,
    ):  # fmt: skip
        """SK's loader: K-steps j0 .. j1 - 1 of tile ``t`` of KIND (1 grad_attn, 2 grad_weight) into the ring from
        fill ``it`` on, as ``_loader`` loads them. Returns the next fill."""
        dtype: gl.constexpr = go_a.dtype
        if KIND == 1:
            am, an = _tile_coords(t, n_ga_m, HID // GA_BN, GROUP)
            off_m = am * GA_BM
            off_n = an * GA_BN
            for j in range(j0, j1):
                s, bar = _next_stage(ready, empty, boot, it, (GA_BM * BK + BK * GA_BN) * 2, STAGES, LAZY, 2)
                a_s = a_ring.index(s)._reinterpret(dtype, [GA_BM, BK], go_a.layout)
                tma.async_copy_global_to_shared(go_a, [off_m, j * BK], bar, a_s)
                bs = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], w_b.layout)
                for i in gl.static_range(GA_BN // 64):
                    tma.async_copy_global_to_shared(w_b, [j * BK, off_n + i * 64], bar, bs.slice(i * 64, 64, dim=1))
                it += 1
        else:
            wm, wn = _tile_coords(t, HID // GW_BM, HID // GW_BN, GROUP)
            off_o = wm * GW_BM
            off_i = wn * GW_BN
            for j in range(j0, j1):  # rows past M are zero-filled by the descriptor
                s, bar = _next_stage(ready, empty, boot, it, (BK * GW_BM + BK * GW_BN) * 2, STAGES, LAZY, 2)
                As = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], go_t.layout)
                for i in gl.static_range(GW_BM // 64):
                    tma.async_copy_global_to_shared(go_t, [j * BK, off_o + i * 64], bar, As.slice(i * 64, 64, dim=1))
                bs = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], x_b.layout)
                for i in gl.static_range(GW_BN // 64):
                    tma.async_copy_global_to_shared(x_b, [j * BK, off_i + i * 64], bar, bs.slice(i * 64, 64, dim=1))
                it += 1
        return it

    @gluon.jit
    def _sk_loader(
        go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, boot, M, n_ga_m, sk_c, SK: gl.constexpr, HID: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr, BK: gl.constexpr,
        STAGES: gl.constexpr, GROUP: gl.constexpr, LAZY: gl.constexpr,
    ):  # fmt: skip
        """SK's loader warp: the program's pieces in the consumers' order (``_sk_consumer``)."""
        n_w, l_w, n_s, l_s, z0, z1 = _sk_ranges(M, n_ga_m, SK, HID, GA_BN, GW_BM, GW_BN, BK)
        WK: gl.constexpr = 3 - SK
        it = 0
        if z1 % l_s != 0:  # the tail: the first K-steps of the range's last tile
            tail = _sk_tile(z1 // l_s, n_s, sk_c)
            it = _sk_load(SK, tail, 0, z1 % l_s, it, go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, boot, n_ga_m,
                          HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY)  # fmt: skip
        for t in range(gl.program_id(0), n_w, gl.num_programs(0)):
            it = _sk_load(WK, t, 0, l_w, it, go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, boot, n_ga_m, HID,
                          GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY)  # fmt: skip
        for x in range(gl.cdiv(z0, l_s), z1 // l_s):
            it = _sk_load(SK, _sk_tile(x, n_s, sk_c), 0, l_s, it, go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty,
                          boot, n_ga_m, HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY)  # fmt: skip
        if z0 % l_s != 0:  # the head: the rest of the range's first tile
            head = _sk_tile(z0 // l_s, n_s, sk_c)
            it = _sk_load(SK, head, z0 % l_s, l_s, it, go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, boot,
                          n_ga_m, HID, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY)  # fmt: skip
        if LAZY:  # a program of fewer steps than stages: the rest initialised, and the consumers let go
            for i in range(it, STAGES):
                _lazy_init(ready, empty, boot, i, i, STAGES, 2)

    @gluon.jit
    def _sk_mma(KIND: gl.constexpr, s, acc, a_ring, b_ring, WG: gl.constexpr, GA_BM: gl.constexpr,
                GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr, BK: gl.constexpr):  # fmt: skip
        """SK: warpgroup WG's MMA of stage ``s`` (its 64 rows of the tile), issued asynchronously."""
        dtype: gl.constexpr = a_ring.dtype
        if KIND == 1:
            a = a_ring.index(s)._reinterpret(dtype, [GA_BM, BK], a_ring.layout).slice(WG * (GA_BM // 2), GA_BM // 2)
            b = b_ring.index(s)._reinterpret(dtype, [BK, GA_BN], b_ring.layout)
        else:
            a = a_ring.index(s)._reinterpret(dtype, [BK, GW_BM], a_ring.layout)
            a = a.slice(WG * (GW_BM // 2), GW_BM // 2, dim=1).permute((1, 0))
            b = b_ring.index(s)._reinterpret(dtype, [BK, GW_BN], b_ring.layout)
        return warpgroup_mma(a, b, acc, is_async=True)

    @gluon.jit
    def _sk_steps(
        KIND: gl.constexpr, n, acc, it, a_ring, b_ring, ready, empty, WG: gl.constexpr, GA_BM: gl.constexpr,
        GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
    ):  # fmt: skip
        """SK: ``n`` (>= 0) K-steps of a tile of KIND from fill ``it`` on, one MMA group in flight, each stage
        released once the MMA that read it has retired; the last one too, on return. Returns (acc, next fill)."""
        prev = 0
        for i in range(n):
            s = it % STAGES
            phase = (it // STAGES) & 1
            mbarrier.wait(ready.index(s), phase)
            acc = _sk_mma(KIND, s, acc, a_ring, b_ring, WG, GA_BM, GA_BN, GW_BM, GW_BN, BK)
            acc = warpgroup_mma_wait(1, deps=(acc,))
            if i > 0:
                mbarrier.arrive(empty.index(prev), count=1)
            prev = s
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        if n > 0:
            mbarrier.arrive(empty.index(prev), count=1)
        return acc, it

    @gluon.jit
    def _sk_offsets(layout: gl.constexpr, WM: gl.constexpr, WN: gl.constexpr, slot):
        """SK: where a warpgroup's fp32 partial (WM x WN, row-major) lives in the workspace: slot ``slot``."""
        rows = gl.arange(0, WM, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, WN, layout=gl.SliceLayout(0, layout))
        return slot * (WM * WN) + rows[:, None] * WN + cols[None, :]

    @gluon.jit
    def _sk_epilogue(
        KIND: gl.constexpr, t, acc, epi, ga_out, gw_out, S, n_ga_m, WG: gl.constexpr, HID: gl.constexpr,
        NH: gl.constexpr, HD: gl.constexpr, GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr,
        GW_BN: gl.constexpr, GROUP: gl.constexpr,
    ):  # fmt: skip
        """SK: the cooperative epilogue of a finished tile (``_consumer``'s, one pass): the warpgroup's bf16 half
        into its buffer once the last tile's stores have read it, then its TMA stores."""
        dtype: gl.constexpr = epi.dtype
        tma.store_wait(pendings=0)
        gl.thread_barrier()
        if KIND == 1:
            am, an = _tile_coords(t, n_ga_m, HID // GA_BN, GROUP)
            e = epi._reinterpret(dtype, [GA_BM // 2, GA_BN], epi.layout)
            _epilogue_pass(e, acc, acc, 0, dtype)
            r0 = am * GA_BM + WG * (GA_BM // 2)
            row0 = (r0 // S) * (NH - 1) * S + r0  # (b*NH)*S + s = b*(NH-1)*S + m
            for j in gl.static_range(GA_BN // HD):
                h = (an * GA_BN) // HD + j
                tma.async_copy_shared_to_global(ga_out, [row0 + h * S, 0], e.slice(j * HD, HD, dim=1))
        else:
            wm, wn = _tile_coords(t, HID // GW_BM, HID // GW_BN, GROUP)
            e = epi._reinterpret(dtype, [GW_BM // 2, GW_BN], epi.layout)
            _epilogue_pass(e, acc, acc, 0, dtype)
            for j in gl.static_range(GW_BN // 64):
                tma.async_copy_shared_to_global(
                    gw_out, [wm * GW_BM + WG * (GW_BM // 2), wn * GW_BN + j * 64], e.slice(j * 64, 64, dim=1)
                )

    @gluon.jit
    def _sk_consumer(
        WG: gl.constexpr, ga_out, gw_out, a_ring, b_ring, ready, empty, epi, sync, sk_part, sk_flag, M, S, n_ga_m,
        sk_c, SK: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr, GA_BM: gl.constexpr,
        GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
        GROUP: gl.constexpr, LAZY: gl.constexpr, DIAG: gl.constexpr,
    ):  # fmt: skip
        """SK (v30): warpgroup WG's share of the program's pieces, in this order: the tail (the first K-steps of the
        range's last stream tile, whose fp32 partial goes to the workspace, slot 2 * program + WG, and is flagged),
        the whole kind's tiles, the range's whole stream tiles, and the head (the rest of the range's first stream
        tile, begun by the program before: its partial, waited for by flag, is added before the epilogue). The
        program that waits is the later one, and it waits at its end for what the earlier one did first."""
        if LAZY:  # the loader initialises the ring's mbarriers: none is touched before it says so
            mbarrier.wait(sync.index(3), 0)
        n_w, l_w, n_s, l_s, z0, z1 = _sk_ranges(M, n_ga_m, SK, HID, GA_BN, GW_BM, GW_BN, BK)
        WK: gl.constexpr = 3 - SK
        WM: gl.constexpr = GA_BM // 2
        WN: gl.constexpr = GA_BN
        layout: gl.constexpr = _wgmma_layout(WM, WN)
        pid = gl.program_id(0)
        it = 0
        if z1 % l_s != 0:
            acc = gl.zeros([WM, WN], gl.float32, layout)
            acc, it = _sk_steps(SK, z1 % l_s, acc, it, a_ring, b_ring, ready, empty, WG, GA_BM, GA_BN, GW_BM, GW_BN,
                                BK, STAGES)  # fmt: skip
            if DIAG & 1 == 0:
                gl.store(sk_part + _sk_offsets(layout, WM, WN, pid * 2 + WG), acc)
            gl.thread_barrier()
            if DIAG & 2 == 0:
                _sk_publish(sk_flag + pid * 2 + WG)
        for t in range(pid, n_w, gl.num_programs(0)):
            acc = gl.zeros([WM, WN], gl.float32, layout)
            acc, it = _sk_steps(WK, l_w, acc, it, a_ring, b_ring, ready, empty, WG, GA_BM, GA_BN, GW_BM, GW_BN, BK,
                                STAGES)  # fmt: skip
            _sk_epilogue(WK, t, acc, epi, ga_out, gw_out, S, n_ga_m, WG, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN,
                         GROUP)  # fmt: skip
        for x in range(gl.cdiv(z0, l_s), z1 // l_s):
            acc = gl.zeros([WM, WN], gl.float32, layout)
            acc, it = _sk_steps(SK, l_s, acc, it, a_ring, b_ring, ready, empty, WG, GA_BM, GA_BN, GW_BM, GW_BN, BK,
                                STAGES)  # fmt: skip
            _sk_epilogue(SK, _sk_tile(x, n_s, sk_c), acc, epi, ga_out, gw_out, S, n_ga_m, WG, HID, NH, HD, GA_BM,
                         GA_BN, GW_BM, GW_BN, GROUP)  # fmt: skip
        if z0 % l_s != 0:
            offs = _sk_offsets(layout, WM, WN, (pid - 1) * 2 + WG)
            flag = sk_flag + (pid - 1) * 2 + WG
            if WN > 128:  # 128x256: no registers for the partial beside the accumulator: it is the initial value
                acc = _sk_join(sk_part, offs, flag, layout, WM, WN, DIAG)
                acc, it = _sk_steps(SK, l_s - z0 % l_s, acc, it, a_ring, b_ring, ready, empty, WG, GA_BM, GA_BN,
                                    GW_BM, GW_BN, BK, STAGES)  # fmt: skip
            else:
                # the first step's MMA goes out before the wait for the earlier program's flag, so that the flag's
                # round trip runs beside it; the partial's loads are used only after the last MMA
                s = it % STAGES
                phase = (it // STAGES) & 1
                mbarrier.wait(ready.index(s), phase)
                acc = _sk_mma(SK, s, gl.zeros([WM, WN], gl.float32, layout), a_ring, b_ring, WG, GA_BM, GA_BN,
                              GW_BM, GW_BN, BK)  # fmt: skip
                part = _sk_join(sk_part, offs, flag, layout, WM, WN, DIAG)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
                mbarrier.arrive(empty.index(s), count=1)
                it += 1
                acc, it = _sk_steps(SK, l_s - z0 % l_s - 1, acc, it, a_ring, b_ring, ready, empty, WG, GA_BM,
                                    GA_BN, GW_BM, GW_BN, BK, STAGES)  # fmt: skip
                acc = acc + part
            head = _sk_tile(z0 // l_s, n_s, sk_c)
            _sk_epilogue(SK, head, acc, epi, ga_out, gw_out, S, n_ga_m, WG, HID, NH, HD, GA_BM, GA_BN, GW_BM,
                         GW_BN, GROUP)  # fmt: skip
        tma.store_wait(pendings=0)

    @gluon.jit
    def _sk_loader_part(go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, sync, M, n_ga_m, sk_c, SK: gl.constexpr,
                        HID: gl.constexpr, GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr,
                        GW_BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr,
                        LAZY: gl.constexpr):  # fmt: skip
        _sk_loader(go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, sync.index(3), M, n_ga_m, sk_c, SK, HID, GA_BM,
                   GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY)  # fmt: skip

    @gluon.jit(do_not_specialize=["M", "S", "n_ga_m", "sk_c"])
    def gluon_bwd_kernel_sk(
        go_a, w_b, go_t, x_b, ga_out, gw_out, sk_part, sk_flag,
        M, S, n_ga_m, sk_c,
        SK: gl.constexpr, HID: gl.constexpr, NH: gl.constexpr, HD: gl.constexpr,
        GA_BM: gl.constexpr, GA_BN: gl.constexpr, GW_BM: gl.constexpr, GW_BN: gl.constexpr,
        BK: gl.constexpr, STAGES: gl.constexpr, GROUP: gl.constexpr, LOADER_REGS: gl.constexpr,
        LAZY: gl.constexpr = False,
        DIAG: gl.constexpr = 0,
    ):  # fmt: skip
        """v30's entry (``GluonConfig.stream_k``): the host-descriptor kernel's cooperative ring on one program an
        SM, one kind of tile whole and the other's K-steps split evenly over the programs (SK: 1 grad_attn's, 2
        grad_weight's), a tile split in two joined through ``sk_part`` (fp32, two 64-row halves a program) and
        ``sk_flag`` (int32, two a program, zero between launches); ``sk_c`` interleaves the stream's tiles
        (``_sk_tile``). Grid: the programs ``stream_k_kind`` checked. DIAG (a diagnostic, wrong results): 1 no
        partial stored or loaded (the flags kept), 2 no flag published or waited for, 3 neither."""
        gl.static_assert(GA_BM == 128 and GW_BM == 128 and GA_BN == GW_BN, "SK: both kinds' halves of one shape")
        dtype: gl.constexpr = go_a.dtype
        a_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, GW_BM], go_t.layout)
        b_ring = gl.allocate_shared_memory(dtype, [STAGES, BK, GW_BN], x_b.layout)
        epi0 = gl.allocate_shared_memory(dtype, [64, GW_BN], gw_out.layout)
        epi1 = gl.allocate_shared_memory(dtype, [64, GW_BN], gw_out.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        sync = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())  # [3]: LAZY's boot barrier
        if LAZY:
            mbarrier.init(sync.index(3), count=1)
        else:
            for i in gl.static_range(STAGES):
                mbarrier.init(ready.index(i), count=1)
                mbarrier.init(empty.index(i), count=2)
        gl.warp_specialize(
            [
                (_sk_consumer, (0, ga_out, gw_out, a_ring, b_ring, ready, empty, epi0, sync, sk_part, sk_flag, M, S,
                                n_ga_m, sk_c, SK, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY,
                                DIAG)),
                (_sk_consumer, (1, ga_out, gw_out, a_ring, b_ring, ready, empty, epi1, sync, sk_part, sk_flag, M, S,
                                n_ga_m, sk_c, SK, HID, NH, HD, GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY,
                                DIAG)),
                (_sk_loader_part, (go_a, w_b, go_t, x_b, a_ring, b_ring, ready, empty, sync, M, n_ga_m, sk_c, SK, HID,
                                   GA_BM, GA_BN, GW_BM, GW_BN, BK, STAGES, GROUP, LAZY)),
            ],
            [4, 1],
            [232, LOADER_REGS],
        )  # fmt: skip


# ------------------------------------------------------------------------------------------------ launcher
def _nvmma(block: list[int]) -> gl.NVMMASharedLayout:
    return gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)


def launch_arguments(
    go2: torch.Tensor, w2: torch.Tensor, x2: torch.Tensor, gw: torch.Tensor, ga: torch.Tensor, s: int,
    cfg: GluonConfig, plan: Plan, mc_flag: torch.Tensor | None = None,
    sk_workspace: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[tuple, dict]:  # fmt: skip
    """(positional arguments, constexpr keyword arguments) of one launch of ``gluon_bwd_kernel`` (pointers) or,
    with ``cfg.host_desc``, of ``gluon_bwd_kernel_host_desc``: for the launcher and for compiling ahead of time on a
    CPU host (``scripts/diag_gluon.py``). With ``cfg.multicast``, ``mc_flag`` is the clusters' launch counters (a
    placeholder of one int32 on the inputs' device if None: enough to compile) and the shared-memory offsets are 0
    until ``compile_multicast`` fills them in."""
    m = go2.shape[0]
    bk = cfg.bk
    if cfg.host_desc:
        go_a = GluonTensorDescriptor.from_tensor(go2, [cfg.ga_bm, bk], _nvmma([cfg.ga_bm, bk]))
        w_b = GluonTensorDescriptor.from_tensor(w2, [bk, 64], _nvmma([bk, 64]))
        go_t = GluonTensorDescriptor.from_tensor(go2, [bk, 64], _nvmma([bk, 64]))
        x_b = GluonTensorDescriptor.from_tensor(x2, [bk, 64], _nvmma([bk, 64]))
        # grad_attn_output (B, H, S, D) viewed (B*H*S, D): row (b*H + h)*S + s.
        ga_rows = ga.view(m // s * NUM_HEADS * s, HEAD_DIM)
        ga_wm = cfg.ga_bm // 2 if cfg.ga_bm >= 128 else cfg.ga_bm
        ga_out = GluonTensorDescriptor.from_tensor(ga_rows, [ga_wm, HEAD_DIM], _nvmma([ga_wm, HEAD_DIM]))
        gw_out = GluonTensorDescriptor.from_tensor(gw, [cfg.gw_bm // 2, 64], _nvmma([cfg.gw_bm // 2, 64]))
        descs = (go_a, w_b, go_t, x_b, ga_out, gw_out)
        args: tuple = (*descs, m, s, plan.n_ga_m, plan.p_ga)
    else:
        args = (go2, w2, x2, ga, gw, m, s, plan.n_ga_m, plan.p_ga)
    tiles = {"HID": HIDDEN, "NH": NUM_HEADS, "HD": HEAD_DIM, "GA_BM": cfg.ga_bm, "GA_BN": cfg.ga_bn, "GW_BM": cfg.gw_bm}
    tiles.update(GW_BN=cfg.gw_bn, BK=bk, STAGES=cfg.stages, GROUP=cfg.group, LOADER_REGS=cfg.loader_regs)
    if cfg.stream_k:  # SK's entry: the workspace after the descriptors, no P_GA, the split kind a constexpr
        kind = stream_k_kind(m, cfg, plan.programs)
        if not kind:
            raise ValueError(f"stream_k: M={m} on {plan.programs} programs has ranges too short to split")
        part, flag = sk_workspace or (
            torch.empty(1, dtype=torch.float32, device=go2.device),
            torch.zeros(1, dtype=torch.int32, device=go2.device),
        )
        args = (*descs, part, flag, m, s, plan.n_ga_m, stream_k_interleave(m, cfg, plan.programs, kind))
        return args, {"SK": kind, **tiles, "LAZY": cfg.lazy_init}
    constexprs = {
        "GA_FIRST": 2 if cfg.stagger else plan.ga_first,  # (launched_config: stagger only on a shared, ga-first plan)
        **tiles,
        "EPI_HOLD": cfg.epi_hold,
        "PINGPONG": cfg.pingpong_mode,
        "PP_DEPTH": cfg.pp_depth,
        "HOLD_REL": cfg.hold_release,
        "NSPLIT": 2 if cfg.halves else 1,
    }
    if cfg.l2_prefetch:  # keyword arguments, so that the entries' positional ones stay as they were
        constexprs["L2PF"] = cfg.l2_prefetch
        constexprs["PF_D"] = cfg.pf_distance
        if cfg.host_desc:
            constexprs.update(pf_go=go2, pf_w=w2, pf_x=x2)
    if cfg.k_rotate:
        constexprs["KROT"] = cfg.k_rotate
    if cfg.lazy_init:
        constexprs["LAZY"] = True
    if cfg.tmap_prefetch:
        constexprs["TMPF"] = True
    if cfg.next_prefetch:
        constexprs["NXPF"] = cfg.next_prefetch
        constexprs["NX_D"] = cfg.np_distance
    if cfg.epi_defer:
        constexprs["DEFER"] = cfg.epi_defer
    if cfg.serpentine:
        constexprs["SERP"] = True
    if cfg.epi_global:
        constexprs.update(EPI_G=cfg.epi_global | (4 if cfg.epi_vec else 0), ga_ptr=ga, gw_ptr=gw)
    if cfg.first_ahead:
        constexprs["FA"] = cfg.first_ahead
    if cfg.first_delay:
        constexprs["FD"] = cfg.first_delay
    if cfg.first_prefetch:
        constexprs["FPF"] = cfg.first_prefetch
    if cfg.maxnreg:  # a compile option, taken among the launch's keyword arguments (solo: two programs an SM)
        constexprs["maxnreg"] = cfg.maxnreg
    if cfg.multicast:
        if not pairs_programs(plan):
            raise ValueError(f"multicast: pairs of programs on tiles of one column block; not this plan: {plan}")
        flag = mc_flag if mc_flag is not None else torch.zeros(1, dtype=torch.int32, device=go2.device)
        constexprs.update(MC=cfg.multicast, MC_B=0, MC_RDY=0, MC_EMP=0, mc_flag=flag)
    return args, constexprs


def pairs_programs(plan: Plan) -> bool:
    """MC: whether the plan's programs 2c and 2c + 1 run the same number of tiles, each pair of one column block
    (an even number of programs and of partitioned grad_attn programs, an even number of grad_attn row blocks: with
    an even group, ``_tile_coords`` then gives tiles 2t and 2t + 1 one column block)."""
    return plan.programs % 2 == 0 and plan.p_ga % 2 == 0 and plan.n_ga_m % 2 == 0


def multicast_offsets(ttgir: str) -> dict[str, int]:
    """MC (v29): the offsets into the dynamic shared memory (``global_smem``) that Triton's own allocation pass gives
    the kernel's B ring and its ready and empty barriers (``MC_B``, ``MC_RDY``, ``MC_EMP``), read by running that
    pass (the pinned Triton's, as ``make_llir`` runs it) on the compiled kernel's TTGIR: the multicast and the remote
    arrivals address them by offset, as Gluon 3.6 gives no shared-memory address of an allocation."""
    ctx = ir.context()
    ir.load_dialects(ctx)
    nvidia.load_dialects(ctx)
    with tempfile.NamedTemporaryFile("w", suffix=".ttgir") as fh:
        fh.write(ttgir)
        fh.flush()
        mod = ir.parse_mlir_module(fh.name, ctx)
    pm = ir.pass_manager(ctx)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, 90, 87)  # sm_90, PTX ISA 8.7: the compile's target
    pm.run(mod, "multicast_offsets")
    found = dict(re.findall(r"%(\w+) = ttg.local_alloc \{allocation.offset = (\d+) : i32\}", str(mod)))
    try:
        return {"MC_B": int(found["b_ring"]), "MC_RDY": int(found["ready"]), "MC_EMP": int(found["empty"])}
    except KeyError as exc:
        raise RuntimeError(f"multicast_offsets: no allocation {exc} in the kernel (found {sorted(found)})") from None


def compile_multicast(compile_fn, args: tuple, constexprs: dict) -> tuple[object, dict[str, int]]:
    """MC: the kernel compiled (``compile_fn(args, constexprs)``) with the shared-memory offsets it names: once with
    placeholders to read them (``multicast_offsets``), again with them, checked to be where the second compile put
    its allocations (the inline PTX allocates nothing, so they do not move). Returns (compiled, offsets)."""
    offsets = multicast_offsets(compile_fn(args, constexprs).asm["ttgir"])
    kernel = compile_fn(args, dict(constexprs, **offsets))
    again = multicast_offsets(kernel.asm["ttgir"])
    if again != offsets:
        raise RuntimeError(f"compile_multicast: the allocations moved ({offsets} -> {again})")
    return kernel, offsets


def entry_kernel(cfg: GluonConfig):
    """The compiled entry point a configuration launches."""
    if cfg.stream_k:
        return gluon_bwd_kernel_sk
    return gluon_bwd_kernel_host_desc if cfg.host_desc else gluon_bwd_kernel


def launched_config(m: int, cfg: GluonConfig, plan: Plan) -> GluonConfig:
    """The configuration a launch of ``plan`` runs: ``cfg`` without the switches the plan cannot take (multicast
    where its programs do not pair, stream_k where its ranges are too short to split, stagger where the programs do
    not share a plan that runs grad_attn tiles first)."""
    if cfg.multicast and not pairs_programs(plan):
        cfg = replace(cfg, multicast=0)
    if cfg.stream_k and not stream_k_kind(m, cfg, plan.programs):
        cfg = replace(cfg, stream_k=False)
    if cfg.stagger and (plan.p_ga or not plan.ga_first):
        cfg = replace(cfg, stagger=False)
    return cfg


def _sk_tiles(m: int, cfg: GluonConfig) -> tuple[int, int, int, int]:
    """SK: (grad_attn tiles, their K-steps, grad_weight tiles, their K-steps) of ``cfg`` at M rows."""
    n_ga, n_gw = -(-m // cfg.ga_bm) * (HIDDEN // cfg.ga_bn), (HIDDEN // cfg.gw_bm) * (HIDDEN // cfg.gw_bn)
    return n_ga, HIDDEN // cfg.bk, n_gw, -(-m // cfg.bk)


def stream_k_ranges(m: int, cfg: GluonConfig, programs: int, kind: int) -> list[tuple[int, int]]:
    """SK (v30): each program's range [z0, z1) of the stream kind's K-steps (``kind`` 1: grad_attn's split, 2:
    grad_weight's), all its tiles' in a row, when the other kind's tiles go whole to programs p, p + P, ...: program p
    runs floor((p + 1) T / P) - floor(p T / P) of the T K-steps (``_sk_ranges`` in the kernel: the same arithmetic)."""
    n_ga, l_ga, n_gw, l_gw = _sk_tiles(m, cfg)
    n_w, l_w = (n_ga, l_ga) if kind == 2 else (n_gw, l_gw)
    total = n_ga * l_ga + n_gw * l_gw
    base, rem = divmod(n_w, programs)

    def z(p: int) -> int:
        return (p * total) // programs - l_w * (p * base + min(p, rem))

    return [(z(p), z(p + 1)) for p in range(programs)]


def stream_k_interleave(m: int, cfg: GluonConfig, programs: int, kind: int) -> int:
    """SK: ``sk_c``, the tiles of the stream kind a program's range spans, rounded (1: the stream's tiles in their
    grouped order), where it divides the stream's tiles: the kernel's ``_sk_tile`` interleaves the stream by it."""
    if cfg.sk_order == "linear":
        return 1
    n_ga, _, n_gw, _ = _sk_tiles(m, cfg)
    n_s = n_ga if kind == 1 else n_gw
    c = max(1, round(n_s / programs))  # the stream's K-steps spread evenly: n_s / P tiles a range
    return c if n_s % c == 0 else 1


@functools.lru_cache(maxsize=64)  # asked by plan_for, launched_config and launch_arguments for every launch
def stream_k_kind(m: int, cfg: GluonConfig, programs: int) -> int:
    """SK: which kind's K-steps a stream-K launch of ``programs`` programs splits (1 grad_attn, 2 grad_weight: the
    kind of the shorter tiles, grad_weight on a tie), or 0 where it does not apply: some program's range shorter
    than one tile of the stream kind (a tile would then be split three ways, or a program run no stream step)."""
    if not cfg.stream_k or programs < 2:
        return 0
    _, l_ga, _, l_gw = _sk_tiles(m, cfg)
    kind, length = (2, l_gw) if l_gw <= l_ga else (1, l_ga)
    if any(z1 - z0 < length for z0, z1 in stream_k_ranges(m, cfg, programs, kind)):
        return 0
    return kind


_ALLOCATOR_SET = False


def _ensure_allocator() -> None:
    """Device-side TMA descriptors live in global scratch, which Triton asks of this allocator."""
    global _ALLOCATOR_SET
    if not _ALLOCATOR_SET:
        triton.set_allocator(
            lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=torch.cuda.current_device())
        )
        _ALLOCATOR_SET = True


@functools.lru_cache(maxsize=64)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def plan_for(m: int, cfg: GluonConfig, programs: int) -> Plan:
    """The plan of a launch at M rows on ``programs`` program slots, one an SM (``solo``: two a slot, so the plan
    is made for ``programs_per_sm`` times as many)."""
    programs *= cfg.programs_per_sm
    plan = plan_schedule(m, cfg.kernel_config(), programs)
    if stream_k_kind(m, cfg, programs):  # SK: every program of the SMs, untrimmed (each runs its share of steps)
        return replace(plan, programs=programs)
    if cfg.gw_first and not plan.p_ga:
        plan = with_first(plan, m, cfg.kernel_config(), ga_first=False)
    return plan


def launch(
    go2: torch.Tensor, w2: torch.Tensor, x2: torch.Tensor, gw: torch.Tensor, ga: torch.Tensor, s: int,
    cfg: GluonConfig,
) -> None:  # fmt: skip
    """One launch of the Gluon kernel on the current stream of the inputs' device (CUDA, sm_90)."""
    device = go2.device
    index = device.index if device.index is not None else torch.cuda.current_device()
    plan = plan_for(go2.shape[0], cfg, _sm_count(index))
    cfg = launched_config(go2.shape[0], cfg, plan)  # (plans that do not take multicast / stream_k / stagger: without)
    if cfg.multicast:
        _launch_multicast(go2, w2, x2, gw, ga, s, cfg, plan, device, index)
        return
    workspace = _sk_workspace(cfg, plan.programs, device, index) if cfg.stream_k else None
    args, constexprs = launch_arguments(go2, w2, x2, gw, ga, s, cfg, plan, sk_workspace=workspace)
    if not cfg.host_desc:
        _ensure_allocator()
    with torch.cuda.device(device):
        entry_kernel(cfg)[(plan.programs,)](*args, **constexprs, num_warps=4)


# SK (v30): the workspace (fp32 partials, int32 flags) by (device, stream): a launch's flags are back at 0 when it
# ends, and launches on one stream run one after the other (two streams sharing it could mix their partials up)
_SK_WORKSPACE: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _sk_workspace(cfg: GluonConfig, programs: int, device: torch.device, index: int) -> tuple[torch.Tensor, ...]:
    """SK: (partials, flags) for ``programs`` programs of ``cfg`` on the current stream, made once (flags zeroed)."""
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
    part_size = 2 * programs * 64 * cfg.gw_bn
    found = _SK_WORKSPACE.get((index, stream))
    if found is None or found[0].numel() < part_size or found[1].numel() < 2 * programs:
        found = (
            torch.empty(part_size, dtype=torch.float32, device=device),
            torch.zeros(2 * programs, dtype=torch.int32, device=device),
        )
        _SK_WORKSPACE[(index, stream)] = found
    return found


# MC (v29): the compiled kernels and their offsets by (device, configuration, GA_FIRST), and the clusters' launch
# counters by (device, stream): a launch's two CTAs of a cluster wait for each other's add; launches on one stream
# run one after the other, so each finds its counters even (two streams sharing counters could mix launches up)
_MULTICAST: dict[tuple, tuple[object, dict[str, int]]] = {}
_MC_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}


def _launch_multicast(
    go2: torch.Tensor, w2: torch.Tensor, x2: torch.Tensor, gw: torch.Tensor, ga: torch.Tensor, s: int,
    cfg: GluonConfig, plan: Plan, device: torch.device, index: int, extra: dict | None = None,
) -> None:  # fmt: skip
    """MC: one cluster launch (2 CTAs a cluster, programs / 2 clusters) of the compiled kernel, through the pinned
    Triton's launcher (``kernel/fast_launch.py``'s call, with ``num_ctas`` 2 in the packed metadata: the launcher
    then sets the cluster dimension; the kernel itself is compiled for one CTA and addresses its peer in PTX).
    ``extra``: more keyword arguments of the entry (the trace's copy, scripts/diag_gluon_timeline.py)."""
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        counters = _MC_COUNTERS.get((index, stream))
        if counters is None or counters.numel() < plan.programs // 2:
            counters = torch.zeros(max(plan.programs // 2, _sm_count(index)), dtype=torch.int32, device=device)
            _MC_COUNTERS[(index, stream)] = counters
        args, constexprs = launch_arguments(go2, w2, x2, gw, ga, s, cfg, plan, mc_flag=counters)
        constexprs.update(extra or {})
        fn = entry_kernel(cfg)
        key = (index, cfg, plan.ga_first)
        if key not in _MULTICAST:
            _MULTICAST[key] = compile_multicast(
                lambda a, c: fn.warmup(*a, **c, num_warps=4, grid=(plan.programs,)), args, constexprs
            )
        compiled, offsets = _MULTICAST[key]
        bound = fn.signature.bind(*args, **dict(constexprs, **offsets))
        bound.apply_defaults()
        meta = compiled.packed_metadata
        compiled.run(plan.programs // 2, 1, 1, stream, compiled.function, (meta[0], 2, meta[2]), None, None, None,
                     *bound.arguments.values())  # fmt: skip
