"""The Gluon (warp-specialised Hopper) path: its selection table on the CPU, its sm_90 compile without a GPU
(scripts/diag_gluon.py), and on a GPU every table entry, enabled or not, against the harness's correctness loop."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace

import pytest
import torch

from kernel import gluon_backward as gb
from kernel.configs import bucket_for
from problem.correctness import check_rounds
from problem.reference import make_inputs
from problem.workload import CASES, HEAD_DIM, NUM_HEADS
from tests.support import PROJECT
from tests.support.sm90 import H200_SHARED_MAX, ptxas_present, ptxas_report, run_script

# The configurations the schedules' switches are built on in these tests, fixed rather than read from GLUON_TABLE
# (a sweep's selection rewrites the table: scripts/apply_gluon_selection.py): v18's cooperative 128x128 ring with
# v24's lazy inits (the table's entry at M = 512-2048 since v24) and v21's 128x256 tiles (its entry at M >= 4096)
RING = gb.GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, lazy_init=True)
WIDE = gb.GluonConfig(128, 256, 128, 256, host_desc=True)
WIDE_B32 = gb.GluonConfig(128, 256, 128, 256, stages=6, bk=32, host_desc=True, lazy_init=True)  # v31: K-steps of 32


def ring_for(m: int) -> gb.GluonConfig:
    """The fixed base configuration of M's bucket (RING up to 2048 rows, WIDE above)."""
    return RING if bucket_for(m) <= 2048 else WIDE


def test_selection_table_is_hopper_only_and_per_shape() -> None:
    for m, (cfg, enabled) in gb.GLUON_TABLE.items():
        assert m in (256, 512, 1024, 2048, 4096, 8192) and isinstance(enabled, bool)
        assert cfg.gw_bm == 128 and cfg.ga_bm in (64, 128)  # two warpgroups of 64 rows
        assert cfg.bk in (32, 64)  # a K-step of 32 only with host descriptors, cooperative (GluonConfig checks)
        # never on another architecture, nor under the interpreter (None), whatever the table says
        for cap in (None, (8, 0), (10, 0), (12, 0)):
            assert gb.gluon_config_for(m, 128, cap, include_disabled=True) is None
        assert gb.gluon_config_for(m, 128, (9, 0)) == (cfg if enabled else None)
        assert gb.gluon_config_for(m, 128, (9, 0), include_disabled=True) == cfg
    # shapes the Gluon kernel cannot store (S not a multiple of the grad_attn tile's rows) and M beyond the largest
    # bucket (never measured) fall back to the tile-language kernel
    assert gb.gluon_config_for(300, 100, (9, 0), include_disabled=True) is None
    assert gb.gluon_config_for(4096, 64, (9, 0), include_disabled=True) is None
    assert gb.gluon_config_for(16384, 128, (9, 0), include_disabled=True) is None
    assert gb.gluon_config_for(8192, 4096, (9, 0)) == gb.GLUON_TABLE[8192][0]


def test_enabled_entries_are_replayable() -> None:
    """The CI replays recorded launches, and the text of each argument's type reaches Triton's C launcher: every
    argument of an enabled entry's launch (its Gluon host descriptors included) must be a type the plan contract
    accepts (ci/harness/plan.py); and none is a cluster launch (v29's ``multicast``: the recorder takes
    ``num_ctas`` from the compiled metadata, 1, and would take the clusters' launch counters for scratch)."""
    from triton.runtime.jit import mangle_type

    from ci.harness.plan import signature_type

    b, s = 1, 256
    for m, (cfg, enabled) in gb.GLUON_TABLE.items():
        if not enabled:
            continue
        assert not cfg.multicast, f"M={m}: a cluster launch, which the CI's replay does not record"
        s = max(s, cfg.ga_bm)
        go, x, w = make_inputs(b, s, "cpu")
        ga = torch.empty((b, NUM_HEADS, s, HEAD_DIM), dtype=go.dtype)
        plan = gb.plan_for(b * s, cfg, 132)
        args, _ = gb.launch_arguments(
            go.reshape(b * s, -1), w, x.reshape(b * s, -1), torch.empty_like(w), ga, s, cfg, plan
        )
        for i, arg in enumerate(args):
            ty = mangle_type(arg)
            assert signature_type(ty, f"M={m} argument {i}") == ty


def test_enabled_entries_cover_only_measured_buckets() -> None:
    """Every enabled entry must name the bucket of a workload case (where it was measured on the H200)."""
    case_buckets = {bucket_for(c.m) for c in CASES}
    for m, (_, enabled) in gb.GLUON_TABLE.items():
        if enabled:
            assert m in case_buckets


def test_table_lines_are_the_selection_writers() -> None:
    """GLUON_TABLE's entry lines are written by scripts/apply_gluon_selection.py from the sweep's selection file, so
    the copy tested on the GPU and the commit carry the same text: each entry, written back from its configuration,
    leaves the module unchanged. Also the kernel's PINGPONG mode of the v19 switches."""
    import importlib.util
    from dataclasses import asdict

    spec = importlib.util.spec_from_file_location("apply_gluon_selection", PROJECT / "scripts/apply_gluon_selection.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (PROJECT / "kernel/gluon_backward.py").read_text()
    selection = {str(m): {"name": f"entry {m}", "config": asdict(cfg)} for m, (cfg, on) in gb.GLUON_TABLE.items() if on}
    assert selection and mod.apply(text, selection) == text
    base = gb.GluonConfig(128, 128, 128, 128)
    assert base.pingpong_mode == 0
    assert gb.GluonConfig(128, 128, 128, 128, pingpong=True).pingpong_mode == 1
    assert gb.GluonConfig(128, 128, 128, 128, pingpong=True, pp_gw_only=True).pingpong_mode == 2
    assert gb.GluonConfig(128, 128, 128, 128, pp_gw_only=True).pingpong_mode == 0  # only with pingpong
    # every switch reaches the line (v20's hold_release included): the line evaluates to the same configuration
    for cfg in (
        gb.GluonConfig(128, 128, 128, 128, stages=7, host_desc=True, epi_hold=True, hold_release=2),
        gb.GluonConfig(128, 128, 128, 128, stages=7, pingpong=True, pp_gw_only=True, pp_depth=2, hold_release=3),
        gb.GluonConfig(128, 256, 128, 256, stages=4, host_desc=True, halves=True),
        gb.GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, l2_prefetch=8, pf_distance=4, gw_first=True),
        gb.GluonConfig(
            128, 128, 128, 128, stages=6, host_desc=True, tmap_prefetch=True, next_prefetch=2, np_distance=8
        ),
        gb.GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, lazy_init=True, epi_defer=2, serpentine=True),
        gb.GluonConfig(128, 128, 128, 128, stages=7, host_desc=True, lazy_init=True, epi_global=2),
        gb.GluonConfig(128, 256, 128, 256, host_desc=True, first_ahead=8),
        gb.GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, multicast=True),
        gb.GluonConfig(  # v33, v34, v36, v37
            128, 128, 128, 128, stages=7, host_desc=True, lazy_init=True, epi_global=1, epi_vec=True, first_delay=300
        ),
        gb.GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, lazy_init=True, first_prefetch=2, stagger=True),
        gb.GluonConfig(128, 128, 128, 128, stages=3, host_desc=True, lazy_init=True, pingpong=True, solo=True),  # v38
    ):
        entry = mod.entry_line(512, asdict(cfg))  # wider than a line: continuation lines, each within the width
        assert all(len(line) <= 120 for line in entry.splitlines())
        assert eval(entry.split(": ", 1)[1].rstrip(","), {"GluonConfig": gb.GluonConfig}) == (cfg, True)
        table = text.replace(mod.entry_line(1024, asdict(gb.GLUON_TABLE[1024][0])), mod.entry_line(1024, asdict(cfg)))
        assert mod.apply(mod.apply(text, {"1024": {"config": asdict(cfg)}}), {}) == table  # read back, and rewritten
        again = {"1024": {"config": asdict(gb.GLUON_TABLE[1024][0])}}
        assert mod.apply(table, again) == text  # a wrapped entry is found and replaced whole
    with pytest.raises(SystemExit):
        mod.entry_line(512, {**asdict(base), "a_future_switch": 1})


