"""The Gluon (warp-specialised Hopper) path: its selection table and its configurations' checks on the CPU, its sm_90
compile without a GPU (scripts/diag_gluon.py), the scripts that sweep its variants and write the table, and on a GPU
every table entry, enabled or not, and the kernel's schedules and inits off the table against the harness's
correctness loop."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, fields, replace

import pytest
import torch

from kernel import gluon_backward as gb
from kernel.configs import bucket_for
from problem.correctness import check_rounds
from problem.reference import make_inputs
from problem.workload import CASES, HEAD_DIM, NUM_HEADS
from tests.support import PROJECT
from tests.support.sm90 import H200_SHARED_MAX, ptxas_present, run_script

# Fixed configurations, not read from GLUON_TABLE (a sweep's selection rewrites the table:
# scripts/apply_gluon_selection.py): v19's ping-pong of 64-row grad_attn tiles with v24's lazy inits (the table's
# entry at M = 256 since v24), v18's cooperative 128x128 ring with the lazy inits (its entry at M = 512-2048) and
# v21's 128x256 tiles with eager inits (its entry at M >= 4096)
PP = gb.GluonConfig(64, 128, 128, 128, stages=7, pingpong=True, lazy_init=True)
RING = gb.GluonConfig(128, 128, 128, 128, stages=6, lazy_init=True)
WIDE = gb.GluonConfig(128, 256, 128, 256)


def _load_script(name: str, monkeypatch: pytest.MonkeyPatch):
    """A module of scripts/ (no package: imported by its own import path, as the script runs)."""
    import importlib

    monkeypatch.syspath_prepend(str(PROJECT / "scripts"))
    return importlib.import_module(name)


def test_selection_table_is_hopper_only_and_per_shape() -> None:
    for m, (cfg, enabled) in gb.GLUON_TABLE.items():
        assert m in (256, 512, 1024, 2048, 4096, 8192) and isinstance(enabled, bool)
        assert cfg.gw_bm == 128 and cfg.ga_bm in (64, 128)  # two warpgroups of 64 rows
        # the plan of a launch is the tile-language kernel's for the same tiles, in the kernel's K-steps
        kc = cfg.kernel_config()
        assert (kc.ga_bm, kc.ga_bn, kc.gw_bm, kc.gw_bn) == (cfg.ga_bm, cfg.ga_bn, cfg.gw_bm, cfg.gw_bn)
        assert (kc.bk, kc.schedule) == (gb.BK, cfg.schedule)
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


def test_config_refuses_what_the_kernel_does_not_run() -> None:
    """GluonConfig's checks: grad_weight tiles of 128 rows and grad_attn tiles of 64 or 128 (the two consumer
    warpgroups own 64 rows each, or a 64-row tile's column halves), ping-pong only with tiles of at most 128
    columns (a warpgroup's epilogue, 64 rows of a whole tile, goes into a ring stage's A and B parts), a warpgroup's
    grad_attn columns whole heads (its stores write head by head), and at least two ring stages (a stage goes back
    to the loader after the next step's MMA is issued: one deadlocks, tests/kernel/test_ring_model.py). Anything
    else is refused when the configuration is built, never compiled into something else."""
    for ok in (  # accepted: built without an error
        {"pingpong": True, "stages": 7},  # ping-pong of 128-row tiles: two accumulators a warpgroup
        {"ga_bm": 64, "pingpong": True, "stages": 7},  # the table's M = 256 entry
        {"ga_bn": 256, "gw_bn": 256, "stages": 3},  # the table's M >= 4096 entries
        {"ga_bm": 64, "ga_bn": 256, "gw_bn": 256},  # cooperative 64-row tiles of 256 columns: 128 a warpgroup
        {"gw_bn": 256, "stages": 3},  # 128x256 grad_weight tiles beside 128x128 grad_attn ones
        {"stages": 2, "lazy_init": False},
    ):
        gb.GluonConfig(**{**asdict(RING), **ok})
    for bad, word in (
        ({"gw_bm": 64}, "tiles"),
        ({"gw_bm": 256}, "tiles"),
        ({"ga_bm": 32}, "tiles"),
        ({"ga_bm": 96}, "tiles"),
        ({"ga_bm": 192}, "tiles"),
        ({"ga_bm": 256}, "tiles"),
        ({"pingpong": True, "ga_bn": 256}, "pingpong"),
        ({"pingpong": True, "gw_bn": 256}, "pingpong"),
        ({"pingpong": True, "ga_bm": 64, "ga_bn": 256, "gw_bn": 256}, "pingpong"),
        ({"ga_bm": 0}, "tiles"),
        ({"ga_bm": -64}, "tiles"),
        ({"ga_bm": 64, "ga_bn": 64}, "whole heads"),  # 32 columns a warpgroup: no head of grad_attn stored
        ({"ga_bn": 96}, "whole heads"),
        ({"ga_bn": 0}, "whole heads"),
        ({"gw_bn": 96}, "whole TMA boxes"),
        ({"gw_bn": 0}, "whole TMA boxes"),
        ({"stages": 1}, "stages"),  # a stage is released after the next step's MMA: one stage deadlocks
        ({"stages": 0}, "stages"),
        ({"stages": -1}, "stages"),
    ):
        with pytest.raises(ValueError, match=word):
            gb.GluonConfig(**{**asdict(RING), **bad})


def test_enabled_entries_are_replayable() -> None:
    """The CI replays recorded launches, and the text of each argument's type reaches Triton's C launcher: every
    argument of an enabled entry's launch (its Gluon host descriptors included) must be a type the plan contract
    accepts (ci/harness/plan.py)."""
    from triton.runtime.jit import mangle_type

    from ci.harness.plan import signature_type

    b, s = 1, 256
    for m, (cfg, enabled) in gb.GLUON_TABLE.items():
        if not enabled:
            continue
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


def test_table_lines_are_the_selection_writers(monkeypatch: pytest.MonkeyPatch) -> None:
    """GLUON_TABLE's entry lines are written by scripts/apply_gluon_selection.py from the sweep's selection file, so
    the copy tested on the GPU and the commit carry the same text: each entry, written back from its configuration,
    leaves the module unchanged. The writer knows every field of GluonConfig after the tiles, in its order and with
    its default (a field at its default is left off the line), and refuses a field it does not know (a future
    switch, or one of a selection file from before the switch was removed) rather than drop it."""
    mod = _load_script("apply_gluon_selection", monkeypatch)
    text = (PROJECT / "kernel/gluon_backward.py").read_text()
    selection = {str(m): {"name": f"entry {m}", "config": asdict(cfg)} for m, (cfg, on) in gb.GLUON_TABLE.items() if on}
    assert selection and mod.apply(text, selection) == text
    after_tiles = [f for f in fields(gb.GluonConfig) if f.name not in ("ga_bm", "ga_bn", "gw_bm", "gw_bn")]
    assert mod.ORDER == tuple(f.name for f in after_tiles)
    assert mod.DEFAULTS == {f.name: f.default for f in after_tiles}
    assert (
        mod.entry_line(1024, asdict(RING))
        == "    1024: (GluonConfig(128, 128, 128, 128, stages=6, lazy_init=True), True),"
    )
    assert (
        mod.entry_line(256, asdict(PP))
        == "    256: (GluonConfig(64, 128, 128, 128, stages=7, pingpong=True, lazy_init=True), True),"
    )
    assert mod.entry_line(4096, asdict(WIDE)) == "    4096: (GluonConfig(128, 256, 128, 256), True),"
    # every field off its default: wider than a line, so continuation lines, each within the width
    every = replace(RING, stages=7, group=16, loader_regs=24, schedule="shared", pingpong=True)
    assert "\n" in mod.entry_line(1024, asdict(every))
    for cfg in (PP, WIDE, replace(WIDE, group=8, lazy_init=True), replace(RING, schedule="partitioned"), every):
        entry = mod.entry_line(512, asdict(cfg))
        assert all(len(line) <= 120 for line in entry.splitlines())
        assert eval(entry.split(": ", 1)[1].rstrip(","), {"GluonConfig": gb.GluonConfig}) == (cfg, True)
        table = text.replace(mod.entry_line(1024, asdict(gb.GLUON_TABLE[1024][0])), mod.entry_line(1024, asdict(cfg)))
        assert mod.apply(mod.apply(text, {"1024": {"config": asdict(cfg)}}), {}) == table  # read back, and rewritten
        again = {"1024": {"config": asdict(gb.GLUON_TABLE[1024][0])}}
        assert mod.apply(table, again) == text  # a wrapped entry is found and replaced whole
    for unknown in ({"a_future_switch": 1}, {"host_desc": True}, {"epi_hold": False}):
        with pytest.raises(SystemExit, match="unknown"):
            mod.entry_line(512, {**asdict(RING), **unknown})


# ------------------------------------------------------------------------------------------------ the sweep
def test_every_sweep_variant_is_a_configuration_the_kernel_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/bench_gluon_v19.py's variants: each a GluonConfig (built: its checks passed) named for its M bucket,
    with a plan there (the tiles divide the problem), checked on at least one of the sweep's shapes before it may be
    timed; and each bucket's baseline, the variant the others are measured against, is the table's entry, timed on
    at least one shape of its bucket."""
    sweep = _load_script("bench_gluon_v19", monkeypatch)
    allv = sweep.variants()
    assert allv
    for name, (bucket, cfg) in allv.items():
        assert isinstance(cfg, gb.GluonConfig) and bucket in sweep.LO and name.endswith(f"_{bucket}"), name
        assert gb.plan_for(bucket, cfg, 132).programs > 0, name
        assert any(sweep.applies(bucket, cfg, b, s) for b, s in sweep.CHECKED), name
    for bucket, (entry, _) in gb.GLUON_TABLE.items():
        name = sweep.baseline(bucket)
        assert allv[name] == (bucket, entry), (bucket, name)
        assert any(sweep.applies(bucket, entry, b, s) for b, s in sweep.TIMED), bucket


def test_the_session_scripts_ask_the_sweep_whether_the_table_changed(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench_gluon_v19.py --table-changed FILE`` (the session scripts run the GPU tests and the 16 cases only
    then): 0 when a bucket left its baseline, 1 when every bucket kept it, 2 and one line for a file it cannot read."""
    sweep = _load_script("bench_gluon_v19", monkeypatch)
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


def test_the_sweeps_selection_keeps_each_buckets_baseline_unless_beaten_by_the_margin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """scripts/bench_gluon_v19.py --select: per bucket the fastest correct variant over the bucket's timed shapes if
    it beats the bucket's baseline (the table's entries: ping-pong at M <= 256, the cooperative 128x128 kernel at
    512-2048, both with the lazy init, the 128x256 w256s3 above) by the margin (against the faster of the baseline's
    two timings), else the baseline; written into GLUON_TABLE as is."""
    apply_gluon_selection = _load_script("apply_gluon_selection", monkeypatch)
    sweep = _load_script("bench_gluon_v19", monkeypatch)
    allv = sweep.variants()
    rows = {
        (2, 4096): {"cublas": 184.9, "w256s3_8192": 176.0, "w256s3_8192_again": 175.5, "w256s3g8_8192": 171.0},
        (4, 1024): {"cublas": 95.0, "w256s3_4096": 91.9, "w256s3_4096_again": 92.0, "w256s3lz_4096": 91.0},
        (8, 128): {"cublas": 29.0, "lz_1024": 25.6, "lz_1024_again": 25.7, "v18_1024": 25.4, "pp7_1024": 25.0},
        (1, 256): {"cublas": 16.0, "v18_256": 12.4, "pp7lz_256": 11.4, "pp7lz_256_again": 11.3, "pp6_256": 11.0},
    }
    names = ("w256s3_8192", "w256s3g8_8192", "w256s3_4096", "w256s3lz_4096", "lz_1024", "v18_1024", "pp7_1024")
    names += ("v18_256", "pp7lz_256", "pp6_256")
    sel = sweep.select(rows, {n: allv[n] for n in names}, margin=0.015)
    assert {b: e["name"] for b, e in sel.items()} == {
        "8192": "w256s3g8_8192",  # 171.0 against the faster baseline timing 175.5: 2.6 % faster
        "4096": "w256s3_4096",  # 1.0 % faster: within the margin, the baseline stays
        "1024": "pp7_1024",  # 2.3 % faster than the entry (v18 with the lazy init)
        "256": "pp6_256",  # 2.7 % faster than the table's ping-pong entry (v18 is no baseline there)
    }
    text = (PROJECT / "kernel/gluon_backward.py").read_text()
    new = apply_gluon_selection.apply(text, sel)
    assert "    8192: (GluonConfig(128, 256, 128, 256, group=8), True)," in new
    assert "    4096: (GluonConfig(128, 256, 128, 256), True)," in new
    assert "    1024: (GluonConfig(128, 128, 128, 128, stages=7, pingpong=True), True)," in new
    assert "    256: (GluonConfig(64, 128, 128, 128, stages=6, pingpong=True), True)," in new


# ------------------------------------------------------------------------------------------------ sm_90 compile
# The kernel's schedules and inits beside the table's entries, also run on a GPU below: ping-pong of 128-row tiles
# (two accumulators a warpgroup: the sweep's pp7_M) with either init, v19's ping-pong and v18's cooperative ring with
# eager inits, the lazy inits on 128x256 tiles, and both schedules on the shallowest ring the model allows
# (tests/kernel/test_ring_model.py)
VARIANTS = {
    "pp7_128rows": replace(RING, pingpong=True, stages=7, lazy_init=False),
    "pp7_128rows_lazy": replace(RING, pingpong=True, stages=7),
    "pp7_eager": replace(PP, lazy_init=False),
    "ring_eager": replace(RING, lazy_init=False),
    "wide_lazy": replace(WIDE, lazy_init=True),
    "pp2": replace(PP, stages=2),
    "ring2": replace(RING, stages=2),
}


def _check_compiled(line: str, cfg: gb.GluonConfig) -> None:
    """One line of ``diag_gluon.describe``: the configuration's tiles and ring, within an SM's shared memory (the
    ring's stages, and the cooperative warpgroups' two epilogue buffers of 64 rows by the wider half-tile), no local
    memory or stack (no spill), warp-specialised partitions (setmaxnreg), wgmma and TMA loads and stores in the PTX,
    and every TMA's operands in uniform registers (no waterfall loop)."""
    tiles = f"gluon {cfg.ga_bm}x{cfg.ga_bn}|{cfg.gw_bm}x{cfg.gw_bn} stages {cfg.stages} "
    assert tiles in line, (tiles, line)
    stage = 2 * gb.BK * (max(cfg.ga_bm, cfg.gw_bm) + max(cfg.ga_bn, cfg.gw_bn))
    ga_half = cfg.ga_bn if cfg.ga_bm == 128 else cfg.ga_bn // 2
    epilogue = 0 if cfg.pingpong else 2 * 2 * 64 * max(cfg.gw_bn, ga_half)
    assert cfg.stages * stage + epilogue < int(re.search(r"shared (\d+) B", line).group(1)) <= H200_SHARED_MAX, line
    assert "local 0" in line and "stack 0" in line, line
    for what in ("wgmma", "tma_load", "tma_store", "setmaxnreg"):
        assert int(re.search(rf"{what} (\d+)", line).group(1)) > 0, (what, line)
    assert re.search(r"waterfalls 0\b", line), line


def test_a_bad_override_of_the_compile_diagnostic_is_one_line_and_exit_2() -> None:
    """``scripts/diag_gluon.py --set``: a field GluonConfig no longer has (or never had), a pair without a value, or a
    configuration it refuses is named in one line on stderr, exit 2, nothing compiled (no figures on stdout)."""
    for bad, says in (
        ("host_desc=True", "not key=value of a GluonConfig field"),
        ("stages", "not key=value of a GluonConfig field"),
        ("stages=1", "at least 2"),
    ):
        out = run_script("scripts/diag_gluon.py", "1024", "--set", bad)
        assert out.returncode == 2, (bad, out.returncode, out.stderr[-2000:])
        assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1 and says in out.stderr, (bad, out)


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_the_compile_diagnostic_says_when_a_ring_is_too_deep_to_launch() -> None:
    """A ring that compiles but needs more shared memory than an sm_90 program may have (7 cooperative stages of
    128x128 blocks beside the two epilogue buffers) is said to be over it; the table's entry is not."""
    out = run_script("scripts/diag_gluon.py", "1024", "--set", "stages=7")
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        f"OVER the {H200_SHARED_MAX} B" in out.stdout
        and int(re.search(r"shared (\d+) B", out.stdout).group(1)) > H200_SHARED_MAX
    )
    entry = run_script("scripts/diag_gluon.py", "1024")
    assert entry.returncode == 0 and "shared " in entry.stdout and "OVER" not in entry.stdout, entry.stdout


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_every_table_entry_compiles_for_sm90_without_spills() -> None:
    """Every table entry, enabled or not, compiled for sm_90 by scripts/diag_gluon.py as its launch would be."""
    out = run_script("scripts/diag_gluon.py", *map(str, gb.GLUON_TABLE))
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("M=")]
    assert len(lines) == len(gb.GLUON_TABLE), out.stdout
    for (m, (cfg, _)), line in zip(gb.GLUON_TABLE.items(), lines, strict=True):
        assert line.startswith(f"M={m:<5} "), (m, line)
        _check_compiled(line, cfg)


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_variants_compile_for_sm90_without_spills(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The variants the GPU tests below run, compiled as their launches at M = 1024 (M = 256 for 64-row grad_attn
    tiles) would be, hold what the table's entries hold."""
    describe = _load_script("diag_gluon", monkeypatch).describe
    cfg = VARIANTS[name]
    _check_compiled(describe(256 if cfg.ga_bm == 64 else 1024, 128, cfg), cfg)


@pytest.mark.skipif(not ptxas_present(), reason="triton's bundled ptxas is not installed")
def test_an_inline_ptx_read_of_the_thread_index_puts_waterfall_loops_in_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """v30: ptxas loops over the lanes (a waterfall, ``BRA.U.ANY``) around the kernel's TMAs once inline PTX of its
    partitions reads %tid (run a: 25 loops, 16 % slower at M = 1024); the kernel has no inline PTX, and the compile
    tests above find no such loop. This is what they would see: the same kernel with its ping-pong warpgroups' release
    of the held stage predicated on a %tid read inside the PTX has them."""
    diag = _load_script("diag_gluon", monkeypatch)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

    assert "inline_asm" not in (PROJECT / "kernel/gluon_backward.py").read_text()
    assert diag.waterfalls(diag.compile_for(256, 128, PP)[1].asm["cubin"]) == 0

    @gluon.jit
    def release_by_tid(empty, prev):
        tma.store_wait(0)
        gl.thread_barrier()
        first = gl.inline_asm_elementwise(
            "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; and.b32 t, t, 127; setp.eq.u32 p, t, 0; "
            "selp.u32 $0, 1, 0, p; }",
            "=r,r", [prev], dtype=gl.int32, is_pure=False, pack=1,
        )  # fmt: skip
        mbarrier.arrive(empty.index(prev), count=1, pred=first != 0)

    monkeypatch.setattr(gb, "_release_held", release_by_tid)
    callers = (gb._consumer_pp, gb._consumer_part, gb._consumer0, gb._consumer1)
    for caller in (*callers, gb.gluon_bwd_kernel_host_desc):
        monkeypatch.setattr(caller, "hash", None)  # Triton's memoised source hashes: compiled afresh, not cached
    assert diag.waterfalls(diag.compile_for(256, 128, PP)[1].asm["cubin"]) > 0


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


# M = 64-4096: grad_weight tiles of 1-64 K-steps (fewer than the ring's stages at the smallest), the partitioned
# plan (M = 512) and the shared ones (both orders of the kinds), off-grid M (768, 1536)
_VARIANT_SHAPES = [(1, 64), (3, 64), (1, 256), (4, 128), (6, 128), (1, 1024), (12, 128), (4, 1024)]


# the variants whose schedule, init and depth the sweeps have run on a GPU; the 2-stage rings are compiled on the CPU
# and modelled (tests/kernel/test_ring_model.py), not run here: a hang of a ring never run would cost a device call
# its other tests
_GPU_VARIANTS = sorted(name for name, cfg in VARIANTS.items() if cfg.stages > 2)


@pytest.mark.gpu
@pytest.mark.parametrize(("b", "s"), _VARIANT_SHAPES)
@pytest.mark.parametrize("name", _GPU_VARIANTS)
def test_the_variants_correct_and_repeatable_on_gpu(name: str, b: int, s: int) -> None:
    """The kernel's schedules and inits off the table's paths (``VARIANTS``) against the harness's correctness loop
    and bit for bit run to run."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the Gluon path is Hopper-only")
    cfg = VARIANTS[name]
    if s % cfg.ga_bm:
        pytest.skip(f"S = {s}: not a multiple of the {cfg.ga_bm}-row grad_attn tiles (gluon_config_for refuses it)")
    _correct_and_repeatable(cfg, b, s, seed=41 * s + b + sorted(VARIANTS).index(name))
