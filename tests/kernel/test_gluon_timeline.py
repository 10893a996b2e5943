"""The traced copy of the Gluon kernel (``scripts/diag_gluon_timeline.py``: kernel/gluon_backward.py's source
rewritten at fixed anchors to stamp each tile) compiled for sm_90 on a machine without a GPU, cooperative and
ping-pong, as tests/kernel/test_kernel_compile.py does for the tile-language kernel's traced copy; and an anchor
the kernel's text has lost is named by the rewrite, not passed over. If the kernel moves on, this fails here
rather than on the GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support import PROJECT
from tests.support.sm90 import H200_SHARED_MAX, cuda_env, ptxas_present, run_script

pytestmark = pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")


def test_traced_gluon_kernel_compiles_cooperative_and_pingpong_with_its_stamps() -> None:
    out = run_script("scripts/diag_gluon_timeline.py", "--compile-only", "512", "--variants", "coop,pp7,w256s3")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if " traced: " in ln]
    names = [ln.split(" traced")[0] for ln in lines]
    assert names == ["M=512 coop", "M=512 pp7", "M=512 w256s3"], out.stdout
    for line in lines:
        assert 0 < int(re.search(r"shared (\d+) B", line).group(1)) <= H200_SHARED_MAX, line
        assert "stack 0, local 0" in line, line  # no register spills
        # the stamps (timer and SM id), their records' stores, and the kernel's own MMAs
        for what in ("globaltimer", "smid", "st.global", "wgmma"):
            assert int(re.search(rf"{re.escape(what)} (\d+)", line).group(1)) > 0, line
    # the stamps put no waterfall loop around the loader's TMAs (the trace times the kernel, not a slower copy;
    # kernel/NOTES.md item 30)
    loops = {name: int(re.search(r"waterfalls (\d+)", line).group(1)) for name, line in zip(names, lines, strict=True)}
    assert loops == {"M=512 coop": 0, "M=512 pp7": 0, "M=512 w256s3": 0}, loops


def test_a_lost_anchor_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))  # scripts/ is no package: the script's own import path
    import diag_gluon_timeline as dgt

    src = (PROJECT / "kernel" / "gluon_backward.py").read_text()
    traced = dgt.traced_source(src)
    # two kinds of tile, each cooperative (after its TMA stores) and ping-pong (after its held stage's release)
    assert traced.count("_trace_tile(trace_ptr, WG, nt") == 4
    assert traced.count("_trace_issue(trace_ptr, nt_l)") == 2  # the loader's stamp, one a kind of tile (v25)
    with pytest.raises(dgt.AnchorError, match=r"if nt % 2 == WG.*found 0.*update the anchors"):
        dgt.traced_source(src.replace("if nt % 2 == WG:", "if WG == nt % 2:"))


def test_wgmma_ceiling_loops_compile_for_sm90_with_their_mmas_and_no_spills() -> None:
    """scripts/diag_wgmma_ceiling.py's loops (the MMA ceiling the trace's per-step figures are set against):
    every variant compiles for sm_90 here, with its four k16 warpgroup MMAs a step and two programs' shared memory
    within an SM's (the two-per-SM variants must co-reside); the floor's stamped loop (scripts/diag_floor.py) reads
    the global timer and the SM clock at its start and end (compiled in a process of its own: Gluon cannot compile
    ``gl.sum`` where TRITON_INTERPRET made Triton's combine functions interpreted)."""
    out = run_script("scripts/diag_wgmma_ceiling.py", "--compile-only")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {ln.split()[0]: ln for ln in out.stdout.splitlines() if " shared " in ln}
    names = {"n128x2", "n128x2_amn", "n128x1", "n256x2", "n256x1", "n128x2_w0", "n256x2_2acc", "n128x2_stamp"}
    assert set(rows) == names, out.stdout
    for name, line in rows.items():  # four k16 MMAs a step for each accumulator
        assert f"wgmma in PTX {8 if name.endswith('_2acc') else 4}," in line, line
        # diag_floor's stamped loop (item 39) reads the timer and the clock at its start and end; no other does
        stamped = 2 if name.endswith("_stamp") else 0
        assert f"globaltimer {stamped}, clock64 {stamped}," in line, line
        assert "stack 0, local 0" in line, line  # no register spills
        assert 2 * int(re.search(r"shared +(\d+) B", line).group(1)) <= H200_SHARED_MAX, line


def test_the_time_outside_the_tiles_is_read_from_the_programs_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each program's record (its entry, its warpgroups' exits) sits after its tiles' slots: the tile summary never
    counts it as a tile, and ``outside`` gives the prologue (entry to first tile start) and where it goes, the drain
    (last epilogue end to the later warpgroup's exit), the kernel's span and the tiles' span, here on a made-up
    launch (ns)."""
    import torch

    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_gluon_timeline as dgt

    trace = torch.zeros(2, 2, dgt.SLOTS, len(dgt.FIELDS), dtype=torch.int64)  # two programs
    for program, entry in enumerate((1_000, 1_200)):
        for wg in range(2):  # one grad_weight tile a warpgroup: start, wait, ready, K end, epilogue end
            start = entry + 500 + 100 * wg
            trace[program, wg, 0, :5] = torch.tensor([start, start, start + 300, start + 5_000, start + 5_400])
            trace[program, wg, 0, 7] = 1
            trace[program, wg, dgt.PROGRAM_SLOT, 4] = start + 5_400 + 700 + 100 * wg  # exit after the drain
        trace[program, 0, dgt.PROGRAM_SLOT, 0] = entry
        # the barriers' init done, the loader's start, consumer 0's start (v24)
        trace[program, 0, dgt.PROGRAM_SLOT, 1:4] = torch.tensor([entry + 100, entry + 250, entry + 400])
    got = dgt.outside(trace)
    assert got == pytest.approx(
        {"prologue": 0.5, "drain": 0.8, "kernel": 7.0, "tiles": 5.7}
        | {"inits": 0.1, "loader": 0.25, "consumer": 0.4, "data": 0.8}  # data: the first stage's arrival
    )
    summary = dgt.summarise(trace, 512)
    assert set(summary) == {1} and summary[1]["n"] == 2  # two grad_weight tiles, no program record among them


def test_loads_only_diagnostic_runs_the_tables_loader_and_nothing_else() -> None:
    """scripts/diag_loads_only.py (kernel/NOTES.md items 24-25): the table's loader feeding a warpgroup that only
    releases the stages, on arrival or after an emulated MMA (``--hold-ns``), compiled for sm_90 at M = 1024 and
    2048: TMA loads and no MMA, no spills, and the ring of the table's entry in shared memory."""
    out = run_script("scripts/diag_loads_only.py", "--compile-only")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if " loads only, " in ln]
    assert [ln.split(":")[0] for ln in lines] == [
        f"M={m} loads only, hold {h} ns" for m in (1024, 2048) for h in (0, 300)
    ], out.stdout
    for line in lines:
        assert 6 * 32 * 1024 <= int(re.search(r"shared (\d+) B", line).group(1)) <= H200_SHARED_MAX, line
        assert "stack 0, local 0" in line and "wgmma 0," in line, line
        assert int(re.search(r"tma_load (\d+)", line).group(1)) > 0, line


