"""Device diagnostic (kernel/NOTES.md, item 39): the floor of any kernel of this problem at M rows, measured under the
benchmark's own timing protocol (``solci bench``'s: CUPTI span, L2 flushed, fresh inputs at new addresses), side by
side with the two cuBLAS matmuls and the table's kernel in one run.

The floor is ``diag_wgmma_ceiling.wgmma_loop``: two warpgroup programs an SM, each issuing [64, 64] x [64, 128]
warpgroup MMAs from shared memory (its "n128x2": the cooperative kernel's per-SM rate, 0.303 us a 128x128x64 step on
the H200 with no loads), after one load of the iteration's fresh grad_output (cold: the first data a kernel waits for
after the flush), with no other load and no output but a sum a program. Two plans: ``whole``, the busiest SM's
K-steps of the table's whole-tile plan (64 at M = 1024 on 128 SMs); ``split``, the problem's K-steps spread evenly on
every SM (62.06 at 1024: any split of tiles at no cost). A kernel that loads its operands, keeps its tiles and writes
its outputs can only be slower, and its clock no higher (the loop alone draws less power), so a target below the
``split`` floor is out of reach on the GPU measured. Last column: the whole floor's loop stamped in the kernel (global
timer and SM clock at its start and end, five launches after a flush): its time a step and the SM clock it ran at,
to set against the table's kernel's loops in the trace (``scripts/diag_gluon_timeline.py``'s MHz).

``--io`` adds the floors with what no kernel can leave out (item 41, runs c-l), each timed beside cuBLAS:
- ``io_floor_loop``: one 8-warp program an SM (the cooperative kernel's two warpgroups), its tile's first two K-steps
  loaded by TMA from the iteration's cold inputs, the floor's MMAs from them, its tile stored by TMA at its end; on
  both plans, cut into the table's tiles (``plan_tiles``: a boundary store at each tile's end), cut in two (one
  boundary), and in the 128x256 plan (``n256_plan``); stamped (first data, the loop's time a step and clock, the
  store; cut and uncut programs apart);
- ``fixup_floor_loop``: the ``split`` plan in two tiles with a split plan's fix-ups (the head's fp32 partial written
  at the boundary, another program's added at the end), and each fix-up alone;
- the ``split`` plan in two tiles with its second tile reduce-added into the output by TMA (``REDUCE``, item 41 runs
  r-s: a split plan's cheapest fix-up, the piece finished first stored and the other added onto it in L2), checked
  in the run against torch (``reduce_check``);
- with ``--sink N``, ``ws_floor_loop``: the io floor in the kernel's partitions (two consumer warpgroups and a loader
  warp), the loader streaming every later K-step's blocks beside the MMAs at an N-stage ring's pace into the ring the
  MMAs read from (their values do not matter here): the loads' traffic without their waits; in the plan's tiles and
  in the ``split`` plan's two, stored and reduce-added.

Usage (GPU): PYTHONPATH=. python scripts/diag_floor.py [--ms 512,1024,2048] [--iters 50] [--only-on H200]
Usage (CPU): PYTHONPATH=. python scripts/diag_floor.py --plan-only   (the steps a program of each plan runs)
             PYTHONPATH=.:scripts python scripts/diag_floor.py --compile-only   (the io floor for sm_90, no GPU)
"""

from __future__ import annotations

import argparse
import math
import statistics


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ms", default="512,1024,2048", help="rows M (S = 128), comma-separated")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--target", type=float, default=0.80, help="the issue's ratio to cuBLAS, printed against")
    ap.add_argument("--plan-only", action="store_true", help="print each plan's steps a program (no GPU)")
    ap.add_argument("--io", action="store_true", help="also the floor with the first fill and the last tile's store")
    ap.add_argument("--compile-only", action="store_true", help="compile the io floor for sm_90 here (no GPU)")
    ap.add_argument(
        "--sink", type=int, default=0, help="with --io: also the io floor with a loader warp's loads beside its MMAs"
    )
    ap.add_argument(
        "--only-on",
        default="",
        metavar="NAME",
        help="measure only on a GPU whose name contains NAME (e.g. H200); on another, one line and exit 3",
    )
    ap.add_argument("--watchdog-s", type=float, default=240, help="dump every thread's stack and leave after this")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch and Triton load
    ARGS = parse_args()

import torch  # noqa: E402
from diag_wgmma_ceiling import _stamp  # noqa: E402  (scripts/ is on the path when this runs as a script)
from triton._C.libtriton import ir  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language._core import builtin  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

from kernel import gluon_backward as gb  # noqa: E402
from kernel.configs import bucket_for  # noqa: E402
from problem.workload import HIDDEN  # noqa: E402

SEQ = 128
STEP = 64  # the K-step of a 128x128x64 step (two warpgroups' [64, 64] x [64, 128])