def test_halves_only_where_a_warpgroup_owns_256_columns() -> None:
    """``halves`` (v22) splits each warpgroup's 256-column half-tile into two accumulators: cooperative tiles with
    128x256 grad_weight tiles (grad_attn's 128 or 256 columns, v24); anywhere else it is refused, never silently
    ignored."""
    assert gb.GluonConfig(128, 256, 128, 256, stages=4, halves=True).halves
    assert gb.GluonConfig(128, 128, 128, 256, stages=4, halves=True).halves  # v24 run b: grad_weight's only
    for bad in (
        {"ga_bn": 128, "gw_bn": 128},  # no 256-column half-tile to split
        {"gw_bn": 128},  # the grad_weight tiles' warpgroups own 128 columns
        {"ga_bm": 64},  # a 64-row grad_attn tile is split by columns already
        {"epi_hold": True},  # the held stage is one 32 KB epilogue, not two passes
        {"pingpong": True},
    ):
        with pytest.raises(ValueError, match="halves"):
            gb.GluonConfig(**{"ga_bm": 128, "ga_bn": 256, "gw_bm": 128, "gw_bn": 256, "halves": True, **bad})


def test_bk_and_k_rotate_are_checked() -> None:
    """``bk`` (v24) is 64, or 32 on the cooperative host-descriptor path without a held stage (the device-built
    descriptors and the held-stage epilogue assume 128-byte rows); ``k_rotate`` is a number of steps, not negative."""
    assert gb.GluonConfig(128, 128, 128, 128, stages=12, bk=32, host_desc=True, k_rotate=8).bk == 32
    for bad in (
        {"bk": 48, "host_desc": True},
        {"bk": 128, "host_desc": True},
        {"bk": 32},  # device-built descriptors
        {"bk": 32, "host_desc": True, "pingpong": True},
        {"bk": 32, "host_desc": True, "epi_hold": True},
    ):
        with pytest.raises(ValueError, match="bk"):
            gb.GluonConfig(128, 128, 128, 128, stages=7, **bad)
    with pytest.raises(ValueError, match="k_rotate"):
        gb.GluonConfig(128, 128, 128, 128, k_rotate=-1)


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_bk32_fits_twelve_stages_and_k_rotate_leaves_the_entries_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """K-steps of 32 (v24): 12 stages of 16 KB in the bytes of 6 of 32 KB, half the wgmma instructions a step, no
    spills; ``k_rotate`` changes the loader's PTX only when it is on (the ring without it stays as it was)."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))  # scripts/ is no package: the script's own import path
    from diag_gluon import compile_for, describe

    line = describe(1024, 128, replace(RING, bk=32, stages=12))
    assert "stages 12" in line and "local 0" in line and "stack 0" in line, line
    assert int(re.search(r"shared (\d+) B", line).group(1)) <= H200_SHARED_MAX, line
    assert re.search(r"wgmma 8\b", line), line  # two k16 instructions a warpgroup step instead of four
    cfg = RING
    ptx = {r: compile_for(1024, 128, replace(cfg, k_rotate=r))[1].asm["ptx"] for r in (0, 1)}
    plain = compile_for(1024, 128, cfg)[1].asm["ptx"]
    assert ptx[0] == plain and ptx[1] != plain


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_v31_variants_fit_their_stages_without_spills_or_waterfalls(monkeypatch: pytest.MonkeyPatch) -> None:
    """v31 (kernel/NOTES.md item 31): the sweep's 128x256 tiles in K-steps of 32 compile for sm_90 as the sweep will
    launch them: 6 stages of 24 KB beside the two 32 KB epilogue buffers, or 8 with the two-pass epilogue, within an
    SM's shared memory, no spill, every TMA of the loader outside a waterfall loop; half-depth steps issue half the
    wgmma instructions of the 128x256 entry's. So does v32's (v31's 6 stages, the epilogue deferred)."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))  # scripts/ is no package: the script's own import path
    import bench_gluon_v19 as sweep
    from diag_gluon import describe

    allv = sweep.variants()
    entry = describe(4096, 128, WIDE)
    v31 = (("w256b32s6_1024", 6, 6 * 24 * 1024), ("w256b32s8h_1024", 8, 8 * 24 * 1024))
    for name, stages, ring in (*v31, ("w256b32s6d_1024", 6, 6 * 24 * 1024)):  # v32: v31 with the epilogue deferred
        m, cfg = allv[name]
        assert (cfg.ga_bn, cfg.gw_bn, cfg.bk, cfg.stages, cfg.lazy_init) == (256, 256, 32, stages, True), name
        line = describe(m, 128, cfg)
        assert ring < int(re.search(r"shared (\d+) B", line).group(1)) <= H200_SHARED_MAX, line
        assert "local 0" in line and "stack 0" in line and re.search(r"waterfalls 0\b", line), line
        if not cfg.halves:  # one accumulator a warpgroup, as the entry's: two k16 instructions a step, not four
            wgmma = int(re.search(r"wgmma (\d+)", line).group(1))
            assert 2 * wgmma == int(re.search(r"wgmma (\d+)", entry).group(1)), (line, entry)


def test_the_session_scripts_ask_the_sweep_whether_the_table_changed(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench_gluon_v19.py --table-changed FILE`` (the session scripts run the GPU tests and the 16 cases only
    then): 0 when a bucket left its baseline, 1 when every bucket kept it, 2 and one line for a file it cannot read."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    import bench_gluon_v19 as sweep

    same = {str(b): {"name": sweep.baseline(b)} for b in (256, 1024, 8192)}
    (tmp_path / "same.json").write_text(json.dumps(same))
    (tmp_path / "moved.json").write_text(json.dumps({**same, "1024": {"name": "v18_1024"}}))
    (tmp_path / "broken.json").write_text("{not json")
    assert sweep.table_changed(str(tmp_path / "same.json")) == 1
    assert sweep.table_changed(str(tmp_path / "moved.json")) == 0
    assert sweep.table_changed(str(tmp_path / "broken.json")) == 2
    assert sweep.table_changed(str(tmp_path / "absent.json")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("bench_gluon_v19: cannot read the selection") for line in err)


def test_l2_prefetch_switches_are_checked() -> None:
    """``l2_prefetch`` (v23, v24) is a set of bit flags (1, 2, 4, 8, 16) and ``pf_distance`` a number of K-steps
    ahead: any other value is refused, not silently compiled into something else."""
    assert gb.GluonConfig(128, 128, 128, 128, l2_prefetch=31, pf_distance=1).l2_prefetch == 31
    for bad in ({"l2_prefetch": 32}, {"l2_prefetch": -1}, {"l2_prefetch": 8, "pf_distance": 0}):
        with pytest.raises(ValueError, match="l2_prefetch"):
            gb.GluonConfig(128, 128, 128, 128, **bad)


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_l2_prefetch_reaches_the_kernel_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's entries take no plain pointers and issue no L2 prefetch (their PTX is v22's); with
    ``l2_prefetch`` the host-descriptor entry also takes grad_output, weight and reshaped as pointers and its loader
    issues bulk L2 prefetches (flag 8: weight's rows and grad_output's column slice for grad_attn tiles, the rows of
    grad_output and reshaped for grad_weight tiles)."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))  # scripts/ is no package: the script's own import path
    from diag_gluon import compile_for

    cfg = RING
    counts = {}
    for flags in (0, 8):
        _, k = compile_for(1024, 128, replace(cfg, l2_prefetch=flags))
        ptx = k.asm["ptx"]
        params = set(re.findall(r"gluon_bwd_kernel_host_desc_param_(\d+)", ptx))
        counts[flags] = (len(re.findall(r"cp\.async\.bulk\.prefetch\.L2\.global", ptx)), len(params))
    assert counts[0][0] == 0 and counts[8][0] == 4, counts
    assert counts[8][1] == counts[0][1] + 3, counts  # three more parameters: the pointers


def test_descriptor_prefetch_switches_are_checked() -> None:
    """``tmap_prefetch`` and ``next_prefetch`` (v25) name the host-descriptor entry's parameters, so they need host
    descriptors; ``next_prefetch`` is 0-4 K-steps, ``np_distance`` at least one step, and the prefetched steps are
    a tile's first, so not with ``k_rotate``. Anything else is refused, not compiled into something else."""
    ok = gb.GluonConfig(128, 128, 128, 128, host_desc=True, tmap_prefetch=True, next_prefetch=4, np_distance=1)
    assert ok.next_prefetch == 4
    for bad, word in (
        ({"tmap_prefetch": True}, "host descriptors"),
        ({"next_prefetch": 2}, "host descriptors"),
        ({"host_desc": True, "next_prefetch": 5}, "next_prefetch"),
        ({"host_desc": True, "next_prefetch": -1}, "next_prefetch"),
        ({"host_desc": True, "next_prefetch": 2, "np_distance": 0}, "next_prefetch"),
        ({"host_desc": True, "next_prefetch": 2, "k_rotate": 1}, "next_prefetch"),
    ):
        with pytest.raises(ValueError, match=word):
            gb.GluonConfig(128, 128, 128, 128, **bad)


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_descriptor_prefetches_name_the_entrys_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    """The v25 prefetches address the descriptors by the PTX names of the host-descriptor entry's parameters (Gluon
    3.6 has no prefetch of its own): with ``tmap_prefetch`` every one of the six 128-byte descriptor parameters, and
    nothing else, gets one ``prefetch.tensormap``; with ``next_prefetch`` the tensor prefetches name only the four
    load descriptors' parameters (go_a, w_b, go_t, x_b), one a TMA box of the next tile's first steps; off, neither
    is in the PTX. A Triton whose entry lays its parameters out otherwise fails here, not on the GPU."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))  # scripts/ is no package: the script's own import path
    from diag_gluon import compile_for

    cfg = RING
    plain = compile_for(1024, 128, cfg)[1].asm["ptx"]
    assert "prefetch.tensormap" not in plain and "prefetch.tensor." not in plain
    ptx = compile_for(1024, 128, replace(cfg, tmap_prefetch=True, next_prefetch=2))[1].asm["ptx"]
    descriptors = set(re.findall(rf"\.param \.align 64 \.b8 ({gb.HOST_DESC_ENTRY}_param_\d+)\[128\]", ptx))
    assert len(descriptors) == 6, descriptors
    named = re.findall(rf"mov\.b64 d, ({gb.HOST_DESC_ENTRY}_param_\d+); cvta\.param\.u64 d, d; @p (\S+)", ptx)
    tmap = [p for p, op in named if op == "prefetch.tensormap"]
    boxes = {p for p, op in named if op.startswith("cp.async.bulk.prefetch.tensor.2d.L2.global")}
    assert sorted(tmap) == sorted(descriptors)
    loads = {f"{gb.HOST_DESC_ENTRY}_param_{i * gb.DESC_PARAMS}" for i in range(4)}
    assert loads <= descriptors and boxes == loads, boxes
    # M = 1024 plans grad_attn tiles first, then grad_weight ones: the next tile is a grad_attn one (2 steps of one
    # grad_output box and two weight boxes), the first grad_weight one, or a grad_weight one (2 x (2 + 2) boxes)
    assert len(re.findall(r"cp\.async\.bulk\.prefetch\.tensor\.2d", ptx)) == 2 * 3 + 2 * 4 + 2 * 4


def test_deferred_epilogue_and_serpentine_are_checked() -> None:
    """``epi_defer`` (v26) is 0, 1 (the bf16 half-tile written beside the next tile's first MMA) or 2 (only its TMA
    stores there), on cooperative 128-row tiles of one width for both kinds, 128 or (v32) 256 columns; ``serpentine``
    walks every other tile backwards, so it does not go with the switches that assume tiles walked forwards. Anything
    else is refused."""
    for mode in (1, 2):
        assert gb.GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, epi_defer=mode).epi_defer == mode
        assert replace(WIDE_B32, epi_defer=mode).epi_defer == mode
    assert gb.GluonConfig(64, 128, 128, 128, stages=7, host_desc=True, pingpong=True, serpentine=True).serpentine
    for bad, word in (
        ({"epi_defer": 3}, "epi_defer"),
        ({"epi_defer": 1, "ga_bm": 64}, "epi_defer"),  # a 64-row grad_attn tile: another accumulator shape
        ({"epi_defer": 1, "gw_bn": 256}, "epi_defer"),  # two widths: two accumulator layouts
        ({"epi_defer": 1, "ga_bn": 256}, "epi_defer"),
        ({"epi_defer": 1, "ga_bn": 256, "gw_bn": 256, "halves": True}, "epi_defer"),
        ({"epi_defer": 1, "epi_hold": True, "stages": 7}, "epi_defer"),
        ({"epi_defer": 2, "pingpong": True}, "epi_defer"),
        ({"serpentine": True, "k_rotate": 1}, "serpentine"),
        ({"serpentine": True, "next_prefetch": 2}, "serpentine"),
        ({"serpentine": True, "l2_prefetch": 8}, "serpentine"),
    ):
        with pytest.raises(ValueError, match=word):
            gb.GluonConfig(**{"ga_bm": 128, "ga_bn": 128, "gw_bm": 128, "gw_bn": 128, "host_desc": True, **bad})


def test_the_epilogue_from_registers_and_the_first_tiles_prefetch_are_checked() -> None:
    """``epi_global`` (v27) is 0, 1 (stores from registers at the tile's end) or 2 (beside the next tile's first
    MMA), on cooperative 128x128 tiles of both kinds with host descriptors and K-steps of 64; not with the other
    epilogues (the held stage, ping-pong, two passes, the deferred one). ``first_ahead`` (v28) is a number of
    K-steps, with host descriptors (its prefetches name their parameters) and tiles walked forwards. Anything else
    is refused."""
    for mode in (1, 2):
        cfg = gb.GluonConfig(128, 128, 128, 128, stages=7, host_desc=True, lazy_init=True, epi_global=mode)
        assert cfg.epi_global == mode
        assert replace(cfg, epi_vec=True).epi_vec
    for bad, word in (
        ({"epi_global": 3}, "epi_global"),
        ({"epi_global": 1, "host_desc": False}, "epi_global"),
        ({"epi_global": 1, "ga_bm": 64}, "epi_global"),
        ({"epi_global": 1, "gw_bn": 256}, "epi_global"),
        ({"epi_global": 1, "bk": 32, "stages": 12}, "epi_global"),
        ({"epi_global": 1, "epi_hold": True, "stages": 7}, "epi_global"),
        ({"epi_global": 2, "pingpong": True}, "epi_global"),
        ({"epi_global": 1, "epi_defer": 1}, "epi_global"),
        ({"epi_vec": True}, "epi_vec"),  # v33: the 16-byte rows of the stores from registers, only with them
        ({"first_ahead": -1}, "first_ahead"),  # v28: K-steps ahead, host descriptors, tiles walked forwards
        ({"first_ahead": 4, "host_desc": False}, "first_ahead"),
        ({"first_ahead": 4, "k_rotate": 1}, "first_ahead"),
        ({"first_ahead": 4, "serpentine": True}, "first_ahead"),
        ({"first_delay": -1}, "first_delay"),  # v34: ns the loader sleeps after the ring's first stage
        ({"first_delay": 20_000}, "first_delay"),
        ({"first_delay": 300, "host_desc": False}, "first_delay"),
        ({"first_prefetch": 5}, "first_prefetch"),  # v36: K-steps of the first tile asked of L2 at the entry
        ({"first_prefetch": 2, "host_desc": False}, "first_prefetch"),
        ({"first_prefetch": 2, "k_rotate": 1}, "first_prefetch"),
        ({"stagger": True, "pingpong": True, "stages": 7}, "stagger"),  # v37: the cooperative consumers only
        ({"stagger": True, "epi_defer": 1}, "stagger"),
        ({"stagger": True, "gw_first": True}, "stagger"),
        ({"solo": True}, "solo"),  # v38: ping-pong's consumer alone, two programs an SM
        ({"solo": True, "pingpong": True, "stages": 4}, "solo"),
        ({"solo": True, "pingpong": True, "stages": 3, "pp_gw_only": True}, "solo"),
        ({"solo": True, "pingpong": True, "stages": 3, "pp_depth": 2}, "solo"),
        ({"solo": True, "pingpong": True, "stages": 3, "host_desc": False}, "solo"),
        ({"solo": True, "pingpong": True, "stages": 3, "ga_bm": 64}, "solo"),
    ):
        with pytest.raises(ValueError, match=word):
            gb.GluonConfig(**{"ga_bm": 128, "ga_bn": 128, "gw_bm": 128, "gw_bn": 128, "host_desc": True, **bad})


def test_multicast_is_checked() -> None:
    """``multicast`` (v29) runs 2-CTA clusters on cooperative 128x128 tiles of both kinds with host descriptors
    (its PTX names their parameters), K-steps of 64, an even group (a cluster's two programs run tiles of one column
    block) and the ring's mbarriers initialised before the partitions start (the peer may multicast into a stage
    before this CTA's loader first fills it); not beside another schedule's switch; and only on plans whose programs
    pair up (an even count, an even partition, an even number of row blocks: ``launch`` runs the others without
    it)."""
    ok = gb.GluonConfig(128, 128, 128, 128, stages=6, host_desc=True, multicast=True)
    assert ok.multicast
    for bad in (
        {"host_desc": False},
        {"ga_bm": 64},
        {"gw_bn": 256},
        {"bk": 32, "stages": 12},
        {"group": 3},
        {"lazy_init": True},
        {"epi_hold": True, "stages": 7},
        {"pingpong": True},
        {"epi_global": 1},
        {"first_ahead": 4},
        {"k_rotate": 1},
        {"serpentine": True},
        {"tmap_prefetch": True},
        {"gw_first": True},
        {"first_delay": 300},
        {"first_prefetch": 2},
        {"stagger": True},
        {"multicast": 5},  # 1 the multicast; diagnostics: 2 the coupled rings with local loads, 3-4 spinning waits
    ):
        with pytest.raises(ValueError, match="multicast"):
            gb.GluonConfig(**{"ga_bm": 128, "ga_bn": 128, "gw_bm": 128, "gw_bn": 128, "host_desc": True,
                              "multicast": True, **bad})  # fmt: skip
    from scripts.diag_gluon import launch_tensors

    for m, programs in ((896, 132), (640, 66)):  # 123 programs, 7 row blocks; a partition of 27 programs
        plan = gb.plan_for(m, ok, programs)
        assert not gb.pairs_programs(plan)
        with pytest.raises(ValueError, match="multicast: pairs"):
            gb.launch_arguments(*launch_tensors(m, 128), 128, ok, plan)
    assert gb.pairs_programs(gb.plan_for(1024, ok, 132)) and gb.pairs_programs(gb.plan_for(512, ok, 132))


@pytest.mark.parametrize("m", [1024, 1536, 2048, 3072, 4096, 6144, 8192])
def test_stream_k_ranges_split_each_tile_at_most_once_and_balance_the_programs(m: int) -> None:
    """v30: on the H200's 132 programs the stream kind's K-steps are cut into one range a program, in order and
    without gap or overlap; every range is at least one tile long (so a tile is split at most once, between programs
    p and p + 1: the later one, which waits for the earlier one's partial); and every program runs the same number
    of K-steps, whole tiles and range together, within one (the whole-tile plan runs 128 programs of up to 64 at
    M = 1024)."""
    cfg = replace(ring_for(m), stream_k=True)
    kind = gb.stream_k_kind(m, cfg, 132)
    assert kind == (2 if m <= 2048 else 1)  # the shorter tiles' kind: grad_weight's K = M, grad_attn's 2048
    l_ga, l_gw = 2048 // cfg.bk, -(-m // cfg.bk)
    n_ga, n_gw = -(-m // cfg.ga_bm) * (2048 // cfg.ga_bn), (2048 // cfg.gw_bm) * (2048 // cfg.gw_bn)
    l_s, n_s, l_w, n_w = (l_gw, n_gw, l_ga, n_ga) if kind == 2 else (l_ga, n_ga, l_gw, n_gw)
    ranges = gb.stream_k_ranges(m, cfg, 132, kind)
    assert ranges[0][0] == 0 and ranges[-1][1] == n_s * l_s
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(z1 - z0 >= l_s for z0, z1 in ranges)
    steps = [z1 - z0 + l_w * len(range(p, n_w, 132)) for p, (z0, z1) in enumerate(ranges)]
    assert sum(steps) == n_ga * l_ga + n_gw * l_gw and max(steps) - min(steps) <= 1
    assert gb.plan_for(m, cfg, 132).programs == 132


def test_stream_k_is_checked_and_falls_back_where_the_ranges_are_too_short() -> None:
    """stream_k refuses what its entry does not run; at M <= 512 (a range shorter than a tile) and on one program the
    launch runs the same configuration without it."""
    cfg = RING
    for bad in ({"host_desc": False}, {"ga_bm": 64}, {"gw_bn": 256}, {"epi_hold": True, "stages": 7}, {"bk": 32},
                {"k_rotate": 1}, {"multicast": 1, "lazy_init": False}):  # fmt: skip
        with pytest.raises(ValueError, match="stream_k"):
            replace(cfg, stream_k=True, **bad)
    # the refusal names the other schedules' switches that are on (one list, gb.SCHEDULE_SWITCHES, for multicast too)
    with pytest.raises(ValueError, match=r"stream_k: .*on: k_rotate, tmap_prefetch\)$"):
        replace(cfg, stream_k=True, k_rotate=1, tmap_prefetch=True)
    with pytest.raises(ValueError, match=r"multicast 0-4: .*\(on: serpentine\)$"):
        replace(cfg, multicast=1, lazy_init=False, serpentine=True)
    sk = replace(cfg, stream_k=True)
    for m, programs in ((512, 132), (256, 132), (1024, 1)):
        assert gb.stream_k_kind(m, sk, programs) == 0
        plan = gb.plan_for(m, sk, programs)
        assert gb.launched_config(m, sk, plan) == cfg
        assert gb.entry_kernel(gb.launched_config(m, sk, plan)) is gb.gluon_bwd_kernel_host_desc
    assert gb.entry_kernel(sk) is gb.gluon_bwd_kernel_sk


SOLO = replace(RING, pingpong=True, solo=True, stages=3)  # v38: two programs an SM, one warpgroup each


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_solo_fits_two_programs_an_sm(monkeypatch: pytest.MonkeyPatch) -> None:
    """v38's ``solo``: the launch plans two programs an SM and compiles with a cap of 128 registers a thread, so that
    two programs of one consumer warpgroup and the loader's (256 threads) fit an SM's 64K registers and, with 3 stages,
    its shared memory (each program's 1 KB reserve included); the consumer warpgroup gets its registers back from the
    loader (setmaxnreg), with no spill and the loader's TMAs outside a waterfall loop; one warpgroup's MMAs only."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    from diag_gluon import _resource_usage, compile_for, launch_tensors, waterfalls

    assert (SOLO.pingpong_mode, SOLO.programs_per_sm, SOLO.maxnreg) == (3, 2, 128)
    assert (RING.programs_per_sm, RING.maxnreg) == (1, None)
    # one place each: plan_for plans two programs a slot, launch_arguments hands the launch its register cap
    assert gb.plan_for(1024, SOLO, 132).programs == 256 and gb.plan_for(1024, RING, 132).programs == 128
    for cfg, cap in ((SOLO, 128), (RING, None)):
        plan = gb.plan_for(1024, cfg, 132)
        assert gb.launch_arguments(*launch_tensors(1024, 128), 128, cfg, plan)[1].get("maxnreg") == cap
    for m in (512, 1024, 2048):
        plan, k = compile_for(m, 128, SOLO)
        assert plan.programs > 132, (m, plan)  # planned on 264
        ptx = k.asm["ptx"]
        assert ".reqntid 256" in ptx and ".maxnreg 128" in ptx, m
        usage = _resource_usage(k.asm["cubin"])  # "regs R, stack S, local L"
        regs = int(re.search(r"regs (\d+)", usage).group(1))
        assert 2 * 256 * regs <= 65536 and "stack 0" in usage and "local 0" in usage, (m, usage)
        assert 2 * (k.metadata.shared + 1024) <= H200_SHARED_MAX + 1024, (m, k.metadata.shared)
        assert waterfalls(k.asm["cubin"]) == 0, m
        report = ptxas_report(ptx)
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report[-1500:]
        grown = {int(r) for r in re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+(\d+);", ptx)}
        assert max(grown) >= 200, grown  # the consumer warpgroup's, given back by the loader's
        # one consumer warpgroup: half the MMA sites of ping-pong's two
        pp = compile_for(m, 128, replace(SOLO, solo=False, stages=7))[1].asm["ptx"]
        assert 2 * ptx.count("wgmma.mma_async") == pp.count("wgmma.mma_async"), m


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_stagger_runs_only_where_the_programs_share_a_grad_attn_first_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """v37's ``stagger`` swaps the kinds' order in half the programs of a shared plan that runs grad_attn tiles first
    (M = 1024-2048); on a partitioned plan (M = 512: each program one kind) or a grad_weight-first one (M >= 4096)
    the launch runs the configuration without it, and the kernel compiled is the one without it."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    from diag_gluon import compile_for

    for m, cfg, runs in ((1024, RING, True), (512, RING, False), (4096, WIDE, False)):
        plan = gb.plan_for(m, cfg, 132)
        assert gb.launched_config(m, replace(cfg, stagger=True), plan).stagger == runs, m
    plain = compile_for(512, 128, RING)[1].asm["ptx"]
    assert compile_for(512, 128, replace(RING, stagger=True))[1].asm["ptx"] == plain


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_stream_k_compiles_with_its_flag_protocol_and_without_spills(monkeypatch: pytest.MonkeyPatch) -> None:
    """v30's entry for sm_90: each warpgroup publishes its partial with one release and waits for the earlier
    program's with one acquire, stores and loads the partial in 8-byte pairs, and (128x128 tiles) keeps every
    register in registers, no advisory that the wgmma pipeline is serialised; the 128x256 tiles' ring fits."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    from diag_gluon import compile_for

    for m in (1024, 4096):
        plan, k = compile_for(m, 128, replace(ring_for(m), stream_k=True))
        assert plan.programs == 132 and k.name == "gluon_bwd_kernel_sk", m
        ptx = k.asm["ptx"]
        assert ptx.count("st.release.gpu.global.u32") == 2, m  # one release a warpgroup
        assert ptx.count("ld.acquire.gpu.global.u32") == 4, m  # a warpgroup's first try and its loop's
        values = 64 * ring_for(m).gw_bn // 128  # fp32 values of a warpgroup's half a thread
        assert len(re.findall(r"st\.global\.v2\.[bf]32", ptx)) == 2 * values // 2, m
        assert len(re.findall(r"ld\.global\.v2\.[bf]32", ptx)) == 2 * values // 2, m
        assert k.metadata.shared <= H200_SHARED_MAX, m
        report = ptxas_report(ptx)
        assert not re.findall(r"C751[147]", report), (m, report[-1500:])
        if m == 1024:
            assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report[-1500:]


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_multicast_names_the_allocations_triton_placed(monkeypatch: pytest.MonkeyPatch) -> None:
    """v29: the multicast kernel addresses its B ring and its ready and empty barriers by their offsets into the
    dynamic shared memory, read from Triton's own allocation pass (``multicast_offsets``): they are the offsets the
    compiled kernel's own TMA loads and mbarrier operations use (the B ring's boxes at ``MC_B`` + 8 KB, the ready
    barriers' expect at ``MC_RDY``, the empty barriers' waits at ``MC_EMP``), and the PTX has one multicast a kind of
    tile, the remote release (``mapa``, an arrival on the peer's barrier, no cluster-scope fence), the launch
    counter's add, the cluster fence after the inits, and empty barriers counting both CTAs' consumers; no spill;
    the table's entries have none of it."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    from diag_gluon import compile_for

    cfg = replace(RING, lazy_init=False, multicast=True)
    k = compile_for(1024, 128, cfg)[1]
    offs = gb.multicast_offsets(k.asm["ttgir"])
    ptx = k.asm["ptx"]
    assert len(re.findall(r"\.multicast::cluster", ptx)) == 2  # grad_attn's weight box, grad_weight's reshaped box
    assert f"add.u32 a, a, {offs['MC_B']};" in ptx and f"add.u32 m, m, {offs['MC_RDY']};" in ptx
    assert f"add.u32 t, t, {offs['MC_EMP']};" in ptx
    assert "mapa.shared::cluster.u32" in ptx and "mbarrier.arrive.shared::cluster.b64 _, [r]" in ptx
    assert "arrive.release.cluster" not in ptx  # run a: a cluster-scope fence an arrival, ~0.55 us each
    assert "atom.add.release.gpu.global.u32" in ptx and "fence.mbarrier_init.release.cluster" in ptx
    # Triton's own code at the same offsets: the second B box's plain load (the ring's first pass), the ready
    # barriers' expect and the empty barriers' waits, each at the offset read back
    assert re.search(rf"add\.s32\s+%r\d+, %r\d+, {offs['MC_B'] + 8192};", ptx)
    assert re.search(rf"add\.s32\s+%r\d+, %r\d+, {offs['MC_RDY']};\n(?:\s*\.loc[^\n]*\n)*\s*// begin inline asm\n"
                     r"\s*@%p\d+ mbarrier\.arrive\.expect_tx", ptx)  # fmt: skip
    assert re.search(rf"add\.s32\s+%r\d+, %r\d+, {offs['MC_EMP']};", ptx)
    assert re.search(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], 4;", ptx)  # 2 consumers x 2 CTAs
    report = ptxas_report(ptx)
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report[-1500:]
    plain = compile_for(1024, 128, RING)[1].asm["ptx"]
    assert "multicast" not in plain and "mapa" not in plain and "atom.add" not in plain
    # the diagnostics: 2 the same coupled rings with every box loaded locally; 3 / 4 the loader's empty waits (two
    # call sites) and the consumers' full waits (two a warpgroup) spinning on test_wait
    for mode, multicasts, spins in ((2, 0, 0), (3, 2, 2), (4, 2, 6)):
        ptx = compile_for(1024, 128, replace(cfg, multicast=mode))[1].asm["ptx"]
        assert len(re.findall(r"\.multicast::cluster", ptx)) == multicasts, mode
        assert ptx.count("MC_SPIN:") == spins and "mapa.shared::cluster.u32" in ptx, mode


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_the_epilogue_from_registers_stores_without_shared_memory_and_fits_a_seventh_stage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """v27: with ``epi_global`` the consumers store their bf16 half-tiles with ``st.global`` (four-byte pairs of
    the accumulator's layout) and issue no TMA store and no ``stmatrix``, so the epilogue buffers go and a 7th stage
    of 128x128 blocks fits an SM's shared memory; no spill, no advisory that the wgmma pipeline is serialised."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    from diag_gluon import compile_for, waterfalls

    cfg = RING
    for mode in (1, 2):
        k = compile_for(1024, 128, replace(cfg, epi_global=mode, stages=7))[1]
        ptx = k.asm["ptx"]
        assert "cp.async.bulk.tensor.2d.global.shared" not in ptx and "stmatrix" not in ptx, mode
        assert len(re.findall(r"st\.global\.b32", ptx)) >= 4 * 32, mode  # 32 pairs a thread, each kind, each warpgroup
        assert 7 * 32 * 1024 <= k.metadata.shared <= H200_SHARED_MAX, (mode, k.metadata.shared)
        report = ptxas_report(ptx)
        assert not re.findall(r"C751[147]", report), (mode, report[-1500:])
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), (mode, report[-1500:])
        # v33: the same stores in 16-byte rows, the pairs moved within each warp by shuffles (no shared memory: the
        # convert_layout Triton would make goes through it), 8 vectors of 8 columns a thread and a half-tile
        v = compile_for(1024, 128, replace(cfg, epi_global=mode, epi_vec=True, stages=7))[1]
        vptx = v.asm["ptx"]
        stores = len(re.findall(r"st\.global\.v4\.b32", vptx))
        assert stores >= 4 * 8 and stores % 8 == 0 and not re.findall(r"st\.global\.b32", vptx), mode
        assert vptx.count("shfl.sync.bfly.b32") == stores // 8 * 4 * 16, mode  # 4 exchanges of 16 pairs a half-tile
        assert "stmatrix" not in vptx and "ldmatrix" not in vptx and v.metadata.shared == k.metadata.shared, mode
        report = ptxas_report(vptx)
        assert not re.findall(r"C751[147]", report), (mode, report[-1500:])
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), (mode, report[-1500:])
        assert waterfalls(v.asm["cubin"]) == 0, mode


# v33's model of a warpgroup's 64 x 128 half-tile in the wgmma accumulator layout, its bf16 pairs (q = column // 2)
# one 32-bit register each: (row, q) offsets of each register bit, lane bit and warp bit (Triton's own linear layout
# of the pairs, printed by the compiler; the test below checks it against the compiled conversion)
_PAIR_REGS = [(8, 0), (0, 4), (0, 8), (0, 16), (0, 32)]
_PAIR_LANES = [(0, 1), (0, 2), (1, 0), (2, 0), (4, 0)]
_PAIR_WARPS = [(16, 0), (32, 0)]


def _at(bases: list[tuple[int, int]], index: int) -> tuple[int, int]:
    row = q = 0
    for bit, (dr, dq) in enumerate(bases):
        if index >> bit & 1:
            row, q = row ^ dr, q ^ dq
    return row, q


def test_the_16_byte_epilogue_puts_every_pair_in_place_and_writes_whole_lines() -> None:
    """v33 (``epi_vec``): ``_store_rows``'s exchanges and addresses, replayed on the layout's bits. Each register of
    each lane starts with the pair the layout puts there; the four ``_swap_bits`` calls as the kernel's source
    makes them (a lane whose selector bit is 0 keeps a, sends b, takes its partner's a as its new b) move them
    within the warp; then every store's four registers must hold 4 consecutive pairs (8 columns, 16 bytes) at the
    row and column the source's ``row =`` and ``col =`` lines compute, every pair of the half-tile is stored once,
    and each warp's store instruction writes whole 128-byte lines (4 rows of 64 columns)."""
    import inspect

    src = inspect.getsource(gb._store_rows.fn)
    swaps = [tuple(int(v) for v in m.split(",")) for m in re.findall(r"_swap_bits\(p, ([\d, ]+)\)", src)]
    assert len(swaps) == 4, swaps
    row_expr = re.search(r"\n\s*row = (.+)", src).group(1)
    col_expr = re.search(r"\n\s*col = (.+)", src).group(1)
    reg_of = {(dr, dq): g for g, (dr, dq) in enumerate(_PAIR_REGS)}
    for warp in range(4):
        # pairs[lane][register]: the (row, q) each register holds, starting where the layout puts it
        pairs = [
            [tuple(a ^ b for a, b in zip(_at(_PAIR_LANES, lane), _at(_PAIR_REGS, g), strict=True)) for g in range(32)]
            for lane in range(32)
        ]
        pairs = [[(r ^ _at(_PAIR_WARPS, warp)[0], q) for r, q in regs] for regs in pairs]
        for mask, sdim, sbit, dim, bit in swaps:
            g_bit = reg_of[(1 << bit, 0) if dim == 0 else (0, 1 << bit)]
            sel = [_at(_PAIR_LANES, lane)[sdim] >> sbit & 1 for lane in range(32)]
            assert all(sel[lane] == (lane & mask != 0) for lane in range(32)), (mask, sdim, sbit)
            new = [list(regs) for regs in pairs]
            for lane in range(32):
                for g in range(32):
                    if g >> g_bit & 1:
                        continue
                    a, b = pairs[lane][g], pairs[lane][g | 1 << g_bit]
                    got = pairs[lane ^ mask][g] if not sel[lane] else pairs[lane ^ mask][g | 1 << g_bit]
                    new[lane][g], new[lane][g | 1 << g_bit] = (got, b) if sel[lane] else (a, got)
            pairs = new
        stored = set()
        h, v = reg_of[(8, 0)], reg_of[(0, 4)]  # the registers t_hv: row 8 and q bit 2, as the store splits them
        for g in range(32):
            if g >> h & 1 or g >> v & 1:
                continue
            lines = set()
            for lane in range(32):
                i, j = tuple(a ^ b for a, b in zip(_at(_PAIR_LANES, lane), _at(_PAIR_REGS, g), strict=True))
                i ^= _at(_PAIR_WARPS, warp)[0]
                row, col = eval(row_expr, {"i": i, "j": j}), eval(col_expr, {"i": i, "j": j})
                vector = [pairs[lane][g | hh << h | vv << v] for vv in (0, 1) for hh in (0, 1)]
                assert vector == [(row, col // 2 + k) for k in range(4)], (warp, lane, g, vector, row, col)
                stored.update(vector)
                lines.add((row, col // 64))
            assert len(lines) == 4, (warp, g, lines)  # 32 lanes x 16 bytes: four whole 128-byte lines
        assert stored == {(16 * warp + r, q) for r in range(16) for q in range(64)}, warp


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_the_16_byte_epilogues_model_is_the_accumulators_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bases ``test_the_16_byte_epilogue_puts_every_pair_in_place_and_writes_whole_lines`` replays are Triton's:
    a 64 x 128 bf16 tensor in the wgmma accumulator layout of a warpgroup converted to the linear layout with
    those bases (each pair's two columns in one register: column bit 0 the first register bit) needs no shared
    memory and no shuffle, so the two are one layout."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    from diag_gluon import compile_sm90
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    @gluon.jit
    def convert(ptr, SRC: gl.constexpr, DST: gl.constexpr):
        y = gl.convert_layout(gl.full([64, 128], 1.0, gl.bfloat16, SRC), DST)
        rows = gl.arange(0, 64, layout=gl.SliceLayout(1, DST))
        cols = gl.arange(0, 128, layout=gl.SliceLayout(0, DST))
        gl.store(ptr + rows[:, None] * 128 + cols[None, :], y)

    def elements(bases: list[tuple[int, int]]) -> list[list[int]]:  # (row, q) of pairs -> (row, column)
        return [[r, 2 * q] for r, q in bases]

    def to(lanes: list[tuple[int, int]]):  # the wgmma layout converted to the pairs' bases with these lane bases
        dst = gl.DistributedLinearLayout(
            reg_bases=[[0, 1], *elements(_PAIR_REGS)],
            lane_bases=elements(lanes),
            warp_bases=elements(_PAIR_WARPS),
            block_bases=[],
            shape=[64, 128],
        )
        kwargs = {"SRC": gb._wgmma_layout(64, 128), "DST": dst, "num_warps": 4}
        return compile_sm90(convert, (torch.empty(64, 128, dtype=torch.bfloat16),), kwargs)

    k = to(_PAIR_LANES)
    assert k.metadata.shared == 0 and "shfl" not in k.asm["ptx"]
    k = to([_PAIR_LANES[1], _PAIR_LANES[0], *_PAIR_LANES[2:]])  # not it (two lane bits swapped): data moves
    assert k.metadata.shared > 0 or "shfl" in k.asm["ptx"]


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_v25_v26_switches_change_the_kernel_only_when_on_and_keep_the_wgmma_pipeline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each v25/v26 switch (descriptor prefetch, next-tile prefetch, deferred epilogue in both modes, serpentine;
    v28's prefetch of the first tile ahead)
    changes the M = 1024 entry's PTX when on, and its ptxas report, like the table's entries', has no spill and no
    advisory that the wgmma pipeline is serialised (C7511, C7514) or waited for (C7517): deferring the fp32
    accumulator itself, or a bf16 conversion sunk into the next tile's loop, did exactly that (kernel/NOTES.md
    item 26)."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))  # scripts/ is no package: the script's own import path
    from diag_gluon import compile_for

    cfg = RING
    plain = compile_for(1024, 128, cfg)[1].asm["ptx"]
    switches = (
        {"tmap_prefetch": True},
        {"next_prefetch": 2},
        {"epi_defer": 1},
        {"epi_defer": 2},
        {"serpentine": True},
        {"first_ahead": 4},
        {"first_delay": 300},
        {"first_prefetch": 2},
        {"stagger": True},
    )
    for on in ({}, *switches):
        ptx = compile_for(1024, 128, replace(cfg, **on))[1].asm["ptx"] if on else plain
        assert (ptx != plain) == bool(on), on
        report = ptxas_report(ptx)
        assert not re.findall(r"C751[147]", report), (on, report[-1500:])
        assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), (on, report[-1500:])
        assert ptx.count("nanosleep.u32 300;") == (2 if on.get("first_delay") else 0), on  # v34: one a kind of tile
        if on.get("first_prefetch"):  # v36: 2 K-steps of either kind's first tile, a prefetch a box (3 + 4)
            assert ptx.count("cp.async.bulk.prefetch.tensor.2d.L2.global.tile") == 2 * (3 + 4), on
        mmas = len(re.findall(r"wgmma\.mma_async", ptx))  # v37: both orders of the kinds, so twice the MMA sites
        assert mmas == (2 if on.get("stagger") else 1) * len(re.findall(r"wgmma\.mma_async", plain)), on
    # v32: the deferred epilogue of 128x256 tiles in K-steps of 32 (a 64x256 bf16 half-tile kept a warpgroup)
    plain = compile_for(1024, 128, WIDE_B32)[1].asm["ptx"]
    ptx = compile_for(1024, 128, replace(WIDE_B32, epi_defer=1))[1].asm["ptx"]
    assert ptx != plain
    report = ptxas_report(ptx)
    assert not re.findall(r"C751[147]", report), report[-1500:]
    assert re.search(r"\b0 bytes spill stores, 0 bytes spill loads", report), report[-1500:]


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_halves_fit_a_fourth_stage_of_128x256_blocks() -> None:
    """With the epilogue in two passes (32 KB of buffers, not 64), 4 stages of 128x256x64 blocks fit an SM's shared
    memory, with twice the MMAs in the PTX (two accumulators) and the same TMA stores, no spills."""
    out = run_script("scripts/diag_gluon.py", "8192", "--set", "stages=4", "--set", "halves=True")
    assert out.returncode == 0, out.stderr[-3000:]
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("M=")]
    shared = int(re.search(r"shared (\d+) B", line).group(1))
    assert 4 * 48 * 1024 < shared <= H200_SHARED_MAX, line
    assert "local 0" in line and "stack 0" in line, line
    assert re.search(r"wgmma 32\b", line) and re.search(r"tma_store 16\b", line), line


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_every_table_entry_compiles_for_sm90_without_spills() -> None:
    out = run_script("scripts/diag_gluon.py", *map(str, gb.GLUON_TABLE), "--both-entries")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("M=")]
    assert len(lines) == 2 * len(gb.GLUON_TABLE), out.stdout  # host- and device-descriptor entry points
    for m, (cfg, _) in gb.GLUON_TABLE.items():  # an entry in K-steps of 32 has no device-descriptor entry point
        said = [ln for ln in lines if ln.startswith(f"M={m} ") and "no device-descriptor entry: bk 32" in ln]
        assert len(said) == (cfg.bk == 32), (m, said)
    lines = [ln for ln in lines if "-descriptor entry:" not in ln]
    for line in lines:
        assert 0 < int(re.search(r"shared (\d+) B", line).group(1)) <= H200_SHARED_MAX, line
        assert "local 0" in line and "stack 0" in line, line
        assert int(re.search(r"wgmma (\d+)", line).group(1)) > 0, line
        assert int(re.search(r"tma_load (\d+)", line).group(1)) > 0, line
        assert int(re.search(r"tma_store (\d+)", line).group(1)) > 0, line
        assert int(re.search(r"setmaxnreg (\d+)", line).group(1)) > 0, line  # warp-specialised partitions
        assert re.search(r"waterfalls 0\b", line), line  # every TMA's operands in uniform registers


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_inline_ptx_reads_no_thread_index_so_the_loader_keeps_its_uniform_registers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """v30: ptxas loops over the lanes (a waterfall, ``BRA.U.ANY``) around every TMA of the kernel once any inline PTX
    of its partitions reads %tid (run a: 25 loops, 16 % slower at M = 1024, v29's multicast kernels too). Stream-K's
    flags and the multicast's handshake and remote release take the thread from an operand or elect it: none in
    their SASS, as in the entries'; the same kernel with its publish predicated on a %tid read inside the PTX has
    them again."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    from diag_gluon import compile_for, waterfalls
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    cfg = RING
    for on in ({"stream_k": True}, {"multicast": 1, "lazy_init": False}, {"multicast": 2, "lazy_init": False}):
        assert waterfalls(compile_for(1024, 128, replace(cfg, **on))[1].asm["cubin"]) == 0, on

    @gluon.jit
    def publish_by_tid(flag):
        gl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; and.b32 t, t, 127; setp.eq.u32 p, t, 0; "
            "@p st.release.gpu.global.u32 [$1], 1; mov.u32 $0, 0; }",
            "=r,l", [flag], dtype=gl.int32, is_pure=False, pack=1,
        )  # fmt: skip

    monkeypatch.setattr(gb, "_sk_publish", publish_by_tid)
    for caller in (gb.gluon_bwd_kernel_sk, gb._sk_consumer):
        monkeypatch.setattr(caller, "hash", None)  # Triton's memoised source hashes: compiled afresh, not cached
    assert waterfalls(compile_for(1024, 128, replace(cfg, stream_k=True))[1].asm["cubin"]) > 0


# ------------------------------------------------------------------------------------------------ on a GPU
def _gluon_fn(cfg: gb.GluonConfig):
    def fn(go, x, w, out=None):
        b, s = go.shape[0], go.shape[1]
        ga, gw = out or (
            torch.empty((b, NUM_HEADS, s, HEAD_DIM), dtype=go.dtype, device=go.device),
            torch.empty_like(w),
        )
        gb.launch(go.reshape(-1, go.shape[-1]), w, x.reshape(-1, x.shape[-1]), gw, ga, s, cfg)
        return ga, gw

    return fn


_GPU_SHAPES = [(1, 256), (4, 128), (1, 1024), (4, 256), (8, 128), (3, 128), (5, 64), (2, 192), (7, 128), (1, 64)]
_GPU_SHAPES += [(4, 1024), (3, 1024), (40, 128), (2, 4096)]  # the 128x256 entries: M = 4096, 3072, 5120, 8192


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "s"), _GPU_SHAPES)
def test_gluon_table_entries_correct_and_repeatable_on_gpu(b: int, s: int) -> None:
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    cfg = gb.gluon_config_for(b * s, s, (9, 0), include_disabled=True)
    if cfg is None:
        pytest.skip("no Gluon entry for this shape")
    _correct_and_repeatable(cfg, b, s, seed=11 * s + b)


def _correct_and_repeatable(cfg: gb.GluonConfig, b: int, s: int, seed: int) -> None:
    """The harness's correctness loop (3 rounds), then the same inputs twice: bit for bit, run to run."""
    fn = _gluon_fn(cfg)
    res = check_rounds(fn, b, s, torch.device("cuda"), rounds=3, seed=seed)
    assert res.ok, f"({b},{s}): {res.reason}"
    g, x, w = make_inputs(b, s, "cuda")
    first = [t.clone() for t in fn(g, x, w)]
    again = fn(g, x, w)
    for p, q in zip(first, again, strict=True):
        assert torch.equal(p.view(torch.int16), q.view(torch.int16))


_MC_SHAPES = [(4, 128), (1, 1024), (8, 128), (2, 256), (1, 2048), (16, 128), (6, 128), (7, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "s"), _MC_SHAPES)
def test_multicast_correct_and_repeatable_on_gpu(b: int, s: int) -> None:
    """v29 (off in the table): the 2-CTA multicast kernel against the harness's correctness loop and bit for bit
    run to run, on shapes whose plans pair their programs (M = 512 partitioned, 1024-2048 shared, 768 off-grid) and
    one whose plan does not (M = 896: 123 programs, launched without the multicast)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    _correct_and_repeatable(replace(RING, lazy_init=False, multicast=1), b, s, seed=13 * s + b)


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "s"), [(8, 128), (1, 1024), (6, 128), (16, 128), (12, 128), (4, 1024)])
def test_wide_deferred_epilogue_correct_and_repeatable_on_gpu(b: int, s: int) -> None:
    """v32 (off in the table): 128x256 tiles in K-steps of 32 with the finished tile's epilogue written beside the
    next tile's first MMA, against the harness's correctness loop and bit for bit run to run (M = 768-4096, the
    partitioned plan at 1024 and the shared one above)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    _correct_and_repeatable(replace(WIDE_B32, epi_defer=1), b, s, seed=23 * s + b)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize(("b", "s"), [(4, 128), (8, 128), (1, 1024), (2, 384), (16, 128), (6, 128)])
def test_register_epilogue_in_16_byte_rows_correct_and_repeatable_on_gpu(mode: int, b: int, s: int) -> None:
    """v33 (off in the table): the epilogue stored from registers in 16-byte rows (``epi_vec``: the pairs moved
    within each warp, ``_store_rows``) at the tile's end (1) or beside the next tile's first MMA (2), 7 stages,
    against the harness's correctness loop and bit for bit run to run (M = 512-2048, 768 off-grid; both kinds'
    addressing: grad_attn_output's heads and grad_weight's rows)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    _correct_and_repeatable(replace(RING, epi_global=mode, epi_vec=True, stages=7), b, s, seed=29 * s + b + mode)


@pytest.mark.gpu
@pytest.mark.parametrize("switch", [{"first_delay": 300}, {"first_prefetch": 2}])
@pytest.mark.parametrize(("b", "s"), [(1, 256), (4, 128), (8, 128), (2, 384), (16, 128)])
def test_first_fill_switches_correct_and_repeatable_on_gpu(switch: dict, b: int, s: int) -> None:
    """v34 and v36 (off in the table): the loader's sleep after the ring's first stage, and the first tile's first
    K-steps asked of L2 at the entry, change when data moves, not what is loaded: the harness's correctness loop and
    bit for bit run to run (ping-pong at M = 256, the cooperative ring at 512-2048 and 768)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    base = replace(RING, pingpong=True, stages=7) if b * s <= 256 else RING
    _correct_and_repeatable(replace(base, **switch), b, s, seed=31 * s + b)


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "s"), [(8, 128), (1, 1024), (6, 128), (16, 128), (12, 128), (4, 256)])
def test_stagger_correct_and_repeatable_on_gpu(b: int, s: int) -> None:
    """v37 (off in the table): the upper half of the programs runs its grad_weight tiles first, the same tiles in the
    other order: the harness's correctness loop and bit for bit run to run (the shared plan at M = 768-2048, 1536
    off-grid)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    _correct_and_repeatable(replace(RING, stagger=True), b, s, seed=37 * s + b)


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "s"), [(4, 128), (8, 128), (1, 1024), (6, 128), (2, 384), (16, 128), (4, 1024)])
def test_solo_correct_and_repeatable_on_gpu(b: int, s: int) -> None:
    """v38 (off in the table): two programs an SM, each one warpgroup running whole tiles with the epilogue in the
    held stage: the harness's correctness loop and bit for bit run to run (M = 512-4096, the partitioned and shared
    plans on 2 x 132 programs, 768 off-grid)."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    _correct_and_repeatable(SOLO, b, s, seed=38 * s + b)


_SK_SHAPES = [(8, 128), (1, 1024), (16, 128), (3, 512), (4, 1024), (3, 1024), (5, 1024), (2, 4096), (4, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "s"), _SK_SHAPES)
def test_stream_k_correct_and_repeatable_on_gpu(b: int, s: int) -> None:
    """v30 (off in the table): stream-K (132 programs, one kind's K-steps split evenly, a split tile joined through
    the fp32 workspace) against the harness's correctness loop and bit for bit run to run, on both splits (grad_weight's
    at M = 1024-2048 and 1536 off-grid, grad_attn's at 3072-8192 with 128x256 tiles) and M = 512, where the ranges are
    too short and the entry runs without it."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    cfg = replace(ring_for(b * s), stream_k=True)
    _correct_and_repeatable(cfg, b, s, seed=17 * s + b)
    _correct_and_repeatable(cfg, b, s, seed=19 * s + b)  # the flags left at 0 by the launches before


def test_the_sweeps_selection_keeps_each_buckets_baseline_unless_beaten_by_the_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """scripts/bench_gluon_v19.py --select: per bucket the fastest correct variant over the bucket's timed shapes if
    it beats the bucket's baseline (the table's entries: ping-pong at M <= 256, the cooperative 128x128 kernel at
    512-2048, both with the lazy init, the 128x256 w256s3 above) by the margin (against the faster of the baseline's
    two timings), else the baseline; written into GLUON_TABLE as is."""
    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))  # scripts/ is no package: the script's own import path
    import apply_gluon_selection
    import bench_gluon_v19 as sweep

    allv = sweep.variants()
    rows = {
        (2, 4096): {"cublas": 184.9, "w256s3_8192": 176.0, "w256s3_8192_again": 175.5, "w256s4h_8192": 171.0},
        (4, 1024): {"cublas": 95.0, "w256s3_4096": 91.9, "w256s3_4096_again": 92.0, "w256s4h_4096": 91.0},
        (8, 128): {"cublas": 29.0, "lz_1024": 25.6, "lz_1024_again": 25.7, "v18_1024": 25.4, "w256s4h_1024": 25.0},
        (1, 256): {"cublas": 16.0, "v18_256": 12.4, "pp7lz_256": 11.4, "pp7lz_256_again": 11.3, "pp7pf1_256": 11.0},
    }
    names = ("w256s3_8192", "w256s4h_8192", "w256s3_4096", "w256s4h_4096", "lz_1024", "v18_1024", "w256s4h_1024")
    names += ("v18_256", "pp7lz_256", "pp7pf1_256")
    sel = sweep.select(rows, {n: allv[n] for n in names}, margin=0.015)
    assert {b: e["name"] for b, e in sel.items()} == {
        "8192": "w256s4h_8192",  # 171.0 against the faster baseline timing 175.5: 2.6 % faster
        "4096": "w256s3_4096",  # 1.0 % faster: within the margin, the baseline stays
        "1024": "w256s4h_1024",  # 2.3 % faster than the entry (v18 with the lazy init)
        "256": "pp7pf1_256",  # 2.7 % faster than the table's ping-pong entry (v18 is no baseline there)
    }
    text = (PROJECT / "kernel/gluon_backward.py").read_text()
    new = apply_gluon_selection.apply(text, sel)
    assert "    8192: (GluonConfig(128, 256, 128, 256, stages=4, host_desc=True, halves=True), True)," in new
    assert "    4096: (GluonConfig(128, 256, 128, 256, host_desc=True), True)," in new
    pf_line = "    256: (GluonConfig(64, 128, 128, 128, stages=7, host_desc=True, pingpong=True, l2_prefetch=1), True),"
    assert pf_line in new