def test_tma_latency_probe_compiles_with_its_rounds_of_boxes_and_its_stamps() -> None:
    """scripts/diag_tma_latency.py (kernel/NOTES.md item 34's Next 1): one warp a program loading three rounds of
    16 KB boxes, each on its own barrier, compiled for sm_90 with 1 and 12 boxes a round: 3 x B TMA loads, the
    eight %globaltimer stamps, and 12 boxes' shared memory within an SM's."""
    out = run_script("scripts/diag_tma_latency.py", "--compile-only")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {int(m.group(1)): m for m in re.finditer(r"B=(\d+): shared (\d+) B, tma loads (\d+), globaltimer (\d+)",
                                                     out.stdout)}  # fmt: skip
    assert set(rows) == {1, 12}, out.stdout
    for b, m in rows.items():
        assert int(m.group(3)) == 3 * b and int(m.group(4)) == 8, m.group(0)
        assert b * 16 * 1024 <= int(m.group(2)) <= H200_SHARED_MAX, m.group(0)


def test_the_loaders_stamp_gives_when_a_tiles_first_stage_left_and_how_long_it_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """v25: the loader stamps (field "issue" of warpgroup 0's record) when each tile's first stage is free and its
    loads leave; ``summarise`` gives, per kind of tile, that issue from the program's previous tile's last MMA
    retired (negative: before it) and the stage's latency (issue to arrival), here on a made-up launch (ns)."""
    import torch

    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_gluon_timeline as dgt

    issue = dgt.FIELDS.index("issue")
    trace = torch.zeros(1, 2, dgt.SLOTS, len(dgt.FIELDS), dtype=torch.int64)  # one program
    tiles = [(0, 1_000, 1_400, 11_000), (1, 11_500, 11_900, 16_700)]  # (kind, start=wait, first ready, K end)
    for slot, (kind, start, ready, kend) in enumerate(tiles):
        for wg in range(2):
            trace[0, wg, slot, :5] = torch.tensor([start, start, ready, kend, kend + 300])
            trace[0, wg, slot, 7] = kind
    trace[0, 0, 0, issue] = 300  # the first tile's loads left 1.1 us before they arrived
    trace[0, 0, 1, issue] = 11_000 - 1_500  # the second's 1.5 us before the first tile's last MMA retired
    got = dgt.summarise(trace, 1024)
    assert got[0]["lat"] == pytest.approx(1.1) and got[0]["issue"] != got[0]["issue"]  # nan: no tile before it
    assert got[1]["issue"] == pytest.approx(-1.5) and got[1]["lat"] == pytest.approx(2.4)


