"""Device diagnostic (kernel/NOTES.md, v19's Next 3): why is a ping-pong main loop of the Gluon kernel slower per
K-step than the cooperative split at M >= 512? A per-tile %globaltimer trace, one kind of tile at a time.

Usage (GPU): PYTHONPATH=. python scripts/diag_gluon_timeline.py [--ms 512 1024 2048] [--variants coop,pp7]
             [--kinds ga,gw] [--reps 5] [--save traces.pt]
Usage (CPU): PYTHONPATH=. python scripts/diag_gluon_timeline.py --compile-only [M ...]  (registers, shared, spills)

A traced copy of kernel/gluon_backward.py (its source rewritten at anchors into a temporary module, kernel/
untouched; a lost anchor raises AnchorError; tests/kernel/test_gluon_timeline.py compiles it) has one thread per
consumer warpgroup write each tile's FIELDS into trace[program, warpgroup, tile]. Per M (shape (M/128, 128)),
variant and kind (kind_plan), behind an L2 flush: one table row of COLUMNS (us, the median over the launches of each
launch's means), after one check of the variant against problem/'s reference.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
import statistics
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

# a tile's record: its start (before a ping-pong turn wait), its first MMA wait's start, its first stage ready, its K
# loop's end (every MMA retired), its epilogue's end (stores issued; ping-pong: the held stage released), all
# %globaltimer ns; %smid, the warpgroup, the kind (KINDS); and (v25, warpgroup 0's record only, written by the loader)
# the time the loader passed its empty wait for the tile's first stage and issues its loads; (v27) the SM's
# %clock64 at the first MMA wait's start and at the K loop's end (their ratio to the timer's: the SM clock in the loop)
# and the clocks the warpgroup spent in the K loop's waits for its stages' data
FIELDS = ("start", "wait", "ready", "kend", "epi", "sm", "wg", "kind", "issue", "cwait", "ckend", "waited")
MAX_TILES = 16  # tile slots per program (the plans of M <= 2048 run at most 4 tiles a program)
# one more slot per lane (program * 2 + warpgroup) after the tiles': the program's record, its entry stamped in
# field "start" of warpgroup 0's (before the barriers' init), each consumer warpgroup's exit in field "epi" of its
# own (after its last store_wait): the time outside the tiles (the prologue, the last stores' drain); and in
# warpgroup 0's fields 1-3 (v24): the barriers' init done, the loader partition's start, consumer 0's start
PROGRAM_SLOT = MAX_TILES
SLOTS = MAX_TILES + 1
KINDS = {"ga": 0, "gw": 1}  # grad_attn_output tiles (K = 2048), grad_weight tiles (K = M)
# name -> GluonConfig overrides of the table's entry for M
VARIANTS: dict[str, dict] = {
    "coop": {},  # the table's entry (v18 at M = 512-2048: cooperative split, 6 stages)
    "pp7": {"pingpong": True, "stages": 7},  # v19's ping-pong, its faster depth (the table's at M = 256)
    "pp6": {"pingpong": True, "stages": 6},  # ping-pong at the cooperative entries' depth
    "w256s3": {"ga_bn": 256, "gw_bn": 256, "stages": 3},  # 128x256 tiles, cooperative (a step: 128x256x64)
    "lazy": {"lazy_init": True},  # v24: the loader initialises each stage's mbarriers as it first fills it
    "eager": {"lazy_init": False},  # the ring's mbarriers initialised before the partitions start
    # v27 diagnostics, the table's entry with part of its cooperative epilogue taken out of the traced copy (its
    # outputs are then wrong: the check says so, the timing is what they are for): no TMA stores, no shared-memory
    # writes (stmatrix), neither
    "nost": {},
    "nosm": {},
    "noepi": {},
}
# the diagnostics' rewrites of the traced copy (traced_source's ``diag`` bits: 1 no TMA stores, 2 no stmatrix)
DIAG = {"nost": 1, "nosm": 2, "noepi": 3}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="trace", help="of: trace")
    ap.add_argument("--ms", nargs="+", type=int, default=[512, 1024, 2048], help="rows M, traced as (M/128, 128)")
    ap.add_argument("--variants", default="coop,pp7", help=f"of {', '.join(VARIANTS)}")
    ap.add_argument("--kinds", default="ga,gw", help="ga, gw (each alone, the other zeroed), both (the real plan)")
    ap.add_argument("--reps", type=int, default=5, help="traced launches per (M, variant, kind)")
    ap.add_argument("--warm", action="store_true", help="no L2 flush before the launches (default: flushed)")
    ap.add_argument("--programs", type=int, default=0, help="programs to plan for (default: one an SM)")
    ap.add_argument("--save", help="write the tile records here (torch.save; its 'fields' name the columns)")
    ap.add_argument("--compile-only", nargs="*", type=int, metavar="M", help="compile for sm_90 here, no GPU")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch, Triton and the kernel load
    ARGS = parse_args()

import torch  # noqa: E402

# scripts/ is on the path when this runs as a script
from bench_gluon_v19 import _finish_or_exit  # noqa: E402

from kernel import gluon_backward as gb  # noqa: E402
from kernel.schedule import Plan  # noqa: E402
from problem.correctness import check_rounds  # noqa: E402
from problem.reference import make_inputs  # noqa: E402
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS  # noqa: E402

_HELPERS = f'''
    @gluon.jit
    def _trace_now():
        return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)

    @gluon.jit
    def _trace_clock():
        return gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)

    @gluon.jit
    def _trace_tile(
        trace_ptr, WG: gl.constexpr, slot, KIND: gl.constexpr, t_start, t_wait, t_ready, t_kend, c_wait, c_kend, waited
    ):
        """The end of a tile's epilogue: its record, written by one thread (scalar stores)."""
        t_epi = _trace_now()
        sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)
        if slot < {MAX_TILES}:
            rec = trace_ptr + ((gl.program_id(0) * 2 + WG) * {SLOTS} + slot) * {len(FIELDS)}
            gl.store(rec, t_start)
            gl.store(rec + 1, t_wait)
            gl.store(rec + 2, t_ready)
            gl.store(rec + 3, t_kend)
            gl.store(rec + 4, t_epi)
            gl.store(rec + 5, sm.to(gl.int64))
            gl.store(rec + 6, gl.to_tensor(WG).to(gl.int64))
            gl.store(rec + 7, gl.to_tensor(KIND).to(gl.int64))
            gl.store(rec + {FIELDS.index("cwait")}, c_wait)
            gl.store(rec + {FIELDS.index("ckend")}, c_kend)
            gl.store(rec + {FIELDS.index("waited")}, waited)

    @gluon.jit
    def _trace_issue(trace_ptr, slot):
        """The loader's stamp (field "issue" of warpgroup 0's record of the program's tile ``slot``): the tile's
        first stage is free and its loads leave now."""
        if slot < {MAX_TILES}:
            rec = trace_ptr + ((gl.program_id(0) * 2) * {SLOTS} + slot) * {len(FIELDS)}
            gl.store(rec + {FIELDS.index("issue")}, _trace_now())

    @gluon.jit
    def _keep_live(x, trace_ptr, WG: gl.constexpr):
        """A diagnostic's stand-in for a use of the accumulator ``x``: its row sums stored where nothing reads them
        (the program's record, field "waited") only if one is NaN, which ptxas cannot rule out, so the MMAs that
        made ``x`` stay in the kernel (without a use, ptxas drops them) and no shared memory is written."""
        rows = gl.sum(x, axis=1)
        rec = trace_ptr + ((gl.program_id(0) * 2 + WG) * {SLOTS} + {PROGRAM_SLOT}) * {len(FIELDS)}
        rec += {FIELDS.index("waited")}
        gl.store(rec + gl.zeros_like(rows).to(gl.int32), rows.to(gl.int64), mask=rows != rows)

    @gluon.jit
    def _trace_program(trace_ptr, WG: gl.constexpr, FIELD: gl.constexpr):
        """The program's record (slot PROGRAM_SLOT of lane program * 2 + WG): a stamp into field FIELD."""
        rec = trace_ptr + ((gl.program_id(0) * 2 + WG) * {SLOTS} + {PROGRAM_SLOT}) * {len(FIELDS)}
        gl.store(rec + FIELD, _trace_now())