def total_steps(m: int) -> int:
    """128x128x64 steps of the whole problem at M rows: grad_attn (M x 2048, K = 2048) and grad_weight (2048 x 2048,
    K = M)."""
    ga = math.ceil(m / 128) * (HIDDEN // 128) * (HIDDEN // STEP)
    gw = (HIDDEN // 128) ** 2 * math.ceil(m / STEP)
    return ga + gw


def _program_tiles(m: int, sms: int) -> tuple[object, list[list[int]]]:
    """The table's plan at M rows on ``sms`` SMs and, for each of its programs, its tiles' 128x128x64-equivalent steps
    in the order it runs them: partitioned, programs below ``p_ga`` grad_attn tiles only and the others grad_weight
    tiles only; otherwise each program's grad_attn and grad_weight tiles (``plan.ga_first``: grad_attn first)."""
    cfg = gb.GLUON_TABLE[bucket_for(m)][0]
    plan = gb.plan_for(m, cfg, sms)
    ga = (cfg.ga_bm * cfg.ga_bn) // (128 * 128) * (HIDDEN // STEP)
    gw = (cfg.gw_bm * cfg.gw_bn) // (128 * 128) * math.ceil(m / STEP)
    programs = []
    for p in range(plan.programs):
        if plan.p_ga:
            if p < plan.p_ga:
                lengths = [ga] * len(range(p, plan.n_ga, plan.p_ga))
            else:
                lengths = [gw] * len(range(p - plan.p_ga, plan.n_gw, plan.programs - plan.p_ga))
        else:
            n_ga, n_gw = len(range(p, plan.n_ga, plan.programs)), len(range(p, plan.n_gw, plan.programs))
            lengths = [ga] * n_ga + [gw] * n_gw if plan.ga_first else [gw] * n_gw + [ga] * n_ga
        programs.append(lengths)
    return plan, programs


def plans(m: int, sms: int) -> dict[str, tuple[int, int]]:
    """name -> (SMs busy, steps each): ``whole``, the table's plan at M (the busiest program's 128x128x64-equivalent
    steps, on its programs); ``split``, the problem's steps spread evenly on every SM (rounded up)."""
    plan, programs = _program_tiles(m, sms)
    busiest = max(sum(lengths) for lengths in programs)
    return {"whole": (plan.programs, busiest), "split": (sms, math.ceil(total_steps(m) / sms))}


def plan_tiles(m: int, sms: int) -> tuple[int, tuple[int, int]] | None:
    """The table's plan at M rows as the io floor's cut: (``cut_from``, (first, every)) in 128x128x64 steps, the
    busiest program's tiles (at a tie, the one with the most boundaries) in the order it runs them; ``cut_from`` =
    ``p_ga`` where that program is a partitioned plan's grad_weight one. None where its tiles after the first are not
    all of one length."""
    plan, programs = _program_tiles(m, sms)
    _, _, busiest = max((sum(lengths), len(lengths), p) for p, lengths in enumerate(programs))
    lengths = programs[busiest]
    if len(set(lengths[1:])) > 1:
        return None
    if len(lengths) == 1:
        return 0, (0, 0)
    return (plan.p_ga if plan.p_ga and busiest >= plan.p_ga else 0), (lengths[0], lengths[1])


@gluon.jit
def _tile_origin(n_row, BN: gl.constexpr):
    """This program's 128xBN grad_attn tile: (row, column) of row block ``pid % n_row``, column block ``pid //
    n_row``."""
    pid = gl.program_id(0)
    return (pid % n_row) * 128, ((pid // n_row) % (2048 // BN)) * BN


@gluon.jit
def _load_first_two(a_desc, b_desc, a_s, b_s, bars, row, col, BN: gl.constexpr):
    """The first two K-steps' blocks of the 128xBN tile at (``row``, ``col``) by TMA into stages 0 and 1 of ``a_s``
    and ``b_s``, each stage's arrival on its barrier of ``bars``."""
    for f in gl.static_range(2):
        bar = bars.index(f)
        mbarrier.expect(bar, (128 + BN) * 64 * 2)
        tma.async_copy_global_to_shared(a_desc, [row, f * 64], bar, a_s.index(f))
        for j in gl.static_range(BN // 64):
            tma.async_copy_global_to_shared(b_desc, [f * 64, col + j * 64], bar, b_s.index(f).slice(j * 64, 64, dim=1))


@gluon.jit
def _store_stamps(stamps_ptr, pid, t_entry, t_data, t_loop, loop_clocks, t_end):
    """A program's five stamps (entry, first data, loop end, the loop's clocks, stored) at row ``pid``."""
    base = stamps_ptr + pid * 5
    gl.store(base, t_entry)
    gl.store(base + 1, t_data)
    gl.store(base + 2, t_loop)
    gl.store(base + 3, loop_clocks)
    gl.store(base + 4, t_end)


@gluon.jit
def _tile_length(t, steps, first, every, cut):
    """Tile ``t``'s steps: all ``steps`` in one tile, or cut (``first``, then ``every``)."""
    length = steps
    if cut:
        length = every
        if t == 0:
            length = first
    return length


@gluon.jit
def _tile_mmas(a_s, b_s, bars, i, length, acc_layout: gl.constexpr, BN: gl.constexpr):
    """A tile's ``length`` 128xBNx64 MMAs from the two stages, one group in flight, its accumulator fresh (outside the
    MMA loop: a reset inside it makes ptxas serialise every wgmma, its C7515, docs/h100/v42b_floor_io.log), the
    second stage waited for at the program's second step ``i`` == 1. Returns (the accumulator, the next ``i``)."""
    acc = gl.zeros([128, BN], gl.float32, acc_layout)
    for _k in range(length):
        s = i % 2
        if i == 1:
            mbarrier.wait(bars.index(1), 0)
        acc = warpgroup_mma(a_s.index(s), b_s.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=(acc,))
        i += 1
    acc = warpgroup_mma_wait(0, deps=(acc,))
    return acc, i


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """``tma.async_copy_shared_to_global`` as a reduce-add: the box at ``coord`` of ``tensor_desc``'s tensor plus the
    shared-memory block ``src``, added in L2 (``cp.reduce.async.bulk.tensor ... .add``), completed by ``store_wait``
    as the stores are. Triton 3.6.0's Gluon builder has the op (the tile language's descriptor ``atomic_add`` lowers
    to it) but its Hopper ``tma`` module does not name it."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


@gluon.jit
def _put_boxes(c_desc, src, row, col, BN: gl.constexpr, ADD: gl.constexpr):
    """The shared-memory block ``src`` (BN columns) written at (``row``, ``col``) of ``c_desc``'s tensor by BN / 64
    TMA stores of 64 columns each (``ADD``: TMA reduce-adds into what is there)."""
    for j in gl.static_range(BN // 64):
        if ADD:
            _tma_reduce_add(c_desc, [row, col + j * 64], src.slice(j * 64, 64, dim=1))
        else:
            tma.async_copy_shared_to_global(c_desc, [row, col + j * 64], src.slice(j * 64, 64, dim=1))


@gluon.jit
def _store_tile(c_desc, c_s, acc, pid, BN: gl.constexpr, ADD: gl.constexpr = False):
    """A 128xBN tile's accumulator stored as bf16 through ``c_s`` (``_put_boxes``: ``ADD`` reduce-adds it), once the
    last tile's stores have read ``c_s``."""
    tma.store_wait(0)
    c_s.store(acc.to(c_desc.dtype))
    fence_async_shared()
    gl.thread_barrier()
    _put_boxes(c_desc, c_s, (pid % 16) * 128, (pid // 16) * BN, BN, ADD)


@gluon.jit
def io_floor_loop(
    a_desc,
    b_desc,
    c_desc,
    steps,
    n_row,
    first,
    every,
    cut_from,
    stamps_ptr,
    STAMP: gl.constexpr,
    BN: gl.constexpr,
    REDUCE: gl.constexpr = False,
):
    """One program an SM, 8 warps (two warpgroups of 64 rows, as the cooperative kernel's): the first two K-steps of
    its 128xBN grad_attn tile (row block ``pid % n_row``, column block ``pid // n_row``) loaded by TMA into two
    stages, then ``steps`` 128xBNx64 MMAs from them, one group in flight (the floor's loop), then the tile stored as
    bf16 through shared memory by TMA (column block ``pid // 16``, row block ``pid % 16`` of ``c_desc``'s tensor).
    ``first`` > 0: the steps of programs from ``cut_from`` on are tiles (``first`` steps, then ``every`` each), and at
    each boundary the finished tile is stored as the last one is before the next tile's first MMA (a whole-tile
    plan's handoff, its data already in). ``REDUCE``: a cut program's last tile reduce-added by TMA into the output
    instead of stored (a split plan's piece finished second, added to the piece stored first). ``STAMP``: five int64
    a program (entry, first data, loop end, the loop's clocks, stored)."""
    dtype: gl.constexpr = a_desc.dtype
    pid = gl.program_id(0)
    t_entry, _ = _stamp()
    row, col = _tile_origin(n_row, BN)
    a_s = gl.allocate_shared_memory(dtype, [2, 128, 64], a_desc.layout)
    b_s = gl.allocate_shared_memory(dtype, [2, 64, BN], b_desc.layout)
    c_s = gl.allocate_shared_memory(dtype, [128, BN], c_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    fence_async_shared()
    _load_first_two(a_desc, b_desc, a_s, b_s, bars, row, col, BN)
    mbarrier.wait(bars.index(0), 0)
    t_data, c_data = _stamp()
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, BN, 16])
    # the tiles' loops one inside the other, the boundary's store between them: an accumulator reset inside the MMA
    # loop makes ptxas serialise every wgmma (its C7515), 45 % more time a step (docs/h100/v42b_floor_io.log)
    cut = first > 0 and pid >= cut_from
    n_tiles = 1 + (steps - first) // every if cut else 1
    i = 0
    t_loop, c_loop = t_data, c_data  # (the last tile's loop end, stamped below)
    for t in range(n_tiles):
        length = _tile_length(t, steps, first, every, cut)
        acc, i = _tile_mmas(a_s, b_s, bars, i, length, acc_layout, BN)
        if t == n_tiles - 1:
            t_loop, c_loop = _stamp()
        if REDUCE and cut and t == n_tiles - 1:
            _store_tile(c_desc, c_s, acc, pid, BN, ADD=True)
        else:
            _store_tile(c_desc, c_s, acc, pid, BN)
    tma.store_wait(0)
    t_end, _ = _stamp()
    if STAMP:
        _store_stamps(stamps_ptr, pid, t_entry, t_data, t_loop, c_loop - c_data, t_end)


@gluon.jit
def fixup_floor_loop(
    a_desc, b_desc, c_desc, ws_desc, steps, n_row, first, stamps_ptr, STAMP: gl.constexpr, PARTS: gl.constexpr = 3
):
    """The io floor of a split plan whose programs each run the head of one tile and then the tail of another (one
    boundary, as stream-K's with its fix-ups): ``first`` 128x128x64 steps, then the head's fp32 accumulator stored
    by TMA into the workspace ``ws_desc`` (its row block ``pid``: the partial another program adds); then the other
    ``steps - first``, beside which the partial of row block ``pid + 1`` (another program's head) is loaded by TMA,
    to be added to the accumulator before the tile is stored as bf16. The partial is read without waiting for its
    writer (it was written at the writer's boundary, half a run before): a floor. Loads, MMAs, stamps and the store as
    ``io_floor_loop``'s, 8 warps, one program an SM. ``PARTS``: which fix-ups run (1: the partial written, 2: the
    other's read and added; 3 both, 0 neither: the two tiles' loops alone, their boundary storing nothing)."""
    dtype: gl.constexpr = a_desc.dtype
    pid = gl.program_id(0)
    t_entry, _ = _stamp()
    row, col = _tile_origin(n_row, 128)
    a_s = gl.allocate_shared_memory(dtype, [2, 128, 64], a_desc.layout)
    b_s = gl.allocate_shared_memory(dtype, [2, 64, 128], b_desc.layout)
    c_s = gl.allocate_shared_memory(dtype, [128, 128], c_desc.layout)
    w_s = gl.allocate_shared_memory(gl.float32, [128, 128], ws_desc.layout)
    r_s = gl.allocate_shared_memory(gl.float32, [128, 128], ws_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [3, 1], mbarrier.MBarrierLayout())
    for f in gl.static_range(3):
        mbarrier.init(bars.index(f), count=1)
    fence_async_shared()
    _load_first_two(a_desc, b_desc, a_s, b_s, bars, row, col, 128)
    mbarrier.wait(bars.index(0), 0)
    t_data, c_data = _stamp()
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, 128, 16]
    )
    other = ((pid + 1) % gl.num_programs(0)) * 128
    i = 0
    t_loop, c_loop = t_data, c_data
    for t in range(2):
        length = first
        if t == 1:
            length = steps - first
            if PARTS & 2:  # the other program's partial, beside the tail's MMAs
                mbarrier.expect(bars.index(2), 128 * 128 * 4)
                for q in gl.static_range(4):
                    tma.async_copy_global_to_shared(
                        ws_desc, [other, q * 32], bars.index(2), r_s.slice(q * 32, 32, dim=1)
                    )
        acc, i = _tile_mmas(a_s, b_s, bars, i, length, acc_layout, 128)
        if t == 0:  # the head's partial, fp32, for another program to add
            if PARTS & 1:
                w_s.store(acc)
                fence_async_shared()
                gl.thread_barrier()
                for q in gl.static_range(4):
                    tma.async_copy_shared_to_global(ws_desc, [pid * 128, q * 32], w_s.slice(q * 32, 32, dim=1))
        else:
            t_loop, c_loop = _stamp()
            if PARTS & 2:
                mbarrier.wait(bars.index(2), 0)
                acc = acc + r_s.load(acc_layout)
            _store_tile(c_desc, c_s, acc, pid, 128)
    tma.store_wait(0)
    t_end, _ = _stamp()
    if STAMP:
        _store_stamps(stamps_ptr, pid, t_entry, t_data, t_loop, c_loop - c_data, t_end)


def fixup_workspace(busy: int, device) -> tuple[torch.Tensor, TensorDescriptor]:
    """``fixup_floor_loop``'s workspace: one fp32 128x128 partial a program, in [128, 32] boxes (128-byte rows)."""
    ws = torch.zeros(busy * 128, 128, dtype=torch.float32, device=device)
    layout = gl.NVMMASharedLayout.get_default_for([128, 32], gl.float32)
    return ws, TensorDescriptor.from_tensor(ws, [128, 32], layout)


PACED = gl.constexpr(32)  # the step barriers of ws_floor_loop's two sides, each reused every 32 steps
LAG = gl.constexpr(16)  # about the most steps its consumers run ahead of its loader's issue (no barrier lapped)


@gluon.jit
def _ws_consumer(
    WG: gl.constexpr, a_s, b_s, c_s, c_desc, bars, paced, issued, boot, steps, first, every, cut_from, t_entry,
    stamps_ptr, STAMP: gl.constexpr, REDUCE: gl.constexpr,
):  # fmt: skip
    """``ws_floor_loop``'s warpgroup WG: its 64 rows of every step's 128x128x64 MMAs from the two stages of the
    first data (no wait for the data of later steps: only, where the loader has fallen ``LAG`` steps behind, for
    its issue of the step ``LAG`` back, which keeps both sides within one use of every barrier), an arrival on
    ``paced`` after each step's wait (the step before retired: the kernel's release of a ring stage), its 64x128
    half of each tile stored by TMA at the tile's end (``REDUCE``: a cut program's last tile reduce-added)."""
    dtype: gl.constexpr = c_s.dtype
    pid = gl.program_id(0)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16]
    )
    mbarrier.wait(boot, 0)
    mbarrier.wait(bars.index(0), 0)
    t_data, c_data = _stamp()
    cut = first > 0 and pid >= cut_from
    n_tiles = 1 + (steps - first) // every if cut else 1
    half = c_s.index(WG)
    i = 0
    t_loop, c_loop = t_data, c_data
    for t in range(n_tiles):
        length = _tile_length(t, steps, first, every, cut)
        acc = gl.zeros([64, 128], gl.float32, acc_layout)
        for _k in range(length):
            s = i % 2
            if i == 1:
                mbarrier.wait(bars.index(1), 0)
            if i >= 2 + LAG and (i - 2 - LAG) % 8 == 0:  # the loader's load i - 2 - LAG issued (a word every 8)
                g = (i - 2 - LAG) // 8
                mbarrier.wait(issued.index(g % 8), (g // 8) & 1)
            acc = warpgroup_mma(a_s.index(s).slice(WG * 64, 64, dim=0), b_s.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(acc,))
            mbarrier.arrive(paced.index(i % PACED), count=1)
            i += 1
        acc = warpgroup_mma_wait(0, deps=(acc,))
        if t == n_tiles - 1:
            t_loop, c_loop = _stamp()
        tma.store_wait(0)
        gl.thread_barrier()
        half.store(acc.to(dtype))
        fence_async_shared()
        gl.thread_barrier()
        row, col = (pid % 16) * 128 + WG * 64, (pid // 16) * 128
        if REDUCE and cut and t == n_tiles - 1:
            _put_boxes(c_desc, half, row, col, 128, ADD=True)
        else:
            _put_boxes(c_desc, half, row, col, 128, ADD=False)
    tma.store_wait(0)
    t_end, _ = _stamp()
    if STAMP and WG == 0:
        _store_stamps(stamps_ptr, pid, t_entry, t_data, t_loop, c_loop - c_data, t_end)


@gluon.jit
def _ws_consumer0(a_s, b_s, c_s, c_desc, bars, paced, issued, boot, steps, first, every, cut_from, t_entry,
                  stamps_ptr, STAMP: gl.constexpr, REDUCE: gl.constexpr):  # fmt: skip
    _ws_consumer(0, a_s, b_s, c_s, c_desc, bars, paced, issued, boot, steps, first, every, cut_from, t_entry,
                 stamps_ptr, STAMP, REDUCE)  # fmt: skip


@gluon.jit
def _ws_consumer1(a_s, b_s, c_s, c_desc, bars, paced, issued, boot, steps, first, every, cut_from, t_entry,
                  stamps_ptr, STAMP: gl.constexpr, REDUCE: gl.constexpr):  # fmt: skip
    _ws_consumer(1, a_s, b_s, c_s, c_desc, bars, paced, issued, boot, steps, first, every, cut_from, t_entry,
                 stamps_ptr, STAMP, REDUCE)  # fmt: skip


@gluon.jit
def _ws_loader(a_desc, b_desc, ring_a, ring_b, bars, paced, issued, boot, sink_bars, steps, n_row,
               STAGES: gl.constexpr):  # fmt: skip
    """``ws_floor_loop``'s loader warp: the first two K-steps' blocks into ring slots 0 and 1 (the MMAs' operands),
    then the step barriers initialised (after those loads, as the kernel's lazy init), then every later step n's
    blocks by TMA into slot n % STAGES once the consumers have retired step n - STAGES (a ring of STAGES stages'
    pace) and the slot's last load has landed; the slots the MMAs read are overwritten too (their values do not
    matter here, their timing does). Every 8th load's issue arrived on ``issued``; the last loads waited for before
    the program ends."""
    row, col = _tile_origin(n_row, 128)
    _load_first_two(a_desc, b_desc, ring_a, ring_b, bars, row, col, 128)
    for f in gl.static_range(PACED):  # (the allocations' inits interleaved: no barrier between them)
        mbarrier.init(paced.index(f), count=2)
        if f < 8:
            mbarrier.init(issued.index(f), count=1)
        if f < STAGES:
            mbarrier.init(sink_bars.index(f), count=1)
    fence_async_shared()
    mbarrier.arrive(boot, count=1)
    for n in range(2, steps):
        if n >= STAGES:
            c = n - STAGES + 1  # the consumers' arrival at step c: step n - STAGES retired, its stage free
            mbarrier.wait(paced.index(c % PACED), (c // PACED) & 1)
        slot = n % STAGES
        prev = n - STAGES  # the slot's last load: the first data's (landed before the consumers began) or a sink load
        if prev >= 2:
            mbarrier.wait(sink_bars.index(slot), ((prev - slot) // STAGES - (slot < 2)) & 1)
        kk = (n % (2048 // 64)) * 64
        mbarrier.expect(sink_bars.index(slot), 2 * 128 * 64 * 2)
        tma.async_copy_global_to_shared(a_desc, [row, kk], sink_bars.index(slot), ring_a.index(slot))
        for q in gl.static_range(2):
            tma.async_copy_global_to_shared(
                b_desc, [kk, col + q * 64], sink_bars.index(slot), ring_b.index(slot).slice(q * 64, 64, dim=1)
            )
        ld = n - 2
        if ld % 8 == 0:
            mbarrier.arrive(issued.index((ld // 8) % 8), count=1)
    for f in gl.static_range(STAGES):  # each slot's last load (its k-th into the slot, k counted from 0)
        last = f + STAGES * ((steps - 1 - f) // STAGES)
        if steps - 1 >= f and last >= 2:
            mbarrier.wait(sink_bars.index(f), ((last - f) // STAGES - (f < 2)) & 1)


@gluon.jit
def ws_floor_loop(a_desc, b_desc, c_desc, steps, n_row, first, every, cut_from, stamps_ptr, STAMP: gl.constexpr,
                  STAGES: gl.constexpr, REDUCE: gl.constexpr = False):  # fmt: skip
    """The io floor with the pipeline's load traffic beside its MMAs, from a loader warp of its own (the kernel's
    partitions: two consumer warpgroups and a loader warp, ``num_warps`` = 4): the consumers run the io floor's MMAs
    on the first two steps' data (ring slots 0 and 1) and wait for no later data (only for the loader's issue ``LAG``
    steps back, where it has fallen that far behind: the bound that keeps every barrier within one use,
    docs/h100/v53_floor_io_2048.log the hang without it); the loader streams every later step's blocks into the ring
    at the pace a ring of ``STAGES`` stages allows (``_ws_loader``). Tiles, stamps, the store and ``REDUCE`` as
    ``io_floor_loop``'s (the store by halves, one a warpgroup, through [64, 64] boxes)."""
    dtype: gl.constexpr = a_desc.dtype
    t_entry, _ = _stamp()
    ring_a = gl.allocate_shared_memory(dtype, [STAGES, 128, 64], a_desc.layout)
    ring_b = gl.allocate_shared_memory(dtype, [STAGES, 64, 128], b_desc.layout)
    c_s = gl.allocate_shared_memory(dtype, [2, 64, 128], c_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    paced = gl.allocate_shared_memory(gl.int64, [PACED, 1], mbarrier.MBarrierLayout())
    issued = gl.allocate_shared_memory(gl.int64, [8, 1], mbarrier.MBarrierLayout())
    sink_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    boot = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    mbarrier.init(boot.index(0), count=1)
    fence_async_shared()
    gl.warp_specialize(
        [
            (_ws_consumer0, (ring_a, ring_b, c_s, c_desc, bars, paced, issued, boot.index(0), steps, first, every,
                             cut_from, t_entry, stamps_ptr, STAMP, REDUCE)),
            (_ws_consumer1, (ring_a, ring_b, c_s, c_desc, bars, paced, issued, boot.index(0), steps, first, every,
                             cut_from, t_entry, stamps_ptr, STAMP, REDUCE)),
            (_ws_loader, (a_desc, b_desc, ring_a, ring_b, bars, paced, issued, boot.index(0), sink_bars, steps, n_row,
                          STAGES)),
        ],
        [4, 1],
        [232, 40],
    )  # fmt: skip


def ws_floor_args(go: torch.Tensor, w: torch.Tensor, gw: torch.Tensor) -> tuple:
    """``ws_floor_loop``'s descriptors: ``io_floor_args``' loads, the output in [64, 64] boxes (a warpgroup's)."""
    a, b, _ = io_floor_args(go, w, gw)
    half = gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16)
    return a, b, TensorDescriptor.from_tensor(gw, [64, 64], half)


def io_floor_args(go: torch.Tensor, w: torch.Tensor, gw: torch.Tensor) -> tuple:
    """``io_floor_loop``'s descriptors: grad_output's (M, 2048) rows and the output's in [128, 64] boxes, weight's in
    [64, 64] boxes."""
    wide = gl.NVMMASharedLayout.get_default_for([128, 64], gl.bfloat16)
    a = TensorDescriptor.from_tensor(go.reshape(-1, HIDDEN), [128, 64], wide)
    b = TensorDescriptor.from_tensor(w, [64, 64], gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16))
    return a, b, TensorDescriptor.from_tensor(gw, [128, 64], wide)


def floor_fn(busy: int, steps: int):
    """The floor's launch as the timed call: ``fn(go, x, w, out=...)`` runs the MMA loop on 2 x ``busy`` warpgroup
    programs (two an SM) of ``steps`` steps each, its operands loaded once from the iteration's grad_output."""
    from diag_wgmma_ceiling import wgmma_loop  # scripts/ is on the path when this runs as a script

    sums = torch.empty(2 * busy, dtype=torch.float32, device="cuda")

    def fn(go, x, w, out=None):
        wgmma_loop[(2 * busy,)](go.view(-1, HIDDEN), sums, steps, BN=128, A_MN=False, DEPTH=1, NACC=1, num_warps=4)

    return fn


def io_fn(
    busy: int,
    steps: int,
    n_row: int,
    tiles: tuple[int, int] = (0, 0),
    stamps: torch.Tensor | None = None,
    bn: int = 128,
    cut_from: int = 0,
    sink: int = 0,
    fixup: int | None = None,
    reduce: bool = False,
):
    """The io floor's launch as the timed call: ``fn(go, x, w, out=(ga, gw))``, ``busy`` programs of ``steps``
    128x``bn``x64 steps, its tile stored into the iteration's ``gw``; ``tiles`` (first, every): the steps of programs
    ``cut_from`` and later cut into tiles, each stored at its end ((0, 0): one tile); ``sink`` > 0: the loads beside
    the MMAs from a loader warp, at a ring of that many stages' pace (``ws_floor_loop``, 128x128 tiles); ``fixup``
    (``fixup_floor_loop``'s PARTS; None: not that floor): two tiles, the first's fp32 partial written for another
    program (1), another's added to the second (2), every program; ``reduce``: a cut program's last tile
    reduce-added into ``gw`` by TMA, not stored (``io_floor_loop``'s REDUCE); stamped into ``stamps`` (busy x 5)
    when given."""
    first, every = tiles
    if first and (first > steps or every <= 0 or (steps - first) % every):
        raise ValueError(f"tiles {tiles}: {steps} steps are not {first} and then whole tiles of {every}")
    if bn not in (128, 256) or math.ceil(busy / 16) * bn > HIDDEN:
        raise ValueError(f"bn {bn} on {busy} programs: tiles of 128 or 256 columns, all within grad_weight")
    if sink and (bn != 128 or not 2 < sink <= PACED.value // 2):
        raise ValueError(f"sink {sink} with bn {bn}: a ring of 3 to {PACED.value // 2} stages, 128x128 tiles")
    if fixup is not None and (
        fixup not in (0, 1, 2, 3) or bn != 128 or sink or cut_from or not 0 < first < steps or first + every != steps
    ):
        raise ValueError(f"fix-ups in tiles {tiles} of {steps} steps: two tiles of 128x128, every program cut")
    if reduce and (not first or fixup is not None):
        raise ValueError(f"a reduce-add in tiles {tiles}: the io floor's loop cut into tiles, its last one added")
    workspace: list = []  # (tensor, descriptor), made at the first call, on the inputs' device

    def fn(go, x, w, out=None):
        st = stamps if stamps is not None else torch.empty(1, dtype=torch.int64, device=go.device)
        if fixup is not None:
            if not workspace:
                workspace.extend(fixup_workspace(busy, go.device))
            a, b, c = io_floor_args(go, w, out[1])
            fixup_floor_loop[(busy,)](
                a, b, c, workspace[1], steps, n_row, first, st, STAMP=stamps is not None, PARTS=fixup, num_warps=8
            )
            return
        if sink:
            a, b, c = ws_floor_args(go, w, out[1])
            ws_floor_loop[(busy,)](
                a,
                b,
                c,
                steps,
                n_row,
                *tiles,
                cut_from,
                st,
                STAMP=stamps is not None,
                STAGES=sink,
                REDUCE=reduce,
                num_warps=4,
            )
            return
        a, b, c = io_floor_args(go, w, out[1])
        io_floor_loop[(busy,)](
            a, b, c, steps, n_row, *tiles, cut_from, st, STAMP=stamps is not None, BN=bn, REDUCE=reduce, num_warps=8
        )

    return fn


def n256_plan(m: int, sms: int) -> tuple[int, int, int, tuple[int, int]] | None:
    """The 128x256 whole-tile plan at M rows, partitioned (item 41's Next): ``p_ga`` programs of grad_attn tiles (32
    128x256x64 steps each), the others of grad_weight tiles (M / 64 each), the split of programs whose busiest
    program runs the fewest steps, then the fewest programs. As the io floor's launch: (programs, the busiest's
    steps, ``cut_from`` = p_ga, the grad_weight programs' tiles); None where a grad_attn program would run more than
    one tile (the io floor cuts only the programs from ``cut_from`` on)."""
    n_ga, k_ga = math.ceil(m / 128) * (HIDDEN // 256), HIDDEN // STEP
    n_gw, k_gw = (HIDDEN // 128) * (HIDDEN // 256), math.ceil(m / STEP)
    best = None
    for p_ga in range(1, sms):
        per_ga, per_gw = math.ceil(n_ga / p_ga), math.ceil(n_gw / (sms - p_ga))
        p_gw = math.ceil(n_gw / per_gw)
        key = (max(per_ga * k_ga, per_gw * k_gw), p_ga + p_gw)
        if best is None or key < best[0]:
            best = (key, p_ga, p_gw, per_ga, per_gw)
    (steps, busy), p_ga, _, per_ga, per_gw = best
    if per_ga > 1:
        return None
    return busy, steps, p_ga, ((k_gw, k_gw) if per_gw > 1 else (0, 0))


def io_stamps(busy: int, steps: int, n_row: int, sets, flush: torch.Tensor, **launch) -> str:
    """The io floor (``launch``: ``io_fn``'s tiles, bn, cut_from) stamped in one launch per input set after a flush:
    medians over the launches of the programs' medians: the first data from the program's entry, the loop's us a
    step (a 128x128x64 step's share) and MHz, the store; the launch's span from the first entry to the last store;
    and where some programs are cut into tiles and others not, each group's loop (us, from the first data to the last
    MMA, the boundaries' stores in it) and slowest program (entry to stored): the boundaries' cost side by side."""
    stamps = torch.zeros(busy, 5, dtype=torch.int64, device="cuda")
    fn = io_fn(busy, steps, n_row, stamps=stamps, **launch)
    cut_from = launch.get("cut_from", 0) if launch.get("tiles", (0, 0))[0] else busy
    groups = {"uncut": slice(0, cut_from), "cut": slice(cut_from, busy)}
    groups = {name: rows for name, rows in groups.items() if rows.stop > rows.start}
    first, step, mhz, store, span = [], [], [], [], []
    loop_us: dict[str, list[float]] = {name: [] for name in groups}
    slowest: dict[str, list[float]] = {name: [] for name in groups}
    for args, kwargs in sets:
        flush.fill_(0x5A)
        fn(*args, **kwargs)
        torch.cuda.synchronize()
        st = stamps.double()
        loop_ns = st[:, 2] - st[:, 1]
        first.append(float((st[:, 1] - st[:, 0]).median()) / 1e3)
        step.append(float(loop_ns.median()) / 1e3 / steps / (launch.get("bn", 128) // 128))
        mhz.append(float((st[:, 3] / loop_ns).median()) * 1e3)
        store.append(float((st[:, 4] - st[:, 2]).median()) / 1e3)
        span.append(float(st[:, 4].max() - st[:, 0].min()) / 1e3)
        for name, rows in groups.items():
            loop_us[name].append(float(loop_ns[rows].median()) / 1e3)
            slowest[name].append(float((st[rows, 4] - st[rows, 0]).max()) / 1e3)
    med = statistics.median
    by_group = ""
    if len(groups) > 1:
        by_group = "; " + ", ".join(
            f"{name} programs: loop {med(loop_us[name]):.2f} us, slowest {med(slowest[name]):.2f} us" for name in groups
        )
    return (
        f"first data {med(first):.2f} us from the entry, loop {med(step):.3f} us a step at {med(mhz):.0f} MHz, "
        f"store {med(store):.2f} us, span {med(span):.2f} us{by_group}"
    )


def reduce_check(busy: int, steps: int, n_row: int, tiles: tuple[int, int], make) -> str:
    """What the reduce-add floor wrote, against torch: each program's box of ``gw`` holds its first tile stored
    (bf16) plus its last tile reduce-added (bf16), the tiles' MMAs from its first two K-steps' blocks alternately
    (``_tile_mmas``): the worst error in units of the expected value's largest magnitude, and how many elements
    match bf16(bf16(first) + bf16(last)) to one bf16 step."""
    first, every = tiles
    args, kwargs = make(True)
    go, _, w = args
    gw = kwargs["out"][1]
    io_fn(busy, steps, n_row, tiles, reduce=True)(*args, **kwargs)
    torch.cuda.synchronize()
    a, b = go.reshape(-1, HIDDEN).float(), w.float()
    worst, near, total = 0.0, 0, 0
    for pid in range(busy):
        row, col = (pid % n_row) * 128, ((pid // n_row) % (HIDDEN // 128)) * 128
        p0 = a[row : row + 128, 0:64] @ b[0:64, col : col + 128]
        p1 = a[row : row + 128, 64:128] @ b[64:128, col : col + 128]
        lengths = [first] + [every] * ((steps - first) // every)
        i, accs = 0, []
        for length in lengths:
            evens = len(range(i, i + length, 2)) if i % 2 == 0 else len(range(i + 1, i + length, 2))
            accs.append(evens * p0 + (length - evens) * p1)
            i += length
        want = (accs[-2].bfloat16().float() + accs[-1].bfloat16().float()).bfloat16().float()
        got = gw[(pid % 16) * 128 : (pid % 16) * 128 + 128, (pid // 16) * 128 : (pid // 16) * 128 + 128].float()
        worst = max(worst, float((got - want).abs().max() / want.abs().max()))
        step = torch.where(want == 0, torch.ones_like(want), want.abs()) * 2.0**-7
        near += int(((got - want).abs() <= step).sum())
        total += want.numel()
    return f"worst error {worst:.2e} of the largest value, {near / total:.4%} of elements within one bf16 step"


def wrong_card(device_name: str, only_on: str) -> str | None:
    """``--only-on``'s check: the line to print where the device is not the card asked for, else None (no NAME asked
    for, or the device's name contains it, case aside)."""
    if not only_on or only_on.lower() in device_name.lower():
        return None
    return f"diag_floor: the GPU here is {device_name}, not {only_on}: nothing measured"


def compile_only() -> None:
    """The io floor compiled for sm_90 without a GPU, stamped and not: shared memory, the PTX's warpgroup MMAs, TMA
    loads and stores and clock reads, registers and spills."""
    from diag_gluon import compile_sm90  # scripts/ is on the path when this runs as a script

    go = torch.empty(1024, HIDDEN, dtype=torch.bfloat16)
    w = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16)
    gw = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16)
    stamps = torch.empty(128, 5, dtype=torch.int64)
    # (the table's 128x128 plan at M = 1024: 64 steps, a boundary after 32 and every 16; the 128x256 plan's: 32
    # steps, programs 64 and later cut after 16; the 128x128 plan with a loader warp's loads beside its MMAs; the
    # split plan's 63 steps in two tiles with their fix-ups)
    for bn, steps, tiles, cut_from, sink, reduce in (
        (128, 64, (32, 16), 0, 0, False),
        (256, 32, (16, 16), 64, 0, False),
        (128, 64, (32, 16), 0, 6, False),
        (128, 63, (32, 31), 0, 0, True),
        (128, 63, (32, 31), 0, 6, True),
    ):
        for stamp in (False, True):
            if sink:
                args = (*ws_floor_args(go, w, gw), steps, 8, *tiles, cut_from, stamps)
                k = compile_sm90(
                    ws_floor_loop, args, {"STAMP": stamp, "STAGES": sink, "REDUCE": reduce, "num_warps": 4}
                )
            else:
                args = (*io_floor_args(go, w, gw), steps, 8, *tiles, cut_from, stamps)
                opts = {"STAMP": stamp, "BN": bn, "REDUCE": reduce, "num_warps": 8}
                k = compile_sm90(io_floor_loop, args, opts)
            kind = f"{'_n256' if bn == 256 else ''}{f'_ws{sink}' if sink else ''}{'_reduce' if reduce else ''}"
            name = f"io_floor{kind}{'_stamp' if stamp else ''}"
            _print_compiled(name, k)
    ws = fixup_workspace(132, "cpu")[1]
    for stamp in (False, True):
        args = (*io_floor_args(go, w, gw), ws, 63, 8, 32, stamps)
        k = compile_sm90(fixup_floor_loop, args, {"STAMP": stamp, "num_warps": 8})
        _print_compiled(f"io_floor_fixup{'_stamp' if stamp else ''}", k)


def _print_compiled(name: str, k) -> None:
    """One line of ``compile_only``'s: a compiled variant's shared memory, PTX call sites and resources."""
    from diag_gluon import _resource_usage  # scripts/ is on the path when this runs as a script

    ptx = k.asm["ptx"]
    loads, stores = ptx.count("cp.async.bulk.tensor.2d.shared"), ptx.count("cp.async.bulk.tensor.2d.global")
    adds = ptx.count("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add")
    print(
        f"{name} shared {k.metadata.shared} B, wgmma in PTX {ptx.count('wgmma.mma_async')}, TMA loads {loads}, "
        f"TMA stores {stores}, TMA reduce-adds {adds}, globaltimer {ptx.count('%globaltimer')}, "
        f"clock64 {ptx.count('%clock64')}, {_resource_usage(k.asm['cubin'])}"
    )


def loop_clock(busy: int, steps: int, sets, flush: torch.Tensor) -> tuple[float, float]:
    """The floor's loop, stamped (``wgmma_loop``'s STAMP) in one launch per input set after a flush: (us a
    128x128x64 step, SM MHz), medians over the programs of the launches."""
    from diag_wgmma_ceiling import wgmma_loop

    sums = torch.empty(2 * busy, dtype=torch.float32, device="cuda")
    stamps = torch.zeros(2 * busy, 4, dtype=torch.int64, device="cuda")
    per_step, mhz = [], []
    for args, _ in sets:
        flush.fill_(0x5A)
        wgmma_loop[(2 * busy,)](
            args[0].view(-1, HIDDEN), sums, steps, BN=128, A_MN=False, DEPTH=1, NACC=1, stamps_ptr=stamps, STAMP=True,
            num_warps=4,
        )  # fmt: skip
        torch.cuda.synchronize()
        ns = (stamps[:, 2] - stamps[:, 0]).double()
        clocks = (stamps[:, 3] - stamps[:, 1]).double()
        per_step.append(float(ns.median()) / 1e3 / steps)
        mhz.append(float((clocks / ns).median()) * 1e3)
    return statistics.median(per_step), statistics.median(mhz)


def main() -> None:
    ms = [int(v) for v in ARGS.ms.split(",")]
    if ARGS.plan_only:
        for m in ms:
            print(f"M={m}: {plans(m, 132)} (total {total_steps(m)} steps)")
        return
    if ARGS.compile_only:
        compile_only()
        return
    import faulthandler
    import sys

    if ARGS.sink and not ARGS.io:
        print(f"diag_floor: --sink {ARGS.sink} adds to the io floor's runs: give --io too", file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        print("diag_floor: no CUDA device here (--plan-only and --compile-only run without one)", file=sys.stderr)
        sys.exit(2)

    wrong = wrong_card(torch.cuda.get_device_name(), ARGS.only_on)
    if wrong:  # (a device lent as "H200 or H100" is checked before any minute of it is spent)
        print(wrong, file=sys.stderr)
        sys.exit(3)
    faulthandler.dump_traceback_later(ARGS.watchdog_s, exit=True)  # a hang says where it is
    from ci.harness.timing import Timer, make_protocols
    from kernel.backward import attn_output_proj_backward
    from problem.reference import timing_sets, two_matmuls

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    sms = props.multi_processor_count
    timer = Timer(dev, l2_bytes=props.L2_cache_size)
    proto = make_protocols("gpu", rounds=1, warmup=ARGS.warmup, iters=ARGS.iters)[0]
    flush = torch.empty(2 * props.L2_cache_size, dtype=torch.uint8, device=dev)  # the stamped launches' own flush
    print(f"GPU {props.name}, {sms} SMs; timing protocol {proto.name} ({proto.timer}), medians, us")
    print(
        "| M | cuBLAS | kernel | kernel/cuBLAS | target | floor whole (SMs x steps) | floor split | split/cuBLAS | "
        "the whole floor's loop: us a step, SM clock |"
    )
    print("|---:|---:|---:|---:|---:|---|---|---:|---|")
    for m in ms:
        make = timing_sets(m // SEQ, SEQ, dev, seed=0)

        def t(fn, with_out: bool, what: str) -> float:
            print(f"  M={m} {what} ...", file=sys.stderr, flush=True)  # noqa: B023
            args, kwargs = make(with_out)  # noqa: B023
            fn(*args, **kwargs)  # compiled before the timed loop: its host-ahead sleep doubles the slowest enqueue
            torch.cuda.synchronize()
            return statistics.median(timer.run(proto, fn, lambda: make(with_out)).samples_us)  # noqa: B023

        cb = t(two_matmuls, False, "cuBLAS")
        k = t(attn_output_proj_backward, True, "kernel")
        floors = {
            name: (busy, steps, t(floor_fn(busy, steps), True, f"floor {name}"))
            for name, (busy, steps) in plans(m, sms).items()
        }
        w, s = floors["whole"], floors["split"]
        step, mhz = loop_clock(w[0], w[1], [make(True) for _ in range(5)], flush)
        print(
            f"| {m} | {cb:.1f} | {k:.1f} | {k / cb:.3f} | {ARGS.target * cb:.1f} | {w[2]:.1f} ({w[0]} x {w[1]}) | "
            f"{s[2]:.1f} ({s[0]} x {s[1]}) | {s[2] / cb:.3f} | {step:.3f} at {mhz:.0f} MHz |",
            flush=True,
        )
        if ARGS.io:
            n_row = math.ceil(m / 128)
            io = {
                name: t(io_fn(busy, steps, n_row), True, f"io floor {name}")
                for name, (busy, steps, _) in floors.items()
            }
            cut_from, tiles = plan_tiles(m, sms) or (0, (0, 0))  # (one tile: the variant is the io floor's)
            cut = {"tiles": tiles, "cut_from": cut_from}
            io["tiles"] = t(io_fn(w[0], w[1], n_row, **cut), True, "io floor whole, in the plan's tiles")
            detail = io_stamps(w[0], w[1], n_row, [make(True) for _ in range(5)], flush)
            detail_tiles = io_stamps(w[0], w[1], n_row, [make(True) for _ in range(5)], flush, **cut)
            # one boundary: the fewest that the busiest program of a whole-tile plan of 128x128 tiles can have
            half = (w[1] // 2, w[1] // 2)
            io["half"] = t(io_fn(w[0], w[1], n_row, half), True, "io floor whole, in two tiles")
            # a split plan's program runs a piece of a tile beside another (a boundary or a partial's fix-up): at least
            # one event; its floor's lower bound, the split's steps in two tiles
            sp = floors["split"]
            split_half = (sp[1] - sp[1] // 2, sp[1] // 2)
            io["split_half"] = t(io_fn(sp[0], sp[1], n_row, split_half), True, "io floor split, in two tiles")
            io["split_reduce"] = t(
                io_fn(sp[0], sp[1], n_row, split_half, reduce=True), True, "io floor split, the last tile reduce-added"
            )
            checked = reduce_check(sp[0], sp[1], n_row, split_half, make)
            fix = {"tiles": split_half, "fixup": 3}
            io["split_fixup"] = t(io_fn(sp[0], sp[1], n_row, **fix), True, "io floor split, two tiles, fix-ups")
            detail_fix = io_stamps(sp[0], sp[1], n_row, [make(True) for _ in range(5)], flush, **fix)
            for part, what in ((0, "neither"), (1, "written"), (2, "read")):
                io[f"fix_{what}"] = t(io_fn(sp[0], sp[1], n_row, split_half, fixup=part), True, f"fix-ups: {what}")
            parts = [
                f"whole {io['whole']:.1f} us ({io['whole'] / cb:.3f} x cuBLAS)",
                f"split {io['split']:.1f} ({io['split'] / cb:.3f})",
                f"whole in the plan's tiles (programs {cut_from} on: a boundary after {tiles[0]} steps, then every "
                f"{tiles[1]}) {io['tiles']:.1f} ({io['tiles'] / cb:.3f})",
                f"whole in two tiles (one boundary) {io['half']:.1f} ({io['half'] / cb:.3f})",
                f"split in two tiles {io['split_half']:.1f} ({io['split_half'] / cb:.3f})",
                f"split in two tiles, the second reduce-added by TMA {io['split_reduce']:.1f} "
                f"({io['split_reduce'] / cb:.3f}; what it wrote: {checked})",
                f"split in two tiles with fix-ups {io['split_fixup']:.1f} ({io['split_fixup'] / cb:.3f}; with neither "
                f"part {io['fix_neither']:.1f}, the partial written only {io['fix_written']:.1f}, read only "
                f"{io['fix_read']:.1f})",
            ]
            print(
                f"io floor M={m}: {', '.join(parts)}; whole, stamped: {detail}; in the plan's tiles, stamped: "
                f"{detail_tiles}; split with fix-ups, stamped: {detail_fix}",
                flush=True,
            )
            if ARGS.sink > 0:
                sink = {"sink": ARGS.sink}
                io["sink"] = t(io_fn(w[0], w[1], n_row, **sink), True, "io floor whole, loads beside")
                io["sink_tiles"] = t(io_fn(w[0], w[1], n_row, **cut, **sink), True, "in the plan's tiles, loads beside")
                io["sink_split"] = t(io_fn(sp[0], sp[1], n_row, split_half, **sink), True, "split, loads beside")
                io["sink_split_reduce"] = t(
                    io_fn(sp[0], sp[1], n_row, split_half, reduce=True, **sink), True, "split, loads beside, added"
                )
                detail_sink = io_stamps(w[0], w[1], n_row, [make(True) for _ in range(5)], flush, **cut, **sink)
                print(
                    f"io floor M={m} with a loader warp's loads beside its MMAs (a {ARGS.sink}-stage ring's pace): "
                    f"whole {io['sink']:.1f} ({io['sink'] / cb:.3f}), in the plan's tiles {io['sink_tiles']:.1f} "
                    f"({io['sink_tiles'] / cb:.3f}), split in two tiles {io['sink_split']:.1f} "
                    f"({io['sink_split'] / cb:.3f}), split in two tiles with the second reduce-added by TMA "
                    f"{io['sink_split_reduce']:.1f} ({io['sink_split_reduce'] / cb:.3f}); in the plan's tiles, "
                    f"stamped: {detail_sink}",
                    flush=True,
                )
            n256 = n256_plan(m, sms)
            if n256 is None or 2 * n256[1] > w[1]:  # (at M <= 512 its 64-step grad_attn tiles outlast the table's plan)
                print(f"io floor M={m}, the 128x256 plan: its busiest program is not the table's plan's; not floored")
                continue
            busy, steps, cut_from, tiles = n256
            launch = {"tiles": tiles, "bn": 256, "cut_from": cut_from}
            io["n256"] = t(io_fn(busy, steps, n_row, **launch), True, "io floor, the 128x256 plan")
            detail = io_stamps(busy, steps, n_row, [make(True) for _ in range(5)], flush, **launch)
            print(
                f"io floor M={m}, the 128x256 plan ({busy} programs of {steps} 128x256x64 steps, programs {cut_from} "
                f"on cut into tiles {tiles}): {io['n256']:.1f} us ({io['n256'] / cb:.3f} x cuBLAS); stamped: "
                f"{detail}",
                flush=True,
            )


if __name__ == "__main__":
    main()