def test_the_sm_clock_the_data_waits_and_the_skew_are_read_from_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """v27: a tile's record carries the SM's %clock64 at its first MMA wait and at its K loop's end, and the clocks
    its warpgroup spent in the loop's ready waits: ``summarise`` gives the loop's clock (MHz) and that share (%);
    ``skew`` gives the programs' entries after the first, their spans and exits (us), and the SMs that exit last,
    here on a made-up launch (ns, clocks)."""
    import torch

    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_gluon_timeline as dgt

    f = dgt.FIELDS.index
    trace = torch.zeros(3, 2, dgt.SLOTS, len(dgt.FIELDS), dtype=torch.int64)
    for program, (entry, exit_, sm) in enumerate(((1_000, 20_000, 7), (1_300, 21_000, 8), (1_100, 24_000, 9))):
        for wg in range(2):  # one grad_weight tile of 10 us at 1.7 GHz, a fifth of its clocks in data waits
            trace[program, wg, 0, :5] = torch.tensor([2_000, 2_000, 2_300, 12_000, 12_300])
            trace[program, wg, 0, f("sm")], trace[program, wg, 0, f("kind")] = sm, 1
            trace[program, wg, 0, f("cwait")], trace[program, wg, 0, f("ckend")] = 50_000, 50_000 + 17_000
            trace[program, wg, 0, f("waited")] = 3_400
            trace[program, wg, dgt.PROGRAM_SLOT, 4] = exit_ - 100 * wg
        trace[program, 0, dgt.PROGRAM_SLOT, 0] = entry
    got = dgt.summarise(trace, 512)[1]
    assert got["mhz"] == pytest.approx(1_700) and got["waits"] == pytest.approx(20)
    sk = dgt.skew(trace)
    assert sk["entry max"] == pytest.approx(0.3) and sk["span min"] == pytest.approx(19.0)
    assert sk["exit max"] == pytest.approx(23.0) and sk["span max"] == pytest.approx(22.9)
    assert sk["late"] == [9, 8, 7]