'''


class AnchorError(RuntimeError):
    """kernel/gluon_backward.py no longer has the text one of the traced copy's rewrites anchors on."""


def _sub(src: str, anchor: str, new: str, count: int = 1) -> str:
    """``anchor`` (a regular expression, multi-line mode) replaced by ``new``; exactly ``count`` matches."""
    found = len(re.findall(anchor, src, flags=re.M))
    if found != count:
        raise AnchorError(
            f"traced Gluon kernel: expected {count} match(es) of {anchor!r} in kernel/gluon_backward.py, found "
            f"{found}: the kernel's text moved on; update the anchors in scripts/diag_gluon_timeline.py"
        )
    return re.sub(anchor, new, src, flags=re.M)


# the stamps every _trace_tile call passes after the tile's start (the cooperative: its first MMA wait's)
RECORD = "t_wait, t_ready, t_kend, c_wait, c_kend, waited)\n"


def traced_source(src: str, diag: int = 0) -> str:
    """kernel/gluon_backward.py's text with the per-tile stamps (AnchorError where an anchor is missing); ``diag``
    (DIAG's bits) takes the cooperative epilogue's TMA stores (1) or its shared-memory writes (2) out."""
    stamp = "_trace_now()"
    src = _sub(src, r"^    @gluon\.jit\n    def _tile_coords\(", _HELPERS + r"\g<0>")
    # the trace buffer through every signature and call of the chain (entries, body, partitions, consumers)
    src = _sub(src, r"S, n_ga_m, P_GA,", "S, n_ga_m, P_GA, trace_ptr,", count=14)
    # ... and into the loader, which stamps each tile's first fill as its loads leave (v25)
    src = _sub(src, r"^        M, n_ga_m, P_GA,\n", "        M, n_ga_m, P_GA, trace_ptr,\n")
    src = _sub(src, r"empty, M, n_ga_m, P_GA, GA_FIRST", "empty, M, n_ga_m, P_GA, trace_ptr, GA_FIRST")
    src = _sub(src, r"^( +)it = 0  # the ring's fills so far\n", r"\1nt_l = 0\n\g<0>")
    src = _sub(
        src,
        r"^( +)s, bar = _next_stage\(ready, empty, boot, it, g[aw]_bytes, .*\n",
        r"\g<0>\1if k == 0:\n\1    _trace_issue(trace_ptr, nt_l)\n\1    nt_l += 1\n",
        count=2,
    )
    # cooperative: a tile starts with its first MMA wait; ping-pong: with its turn wait, then its first MMA wait
    src = _sub(src, r"^( +)acc = gl\.zeros\(\[G[AW]_WM, .*\n", rf"\g<0>\1t_wait = {stamp}\n", count=2)
    src = _sub(src, r"^( +)if nt % 2 == WG:\n", rf"\g<0>\1    t_start = {stamp}\n", count=2)
    src = _sub(src, r"^( +)prev = 0\n(?= +for k in range)", rf"\g<0>\1t_wait = {stamp}\n", count=2)
    src = _sub(
        src,
        r"^( +)t_wait = _trace_now\(\)\n",
        r"\g<0>\1t_ready = t_wait\n\1c_wait = _trace_clock()\n\1waited = c_wait - c_wait\n",
        count=4,
    )
    src = _sub(
        src,
        r"^( +)mbarrier\.wait\(ready\.index\(s\), \(it // STAGES\) & 1\)\n",
        rf"\1w_0 = _trace_clock()\n\g<0>\1waited += _trace_clock() - w_0\n\1if k == 0:\n\1    t_ready = {stamp}\n",
        count=4,
    )
    src = _sub(
        src,
        r"^( +)\S.* = warpgroup_mma_wait\(0, .*\n",
        rf"\g<0>\1t_kend = {stamp}\n\1c_kend = _trace_clock()\n",
        count=5,
    )
    # the program's entry (before its barriers' init) and each consumer warpgroup's exit (after its last store_wait)
    src = _sub(src, r'^( +)\S.*partition is consumer 0\)\."""\n', r"\g<0>\1_trace_program(trace_ptr, 0, 0)\n")
    # where the prologue goes (v24): the barriers' init done, the loader partition's start, consumer 0's start
    src = _sub(src, r"^( +)# \(the argument tuples are written out", r"\1_trace_program(trace_ptr, 0, 1)\n\g<0>")
    src = _sub(src, r"^( +)_loader\(go_a, w_b, go_t, x_b, a_ring,", r"\1_trace_program(trace_ptr, 0, 2)\n\g<0>")
    src = _sub(src, r"^( +)_consumer_part\(0, ga_out,", r"\1_trace_program(trace_ptr, 0, 3)\n\g<0>")
    # the end of the epilogue: cooperative after its TMA stores are issued (the program's tile nt - 1) ...
    src = _sub(
        src,
        r"^( +)    tma\.async_copy_shared_to_global\(ga_out, \[row0 \+ h \* S, 0\], epi_ga\..*\n",
        rf"\g<0>\1_trace_tile(trace_ptr, WG, nt - 1, 0, t_wait, {RECORD}",
    )
    src = _sub(
        src,
        r"^( +)    tma\.async_copy_shared_to_global\(\n.*epi_gw\.slice\(j \* 64, 64, dim=1\)\n +\)\n(?=        tma\.)",
        rf"\g<0>\1_trace_tile(trace_ptr, WG, nt - 1, 1, t_wait, {RECORD}",
    )
    # ... ping-pong once its held stage is released (the program's tile nt)
    for kind, steps in enumerate(("ga_steps", "gw_steps")):
        src = _sub(
            src,
            rf"^( +)_release_held\(empty, prev\)\n(?= +else:\n +it \+= {steps}\n)",
            rf"\g<0>\1_trace_tile(trace_ptr, WG, nt, {kind}, t_start, {RECORD}",
        )
    src = _sub(src, r"^(        )tma\.store_wait\(0\)\n(?=\n)", r"\g<0>\1_trace_program(trace_ptr, WG, 4)\n", count=2)
    if diag & 1:  # the cooperative epilogue's TMA stores (one of grad_attn's heads, one of grad_weight's blocks)
        src = _sub(
            src, r"^( +)(tma\.async_copy_shared_to_global\(ga_out, \[row0 \+ h \* S, 0\], epi_ga\..*)$", r"\1pass  # \2"
        )
        src = _sub(
            src,
            r"^( +)tma\.async_copy_shared_to_global\(\n +gw_out, \[off_o \+ WG \* GW_WM, off_i \+ j \* 64\].*\n +\)\n",
            r"\1pass\n",
        )
    if diag & 2:  # its accumulator's bf16 copy into the shared buffer (the accumulator kept live: its MMAs stay)
        src = _sub(
            src,
            r"^( +)_epilogue_pass\(epi_g[aw], acc, dtype\)$",
            r"\1_keep_live(acc, trace_ptr, WG)",
            count=2,
        )
    return src


def traced_module(diag: int = 0):
    """The traced copy (``diag``: traced_source's), imported from a temporary file: Gluon reads a kernel's source
    from its module's file, so the rewritten text must be a real module (hence importlib: there is no package to
    import it from)."""
    name = f"gluon_backward_traced{diag or ''}"
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(traced_source(Path(gb.__file__).read_text(), diag))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def traced_modules(names: list[str]) -> dict:
    """One traced copy per diagnostic rewrite the variants ``names`` need (DIAG; 0: the plain traced copy)."""
    return {diag: traced_module(diag) for diag in {DIAG.get(n, 0) for n in names}}


def variant(name: str, m: int, s: int) -> gb.GluonConfig | None:
    """The table's entry for (M, S) with the variant's overrides, or None (no Gluon entry for the shape)."""
    base = gb.gluon_config_for(m, s, (9, 0), include_disabled=True)
    return None if base is None else replace(base, **VARIANTS[name])


def kind_plan(real: Plan, kind: str) -> Plan:
    """The real plan with one kind of tile zeroed ("both": the real plan, each tile tagged with its kind), each
    program keeping its tiles of the other: grad_weight alone has no grad_attn rows (n_ga_m = 0); grad_attn alone
    makes every program a grad_attn program of a partition (the kernel's grad_weight tile count is a constant)."""
    if kind == "gw":
        return replace(real, n_ga_m=0, n_ga=0)
    if kind == "ga":
        p = real.p_ga or real.programs
        return replace(real, n_gw=0, p_ga=p, programs=p)
    return real


def launch(tm, go, x, w, ga, gw, cfg: gb.GluonConfig, plan: Plan, trace: torch.Tensor) -> None:
    s = go.shape[1]
    args, constexprs = tm.launch_arguments(go.view(-1, HIDDEN), w, x.view(-1, HIDDEN), gw, ga, s, cfg, plan)
    tm.gluon_bwd_kernel_host_desc[(plan.programs,)](*args, **constexprs, trace_ptr=trace, num_warps=4)


def new_trace(plan: Plan, device) -> torch.Tensor:
    return torch.zeros(plan.programs, 2, SLOTS, len(FIELDS), dtype=torch.int64, device=device)


def check(tm, b: int, s: int, cfg: gb.GluonConfig, plan: Plan, device) -> str:
    """One round of the harness's correctness loop on the traced kernel with the real plan."""

    def fn(go, x, w, out):
        launch(tm, go, x, w, *out, cfg, plan, new_trace(plan, device))
        _finish_or_exit(20.0, f"check ({b},{s})")
        return out

    res = check_rounds(fn, b, s, device, rounds=1)
    return "ok" if res.ok else f"INCORRECT {res.reason}"


def trace_runs(
    tm, b: int, s: int, cfg: gb.GluonConfig, plan: Plan, reps: int, device, warm: bool = False
) -> list[torch.Tensor]:
    """``reps`` traced launches (after one more), each behind an L2 flush (``warm``: none, the L2 as the launch
    before left it: the same inputs, and the kernel's own code) and queued behind a sleep kernel."""
    go, x, w = make_inputs(b, s, device, generator=torch.Generator(device).manual_seed(0))
    ga = torch.empty(b, NUM_HEADS, s, HEAD_DIM, dtype=go.dtype, device=device)
    gw = torch.empty(HIDDEN, HIDDEN, dtype=go.dtype, device=device)
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size, dtype=torch.int8, device=device)
    out = []
    for r in range(reps + 1):
        trace = new_trace(plan, device)
        torch.cuda._sleep(3_000_000)  # the GPU is busy while the host enqueues the flush and the kernel
        if not warm:
            flush.fill_(r)
        launch(tm, go, x, w, ga, gw, cfg, plan, trace)
        _finish_or_exit(20.0, f"trace ({b},{s})")
        if r:
            out.append(trace.cpu())
    return out


# the table's columns (us): tiles per warpgroup, the K loop per 64-deep step (from its first MMA wait), that first wait,
# ping-pong's turn wait, the epilogue, the gap (a warpgroup's epilogue end to its next tile's first MMA), the
# handoff (a program's tile's last MMA retired to its next tile's first MMA; negative: overlapped), the loader's
# issue of a tile's first stage from the program's previous tile's last MMA retired (negative: before it), that
# stage's latency (its issue to its arrival, as the consumers saw it), the span
COLUMNS = (("tiles", "tiles/WG"), ("loop", "loop/step"), ("first", "1st wait"), ("turn", "turn"), ("epi", "epilogue"))
COLUMNS += (("gap", "gap"), ("handoff", "handoff"), ("issue", "issue-kend"), ("lat", "1st latency"), ("mhz", "MHz"))
COLUMNS += (("waits", "K-loop waits %"), ("span", "span"))


def summarise(trace: torch.Tensor, m: int) -> dict[int, dict[str, float]]:
    """One launch, per kind of tile: the means (us) over its records, its tiles seen ("n") and the span. "gap" and
    "handoff" are counted with the tile before them: a warpgroup's epilogue end to its next tile's first MMA, and
    the program's tile's last MMA retired to the program's next tile's first MMA (either warpgroup)."""
    steps = {0: HIDDEN // 64, 1: -(-m // 64)}  # per 64-deep K-step whatever the kernel's BK (bk 32: two)
    acc: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    tiles: dict[tuple[int, int], tuple[int, int, int]] = {}  # (program, slot) -> (kind, first ready, last K end)
    issued: dict[tuple[int, int], int] = {}  # (program, slot) -> the loader's issue of the tile's first stage
    recs = trace.view(-1, SLOTS, len(FIELDS))[:, :MAX_TILES]  # (program * 2 + warpgroup, slot, field)
    for lane, slots in enumerate(recs.tolist()):
        mine = [(slot, r) for slot, r in enumerate(slots) if r[0]]  # this warpgroup's tiles, in order
        for kind, n in Counter(r[7] for _, r in mine).items():
            acc[kind]["tiles"].append(n)
        for i, (slot, (start, wait, ready, kend, epi, _, _, kind, issue, cwait, ckend, waited)) in enumerate(mine):
            a = acc[kind]
            a["loop"].append((kend - wait) / steps[kind] / 1e3)
            if ckend > cwait and kend > wait:  # the SM's clock over the K loop (%clock64 per %globaltimer us)
                a["mhz"].append((ckend - cwait) / (kend - wait) * 1e3)
                a["waits"].append(100 * waited / (ckend - cwait))  # the loop's clocks spent waiting for data
            a["first"].append((ready - wait) / 1e3)
            a["turn"].append((wait - start) / 1e3)
            a["epi"].append((epi - kend) / 1e3)
            if i + 1 < len(mine):
                a["gap"].append((mine[i + 1][1][2] - epi) / 1e3)
            _, r0, k0 = tiles.get((lane // 2, slot), (kind, ready, kend))
            tiles[(lane // 2, slot)] = (kind, min(r0, ready), max(k0, kend))
            if issue:
                issued[(lane // 2, slot)] = issue
    for (program, slot), (kind, ready, kend) in tiles.items():
        if (program, slot + 1) in tiles:
            acc[kind]["handoff"].append((tiles[(program, slot + 1)][1] - kend) / 1e3)
        if (program, slot) in issued:
            acc[kind]["lat"].append((ready - issued[(program, slot)]) / 1e3)
            if (program, slot - 1) in tiles:
                acc[kind]["issue"].append((issued[(program, slot)] - tiles[(program, slot - 1)][2]) / 1e3)
    valid = recs[recs[..., 0] != 0]
    span = float(valid[:, 4].max() - valid[:, 0].min()) / 1e3 if valid.numel() else float("nan")
    out = {}
    for kind, a in acc.items():
        out[kind] = {c: statistics.fmean(a[c]) if a[c] else float("nan") for c, _ in COLUMNS if c != "span"}
        out[kind].update(span=span, n=sum(k == kind for k, _, _ in tiles.values()))
    return out


def outside(trace: torch.Tensor) -> dict[str, float]:
    """One launch, from the programs' records: the prologue (a program's entry to its first tile's start; within
    it, from the entry: the barriers' init done, the loader's and consumer 0's starts, and to the first stage's
    arrival), the drain (its last tile's epilogue end to its warpgroups' exit), the kernel's span inside the GPU
    (first entry to last exit) and the tiles' span (the table's "span"), us; medians over the programs but for the
    two spans."""
    lanes = trace.view(-1, 2, SLOTS, len(FIELDS))  # (program, warpgroup, slot, field)
    tiles, prog = lanes[:, :, :MAX_TILES], lanes[:, :, PROGRAM_SLOT]
    entry, exits = prog[:, 0, 0], prog[:, :, 4].max(dim=1).values
    inits, loader, consumer = prog[:, 0, 1], prog[:, 0, 2], prog[:, 0, 3]
    seen = tiles[..., 0] != 0
    big = torch.iinfo(torch.int64).max
    first = torch.where(seen, tiles[..., 0], big).flatten(1).min(dim=1).values
    data = torch.where(seen, tiles[..., 2], big).flatten(1).min(dim=1).values  # the first stage's arrival
    last = torch.where(seen, tiles[..., 4], 0).flatten(1).max(dim=1).values
    ok = (entry != 0) & (exits != 0) & seen.flatten(1).any(dim=1)
    if not bool(ok.any()):
        return dict.fromkeys(("prologue", "drain", "kernel", "tiles", "inits", "loader", "consumer", "data"), math.nan)
    return {
        "inits": float((inits - entry)[ok].float().median()) / 1e3,
        "loader": float((loader - entry)[ok].float().median()) / 1e3,
        "consumer": float((consumer - entry)[ok].float().median()) / 1e3,
        "data": float((data - entry)[ok].float().median()) / 1e3,
        "prologue": float((first - entry)[ok].float().median()) / 1e3,
        "drain": float((exits - last)[ok].float().median()) / 1e3,
        "kernel": float(exits[ok].max() - entry[ok].min()) / 1e3,
        "tiles": float(last[ok].max() - first[ok].min()) / 1e3,
    }


def skew(trace: torch.Tensor) -> dict[str, float]:
    """One launch, why its span exceeds a program's (v27): the programs' entries after the first one's, their spans
    (entry to the later warpgroup's exit) and exits after the first entry, as percentiles (us), and ``late``: the SMs
    of the four programs that exit last."""
    lanes = trace.view(-1, 2, SLOTS, len(FIELDS))
    prog = lanes[:, :, PROGRAM_SLOT]
    entry, exits = prog[:, 0, 0], prog[:, :, 4].max(dim=1).values
    ok = (entry != 0) & (exits != 0)
    if not bool(ok.any()):
        return {}
    entry, exits, sms = entry[ok], exits[ok], lanes[ok][:, 0, 0, FIELDS.index("sm")]
    first = entry.min()
    q = torch.tensor([0.5, 0.9, 1.0], dtype=torch.float64)
    out = {}
    for what, v in (("entry", entry - first), ("span", exits - entry), ("exit", exits - first)):
        p50, p90, top = (torch.quantile(v.double(), q) / 1e3).tolist()
        out.update({f"{what} p50": p50, f"{what} p90": p90, f"{what} max": top})
    out["span min"] = float((exits - entry).min()) / 1e3
    out["late"] = sms[exits.argsort(descending=True)[:4]].tolist()
    return out


def compact(trace: torch.Tensor) -> torch.Tensor:
    """A launch's records for --save (SAVED columns, int32, times in ns from the launch's first tile start)."""
    recs = trace.view(-1, SLOTS, len(FIELDS))[:, :MAX_TILES]  # (program * 2 + warpgroup, slot, field)
    lanes, slots = (recs[..., 0] != 0).nonzero(as_tuple=True)
    rec = recs[lanes, slots]
    times = rec[:, :5] - rec[:, 0].min() if rec.numel() else rec[:, :5]
    return torch.cat([torch.stack([lanes // 2, lanes % 2, slots, rec[:, 7], rec[:, 5]], 1), times], 1).int()


SAVED = ("program", "wg", "slot", "kind", "sm", *FIELDS[:5])


def timer_step(traces: list[torch.Tensor]) -> float:
    """The smallest step of %globaltimer seen (ns): its resolution, at least."""
    stamps = torch.cat([t[..., :5][t[..., 0] != 0].flatten() for t in traces]).unique()
    return float((stamps[1:] - stamps[:-1]).min()) if stamps.numel() > 1 else float("nan")


def trace_variant(
    tm, name: str, m: int, kinds: list[str], reps: int, device, saved: dict, warm: bool = False, programs: int = 0
) -> None:
    """One variant at M: its check, then a table row per kind traced and kind of tile seen."""
    b, s = m // 128, 128
    cfg = variant(name, m, s)
    if cfg is None:
        print(f"| {name} | | no Gluon table entry for ({b},{s}) |", flush=True)
        return
    real = gb.plan_for(m, cfg, programs or torch.cuda.get_device_properties(device).multi_processor_count)
    verdict = check(tm, b, s, cfg, real, device)
    if name in DIAG:  # a copy without part of its epilogue: wrong outputs are what it is, its timing is the point
        verdict += " (a diagnostic copy: its outputs are not all written)"
    print(f"| {name} | check | {real.kind} p_ga={real.p_ga} programs={real.programs} | {verdict} |", flush=True)
    for kind in kinds:
        plan = kind_plan(real, kind)
        traces = trace_runs(tm, b, s, cfg, plan, reps, device, warm)
        saved[f"{m}/{name}/{kind}"] = [compact(tr) for tr in traces]
        per = [summarise(t, m) for t in traces]
        expected = {0: plan.n_ga, 1: plan.n_gw}
        for k in sorted({k for p in per for k in p}):
            cells = [statistics.median(p[k][c] for p in per if k in p) for c, _ in COLUMNS]
            seen = sorted({int(p[k]["n"]) for p in per if k in p})
            flag = "" if seen == [expected[k]] else f" (expected {expected[k]})"
            steps = HIDDEN // gb.BK if k == 0 else -(-m // gb.BK)
            print(
                f"| {name} | {kind}: {'ga' if k == 0 else 'gw'} x{steps} | p_ga={plan.p_ga} programs={plan.programs} | "
                + " | ".join(f"{v:.2f}" for v in cells)
                + f" | {seen}{flag} | {timer_step(traces):.0f} ns |",
                flush=True,
            )
        out = [outside(t) for t in traces]
        cell = {c: statistics.median(o[c] for o in out) for c in out[0]}
        print(
            f"| {name} | {kind}: outside the tiles | prologue {cell['prologue']:.2f} | drain {cell['drain']:.2f} | "
            f"kernel {cell['kernel']:.2f} | tiles {cell['tiles']:.2f} | from the entry: inits {cell['inits']:.2f}, "
            f"loader {cell['loader']:.2f}, consumer {cell['consumer']:.2f}, first stage {cell['data']:.2f} |",
            flush=True,
        )
        sk = [skew(t) for t in traces]
        if sk and sk[0]:
            med = {c: statistics.median(k[c] for k in sk) for c in sk[0] if c != "late"}
            print(
                f"| {name} | {kind}: skew | entry after the first p50/p90/max {med['entry p50']:.2f} / "
                f"{med['entry p90']:.2f} / {med['entry max']:.2f} | span min/p50/p90/max {med['span min']:.2f} / "
                f"{med['span p50']:.2f} / {med['span p90']:.2f} / {med['span max']:.2f} | exit p50/p90/max "
                f"{med['exit p50']:.2f} / {med['exit p90']:.2f} / {med['exit max']:.2f} | last to exit (SM), three "
                f"launches: {[k['late'] for k in sk[:3]]} |",
                flush=True,
            )
        saved[f"{m}/{name}/{kind}/programs"] = [t.view(-1, 2, SLOTS, len(FIELDS))[:, :, PROGRAM_SLOT] for t in traces]


def part_trace(args: argparse.Namespace, device) -> None:
    saved: dict[str, list[torch.Tensor]] = {}
    modules = traced_modules(args.variants.split(","))
    for m in args.ms:
        l2 = "warm L2 (no flush)" if args.warm else "L2 flushed"
        print(
            f"\n== M={m} ({m // 128},128), {l2}: us, medians over {args.reps} launches of each launch's mean",
            flush=True,
        )
        head = "| variant | kind | plan | " + " | ".join(h for _, h in COLUMNS) + " | tiles seen | timer step |"
        print(head + "\n|" + "---|" * (head.count("|") - 1), flush=True)
        for name in args.variants.split(","):
            try:
                tm = modules[DIAG.get(name, 0)]
                trace_variant(tm, name, m, args.kinds.split(","), args.reps, device, saved, args.warm, args.programs)
            except Exception as exc:  # one variant failing must not cost the others
                print(f"| {name} | failed | {type(exc).__name__}: {str(exc)[:300]} |", flush=True)
        if args.save:  # after every M: a later hang or timeout keeps what was traced
            torch.save({"fields": SAVED, "traces": saved}, args.save)


def compile_only(ms: list[int], names: list[str]) -> int:
    """The traced copy compiled for sm_90 on this host (no GPU): per M and variant, one line of figures."""
    from diag_gluon import _resource_usage, compile_for, sass_counts, waterfalls  # scripts/ is on the path (a script)

    modules = traced_modules(names)
    trace = torch.zeros(132 * 2 * SLOTS * len(FIELDS), dtype=torch.int64)
    for m in ms:
        s = min(128, m)
        for name in names:
            try:
                cfg = variant(name, m, s)
            except ValueError as exc:  # the variant's switches do not go with this M's entry (e.g. bk 32, ping-pong)
                print(f"M={m} {name}: not a valid configuration here: {exc}")
                continue
            if cfg is None:
                print(f"M={m} {name}: no Gluon table entry for this shape")
                continue
            _, k = compile_for(m, s, cfg, module=modules[DIAG.get(name, 0)], extra={"trace_ptr": trace})
            ptx = k.asm["ptx"]
            print(
                f"M={m} {name} traced: shared {k.metadata.shared} B, {_resource_usage(k.asm['cubin'])}, "
                f"globaltimer {ptx.count('%globaltimer')}, smid {ptx.count('%smid')}, "
                f"st.global {ptx.count('st.global')}, wgmma {ptx.count('wgmma.mma_async')}, "
                f"tma_store {ptx.count('cp.async.bulk.tensor.2d.global.shared')}, stmatrix {ptx.count('stmatrix')}, "
                f"{sass_counts(k.asm['cubin'])}, waterfalls {waterfalls(k.asm['cubin'])}",
                flush=True,
            )
    return 0


def main(args: argparse.Namespace) -> int:
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS] + [k for k in args.kinds.split(",") if k not in (*KINDS, "both")]
    unknown += [p for p in args.parts.split(",") if p != "trace"] + [m for m in args.ms if m % 128]
    if unknown:
        print(f"unknown variant(s), kind(s) or part(s), or M not a multiple of 128: {unknown}", file=sys.stderr)
        return 2
    if args.programs < 0:
        print(f"--programs {args.programs}: a count of programs (0: one an SM)", file=sys.stderr)
        return 2
    if args.compile_only is not None:
        return compile_only(args.compile_only or args.ms, names)
    device = torch.device("cuda")
    print(f"GPU {torch.cuda.get_device_name(device)}, fields {FIELDS}", flush=True)
    if "trace" in args.parts.split(","):
        part_trace(args, device)
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