def test_the_epilogue_diagnostics_take_out_only_their_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """v27: ``nost`` takes the cooperative epilogue's TMA stores out of the traced copy (one of grad_attn's heads,
    one of grad_weight's blocks), ``nosm`` its passes through the shared buffer (the accumulator kept live instead);
    ping-pong's stay."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_gluon_timeline as dgt

    src = (PROJECT / "kernel" / "gluon_backward.py").read_text()
    plain, nost, nosm = (dgt.traced_source(src, d) for d in (0, dgt.DIAG["nost"], dgt.DIAG["nosm"]))
    live = "\n".join(ln for ln in nost.splitlines() if not ln.lstrip().startswith("pass  #"))
    assert plain.count("tma.async_copy_shared_to_global(") - live.count("tma.async_copy_shared_to_global(") == 2
    assert plain.count("_epilogue_pass(epi_g") == 2 and nosm.count("_epilogue_pass(epi_g") == 0
    assert nosm.count("_keep_live(acc, trace_ptr, WG)") == 2
    assert "e0.store(acc0" in nosm  # ping-pong's stay
    assert nosm.count("tma.async_copy_shared_to_global(") == plain.count("tma.async_copy_shared_to_global(")


def test_the_epilogue_diagnostics_keep_every_mma_in_the_sass() -> None:
    """v27: a traced copy without the epilogue's shared-memory writes must still run every MMA, or its timing says
    nothing of the kernel: with the accumulator simply unused, ptxas dropped 12 of the 16 HGMMA (the loop ran
    faster than the tensor cores can); ``_keep_live`` keeps them. Each diagnostic copy has the entry's HGMMA in its
    SASS, and only the parts it takes out gone (STSM: the shared-memory writes, UTMASTG: the TMA stores)."""
    out = run_script("scripts/diag_gluon_timeline.py", "--compile-only", "1024", "--variants", "coop,nost,nosm,noepi")
    assert out.returncode == 0, out.stderr[-3000:]
    counts = {}
    for line in out.stdout.splitlines():
        if " traced: " in line:
            name = line.split(" traced")[0].split()[-1]
            counts[name] = tuple(
                int(re.search(rf"SASS {op} (\d+)", line).group(1)) for op in ("HGMMA", "STSM", "UTMASTG")
            )
    hgmma, stsm, tma_st = counts["coop"]
    assert hgmma > 0 and stsm > 0 and tma_st > 0, counts
    assert counts == {
        "coop": (hgmma, stsm, tma_st),
        "nost": (hgmma, stsm, 0),
        "nosm": (hgmma, 0, tma_st),
        "noepi": (hgmma, 0, 0),
    }


def test_a_count_of_programs_below_zero_is_refused_in_one_line() -> None:
    """``--programs`` plans the trace for that many programs (0: one an SM); a negative count is refused before
    anything is compiled or run, in one line and with exit code 2."""
    out = run_script("scripts/diag_gluon_timeline.py", "--programs", "-1")
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert out.stderr.strip().splitlines()[-1] == "--programs -1: a count of programs (0: one an SM)", out.stderr


def test_floor_plans_give_the_busiest_programs_steps_and_an_even_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/diag_floor.py (kernel/NOTES.md item 39): the floor's two plans in 128x128x64 steps. ``whole``: the
    busiest program of the table's whole-tile plan, on its programs (at M = 1024: 128 programs of one grad_attn and
    two grad_weight tiles, 64 steps); ``split``: the problem's steps spread evenly on every SM, rounded up (62.06 ->
    63); both cover the problem's FLOPs (4 M 2048^2 over 2 128 128 64 a step)."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_floor

    for m in (256, 512, 1024, 2048, 4096, 8192):
        total = diag_floor.total_steps(m)
        assert total == 4 * m * 2048**2 // (2 * 128 * 128 * 64), m
        plans = diag_floor.plans(m, 132)
        (busy, whole), (sms, split) = plans["whole"], plans["split"]
        assert sms == 132 and split == -(-total // 132), (m, plans)
        assert busy <= 132 and busy * whole >= total and whole >= split, (m, plans)
    assert diag_floor.plans(1024, 132) == {"whole": (128, 64), "split": (132, 63)}
    assert diag_floor.plans(512, 132)["whole"] == (128, 32)  # partitioned: 64 x one grad_attn, 64 x four grad_weight


def test_the_plans_tiles_cut_the_busiest_programs_steps_where_the_table_puts_its_boundaries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """scripts/diag_floor.py's cut of the io floor into the table's tiles: the busiest program's (at a tie, the one
    with the most boundaries). M = 1024: one grad_attn tile of 32 steps, then two grad_weight tiles of 16, every
    program; M = 256 and 512 (partitioned, 64 grad_attn programs): the grad_weight programs' tiles of M / 64 steps,
    programs 64 and later; every cut covers the busiest program's steps exactly (the io floor accepts it)."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_floor

    assert diag_floor.plan_tiles(1024, 132) == (0, (32, 16))
    assert diag_floor.plan_tiles(512, 132) == (64, (8, 8))
    assert diag_floor.plan_tiles(256, 132) == (64, (4, 4))
    for m in (256, 512, 1024, 2048, 4096, 8192):
        busy, steps = diag_floor.plans(m, 132)["whole"]
        cut_from, (first, every) = diag_floor.plan_tiles(m, 132)
        assert 0 < first <= steps and (steps - first) % every == 0 and cut_from < busy, (m, first, every)
        assert callable(diag_floor.io_fn(busy, steps, m // 128, (first, every), cut_from=cut_from))


def test_the_io_floor_loads_its_first_two_steps_runs_the_floors_mmas_and_stores_its_tile() -> None:
    """scripts/diag_floor.py --io (kernel/NOTES.md item 41): the floor with what no kernel can leave out compiles for
    sm_90 here, in 128x128 and 128x256 tiles: two K-steps' blocks loaded by TMA (one A box and B's two or four
    64-column boxes each), four k16 warpgroup MMAs a step (m64n128 or m64n256 a warpgroup), the tile stored by two or
    four TMA stores (at each tile boundary and at the end: one call site), the stamps' reads of the timer and the
    clock (the entry, the first data, the loop's end, the store), no spills, one program within an SM's shared
    memory; with a loader warp's loads beside the MMAs (``ws_floor_loop``: the kernel's partitions, two consumer
    warpgroups and a loader warp), one more call site of a step's three TMA loads; with a split plan's fix-ups
    (``fixup_floor_loop``), an fp32 partial's four boxes stored at the boundary and another's four loaded; with the
    last tile reduce-added (``REDUCE``, with the loader warp's loads beside or not), the store's boxes again as TMA
    reduce-adds."""
    out = run_script("scripts/diag_floor.py", "--compile-only")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {ln.split()[0]: ln for ln in out.stdout.splitlines() if " shared " in ln}
    kinds = ("", "_n256", "_ws6", "_reduce", "_ws6_reduce", "_fixup")
    assert set(rows) == {f"io_floor{kind}{stamp}" for kind in kinds for stamp in ("", "_stamp")}, out.stdout
    for name, line in rows.items():
        if "ws" in name:  # two consumer warpgroups (MMAs, stores, stamps each), the loader's one more call site
            adds = 4 if "reduce" in name else 0  # (each warpgroup's two boxes)
            expected = f"wgmma in PTX 8, TMA loads 9, TMA stores 4, TMA reduce-adds {adds}, globaltimer 7, clock64 7,"
        elif "fixup" in name:  # the partial's four 32-column fp32 boxes read and written beside the io floor's
            expected = "wgmma in PTX 4, TMA loads 10, TMA stores 6, TMA reduce-adds 0, globaltimer 4, clock64 4,"
        else:
            loads, stores = (10, 4) if "n256" in name else (6, 2)
            adds = 2 if "reduce" in name else 0
            expected = (
                f"wgmma in PTX 4, TMA loads {loads}, TMA stores {stores}, TMA reduce-adds {adds}, globaltimer 4, "
                "clock64 4,"
            )
        assert expected in line, line
        assert "stack 0, local 0" in line, line
        assert int(re.search(r"shared (\d+) B", line).group(1)) <= H200_SHARED_MAX, line


def test_the_io_floor_refuses_tiles_that_do_not_cut_its_steps_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The io floor's tiles (the first tile's steps, then every later tile's) must cover its steps exactly: a cut
    that leaves steps over would time fewer MMAs than the plan runs, so it is refused before any launch, naming it."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_floor

    for tiles in ((0, 0), (32, 16), (64, 16)):  # one tile; the table's plan at M = 1024; one tile of 64 steps
        assert callable(diag_floor.io_fn(128, 64, 8, tiles))
    for tiles in ((32, 24), (70, 16), (32, 0)):
        with pytest.raises(ValueError, match=rf"tiles \({tiles[0]}, {tiles[1]}\): 64 steps are not"):
            diag_floor.io_fn(128, 64, 8, tiles)
    assert callable(diag_floor.io_fn(128, 32, 8, (16, 16), bn=256, cut_from=64))  # the 128x256 plan at M = 1024
    for busy, bn in ((132, 256), (128, 192)):  # 132 tiles of 256 columns leave grad_weight; no 192-column tile
        with pytest.raises(ValueError, match=rf"bn {bn} on {busy} programs"):
            diag_floor.io_fn(busy, 32, 8, bn=bn)
    assert callable(diag_floor.io_fn(128, 64, 8, (32, 16), sink=6))  # the loader warp's floor, a six-stage ring
    for sink, bn in ((6, 256), (2, 128), (17, 128)):  # 128x128 tiles only; a ring of 3 to 16 stages
        with pytest.raises(ValueError, match=rf"sink {sink} with bn {bn}"):
            diag_floor.io_fn(128, 32, 8, bn=bn, sink=sink)
    for parts in (0, 1, 2, 3):  # the split plan at M = 1024, one event: neither fix-up, the write, the read, both
        assert callable(diag_floor.io_fn(132, 63, 8, (32, 31), fixup=parts))
    for tiles, launch in (((0, 0), {}), ((21, 21), {}), ((32, 31), {"cut_from": 64}), ((32, 31), {"sink": 6})):
        with pytest.raises(ValueError, match=r"fix-ups in tiles"):  # two tiles, every program, the io floor's loop
            diag_floor.io_fn(132, 63, 8, tiles, fixup=3, **launch)
    with pytest.raises(ValueError, match=r"fix-ups in tiles"):
        diag_floor.io_fn(132, 63, 8, (32, 31), fixup=4)
    assert callable(diag_floor.io_fn(132, 63, 8, (32, 31), reduce=True))  # the split plan, its second piece added
    assert callable(diag_floor.io_fn(132, 63, 8, (32, 31), reduce=True, sink=6))  # and with the loads beside
    for tiles, launch in (((0, 0), {}), ((0, 0), {"sink": 6}), ((32, 31), {"fixup": 0})):
        with pytest.raises(ValueError, match=r"a reduce-add in tiles"):  # a tile to add to, the io floor's loop
            diag_floor.io_fn(132, 63, 8, tiles, reduce=True, **launch)


def test_the_128x256_plan_runs_the_busiest_steps_of_the_128x128_plan_with_half_its_boundaries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """scripts/diag_floor.py's 128x256 plan (item 41's Next): partitioned, its busiest program runs as many
    128x128x64-equivalent steps as the table's 128x128 plan (64 at M = 1024) on 128 programs: 64 with one grad_attn
    tile (no boundary), 64 with two grad_weight tiles (one boundary), where the 128x128 plan has two boundaries in
    every program; each kind's programs cover its tiles; not floored where grad_attn programs would run several."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_floor

    assert diag_floor.n256_plan(1024, 132) == (128, 32, 64, (16, 16))
    assert 2 * diag_floor.n256_plan(1024, 132)[1] == diag_floor.plans(1024, 132)["whole"][1]
    for m in (256, 512, 1024):
        busy, steps, p_ga, (first, every) = diag_floor.n256_plan(m, 132)
        ga_tiles, gw_tiles, k_gw = (m // 128) * 8, 128, m // 64
        assert p_ga >= ga_tiles and steps >= 32, m  # one grad_attn tile (32 steps) a program at most
        assert (busy - p_ga) * (steps // k_gw) >= gw_tiles and (first, every) in ((0, 0), (k_gw, k_gw)), m
        assert 2 * busy * steps >= diag_floor.total_steps(m), m
    assert diag_floor.n256_plan(2048, 132) is None


def test_the_io_floors_mmas_stay_pipelined_across_its_tile_boundaries() -> None:
    """The io floor is a floor only while its MMAs run as the kernel's do: one group in flight. Its first version
    reset the accumulator inside the MMA loop at a tile boundary, ptxas serialised every wgmma (advisory C7515) and
    the loop took 0.448 us a step on an H100 against the floor's 0.308 (docs/h100/v42b_floor_io.log). ptxas's own
    report on its sm_90a PTX, in 128x128 and 128x256 tiles, with loads beside its MMAs and without, with a split
    plan's fix-ups, with its last tile reduce-added, stamped and not: no serialisation advisory, no spill."""
    code = (
        "import sys, torch, diag_floor as d; from diag_gluon import compile_sm90; "
        "from tests.support.sm90 import ptxas_report; "
        "go = torch.empty(1024, 2048, dtype=torch.bfloat16); w = torch.empty(2048, 2048, dtype=torch.bfloat16); "
        "st_ = torch.empty(1, dtype=torch.int64); "
        "runs = [(d.io_floor_loop, (*d.io_floor_args(go, w, w), 64, 8, 32, 16, 0, st_), {'BN': 128, 'num_warps': 8}), "
        "(d.io_floor_loop, (*d.io_floor_args(go, w, w), 32, 8, 16, 16, 64, st_), {'BN': 256, 'num_warps': 8}), "
        "(d.ws_floor_loop, (*d.ws_floor_args(go, w, w), 64, 8, 32, 16, 0, st_), {'STAGES': 6, 'num_warps': 4}), "
        "(d.ws_floor_loop, (*d.ws_floor_args(go, w, w), 63, 8, 32, 31, 0, st_), "
        "{'STAGES': 6, 'REDUCE': True, 'num_warps': 4}), "
        "(d.io_floor_loop, (*d.io_floor_args(go, w, w), 63, 8, 32, 31, 0, st_), "
        "{'BN': 128, 'REDUCE': True, 'num_warps': 8}), "
        "(d.fixup_floor_loop, (*d.io_floor_args(go, w, w), d.fixup_workspace(132, 'cpu')[1], 63, 8, 32, st_), "
        "{'num_warps': 8})]; "
        "[print(ptxas_report(compile_sm90(f, a, {'STAMP': st, **kw}).asm['ptx'])) "
        "for f, a, kw in runs for st in (False, True)]"
    )
    env = cuda_env(PYTHONPATH=f"{PROJECT}{os.pathsep}{PROJECT / 'scripts'}")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("Compiling entry function 'io_floor_loop'") == 6, out.stdout[-2000:]
    assert out.stdout.count("Compiling entry function 'ws_floor_loop'") == 4, out.stdout[-2000:]
    assert out.stdout.count("Compiling entry function 'fixup_floor_loop'") == 2, out.stdout[-2000:]
    for advisory in ("C7510", "C7511", "C7514", "C7515", "C7517"):
        assert advisory not in out.stdout, out.stdout[-2000:]
    assert out.stdout.count("0 bytes spill stores, 0 bytes spill loads") == 12, out.stdout[-2000:]


def test_loads_beside_the_io_floor_without_the_io_floor_are_refused_in_one_line() -> None:
    """``--sink N`` adds variants to the io floor's runs; without ``--io`` it would be silently ignored, so it is
    refused before anything loads a GPU: one line naming the missing flag, exit 2."""
    out = run_script("scripts/diag_floor.py", "--ms", "1024", "--sink", "6")
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == ["diag_floor: --sink 6 adds to the io floor's runs: give --io too"], (
        out.stderr
    )


def test_the_floor_asked_for_one_card_names_the_card_it_got(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--only-on H200``: the device tool may lend an H100 for the H200's kind, and the floors' ratios differ by
    card (kernel/NOTES.md item 41: 0.02-0.03x), so a run asked for one card refuses another in one line naming both
    (exit 3 in the script); no name asked for, or the right card (its name's case aside), measures."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import diag_floor

    assert diag_floor.wrong_card("NVIDIA H100 80GB HBM3", "H200") == (
        "diag_floor: the GPU here is NVIDIA H100 80GB HBM3, not H200: nothing measured"
    )
    assert diag_floor.wrong_card("NVIDIA H200", "h200") is None
    assert diag_floor.wrong_card("NVIDIA H100 80GB HBM3", "") is None
    assert diag_floor.parse_args(["--only-on", "H200"]).only_on == "H200"


def test_the_floor_without_a_gpu_says_so_in_one_line() -> None:
    """scripts/diag_floor.py on a machine without a CUDA device: one line saying so (and what runs without one),
    exit 2, no traceback."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the script would measure")
    out = run_script("scripts/diag_floor.py", "--ms", "1024")
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        "diag_floor: no CUDA device here (--plan-only and --compile-only run without one)"
    ]
