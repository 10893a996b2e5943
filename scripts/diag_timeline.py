"""Device diagnostic (issue 11): where the small-M cases spend their time, per program, and a screen of configs.

Usage on a GPU host: PYTHONPATH=. python3 scripts/diag_timeline.py [--iters 20] [--parts timeline,fixed,screen]
On a CPU host: python scripts/diag_timeline.py --compile-only [M ...] (the traced copy compiled for sm_90).

The traced copy of the kernel has a stamp (%globaltimer, clock64, %smid) at each program's start and end. It is
made by rewriting the kernel module's source into a temporary file (kernel/ itself is untouched; the rewrite fails
loudly if the kernel's text no longer has its anchors, and tests/kernel/test_kernel_compile.py compiles it).

- timeline: per M, the table's configuration (and the occupancy-2 variants of OCC2), L2 flushed, the launch queued
  behind a sleep kernel: per group of programs (the grad_attn and the grad_weight programs of a partition, or all)
  the last start, the end times and the busy time; the SMs' idle share over the kernel's span; which SMs ran two.
- fixed: one kind of tile alone (the other's tile count zeroed) on fewer programs, each running 1, 2, 4, 8 tiles:
  busy time per program against tiles per program (slope: the cost of one more tile; intercept: the fixed cost).
- screen: the candidates of SCREEN traced; the table and the two shortest spans then timed A/B/A/B under the
  CUPTI span (ci/harness/bench.py's timer: L2 flushed, fresh inputs), each checked against the reference first.
- occupancy: OCC2's two-programs-per-SM variants timed A/B/A/B against the table.
Logs of the runs kernel/NOTES.md quotes: docs/h200/exp_timeline.log, exp_screen_a.log, exp_screen_b.log.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--parts", default="timeline,fixed,screen", help="of timeline, fixed, screen, occupancy")
    ap.add_argument("--compile-only", nargs="*", type=int, metavar="M")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch, Triton and the kernel load (5-8 s on a 2-core host)
    ARGS = parse_args()

import torch  # noqa: E402

from ci.harness.bench import _short, _timer_and_protocols, check_case, time_impl  # noqa: E402
from kernel import backward as kmod  # noqa: E402  (the launcher's module)
from kernel.configs import config_for  # noqa: E402
from problem.reference import make_inputs, two_matmuls  # noqa: E402
from problem.workload import Case  # noqa: E402

_STAMPS = """

@triton.jit
def _stamp_now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _stamp_clock():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _stamp_sm():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


TRACE = [None]
"""

_LAUNCHER = (
    "\n\n\n# ------------------------------------------------------------------------------------------------ launcher"
)


def _once(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise RuntimeError(f"traced kernel: expected one {old[:60]!r} in the kernel module")
    return text.replace(old, new)


def traced_module():
    """The kernel module with start/end stamps per program written to TRACE[0] (int64, 4 per program)."""
    src = Path(kmod.__file__).read_text()
    src = _once(src, "\n\n@triton.jit\ndef _tile_coords", _STAMPS + "\n\n@triton.jit\ndef _tile_coords")
    src = _once(
        src,
        "    FP32_DOT: tl.constexpr,\n):\n    if DEVICE_DESC:",
        "    FP32_DOT: tl.constexpr,\n    trace_ptr,\n):\n    t_start = _stamp_now()\n    c_start = _stamp_clock()\n"
        "    if DEVICE_DESC:",
    )
    src = _once(
        src,
        _LAUNCHER,
        "\n    c_end = _stamp_clock()\n    t_end = _stamp_now()\n    rec = trace_ptr + pid * 4\n"
        "    tl.store(rec, t_start)\n    tl.store(rec + 1, t_end)\n    tl.store(rec + 2, c_end - c_start)\n"
        "    tl.store(rec + 3, _stamp_sm().to(tl.int64))" + _LAUNCHER,
    )
    src = _once(src, 'compiled = fast_launch.compiled_for(key) if device.type == "cuda" else None', "compiled = None")
    src = _once(src, "fast_launch.remember(key, kernel)", "pass  # the traced kernel is never the fast path's")
    src = _once(
        src,
        "                num_warps=cfg.num_warps,\n                num_stages=cfg.num_stages,\n            )",
        "                trace_ptr=TRACE[0],\n                num_warps=cfg.num_warps,\n"
        "                num_stages=cfg.num_stages,\n            )",
    )
    path = Path(tempfile.mkdtemp()) / "kernel_traced.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("kernel_traced", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def only(kind: str | None, programs: int | None, p_ga: int | None = None):
    """A plan_schedule keeping one kind of tile (None: both) and, if given, this many programs; or, with p_ga,
    the partition forced to p_ga grad_attn programs and the rest (up to the grad_weight tile count) on grad_weight."""
    real = kmod.plan_schedule.__wrapped__

    def plan(m, cfg, n):
        p = real(m, cfg, n)
        if p_ga:
            return replace(p, ga_first=True, p_ga=p_ga, programs=p_ga + min(n - p_ga, p.n_gw))
        if kind == "gw":
            p = replace(p, n_ga_m=0, n_ga=0, p_ga=0)
        elif kind == "ga":
            p = replace(p, n_gw_m=0, n_gw=0, p_ga=0)
        return replace(p, programs=programs) if programs else p

    return plan


def trace_once(
    tm,
    case: Case,
    cfg,
    device,
    reps: int = 5,
    kind: str | None = None,
    programs: int | None = None,
    p_ga: int | None = None,
):
    """Per program (start ns, end ns, cycles, sm) of ``reps`` launches (L2 flushed before each): a list of arrays."""
    go, x, w = make_inputs(case.batch_size, case.seq_len, device, generator=torch.Generator(device).manual_seed(0))
    flush = torch.empty(2 * torch.cuda.get_device_properties(device).L2_cache_size, dtype=torch.int8, device=device)
    saved = tm.plan_schedule
    tm.plan_schedule = only(kind, programs, p_ga)
    try:
        plan = tm.plan_schedule(case.batch_size * case.seq_len, cfg, tm._num_programs(device, cfg))
        out = []
        for r in range(reps + 1):
            trace = torch.zeros(plan.programs * 4, dtype=torch.int64, device=device)
            tm.TRACE[0] = trace
            torch.cuda._sleep(3_000_000)  # the GPU is busy while the host enqueues the flush and the kernel
            flush.fill_(r)
            tm.attn_output_proj_backward(go, x, w, config=cfg)
            torch.cuda.synchronize()
            if r:  # the first launch compiles
                out.append(trace.view(-1, 4).cpu())
        return plan, out
    finally:
        tm.plan_schedule = saved


def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def summarise(plan, traces, sms: int) -> dict:
    """Medians over the launches of: span, idle share, and per group start spread / end / busy (us)."""
    rows = []
    for t in traces:
        t0 = int(t[:, 0].min())
        start = (t[:, 0] - t0).double() / 1e3
        end = (t[:, 1] - t0).double() / 1e3
        busy_ns = (t[:, 1] - t[:, 0]).double()
        ghz = float((t[:, 2].double() / busy_ns.clamp(min=1)).median())
        span = float(end.max())
        n_sm = int(t[:, 3].unique().numel())
        per_sm = torch.bincount(t[:, 3].long())
        groups = {}
        idx = torch.arange(t.shape[0])
        if plan.p_ga:
            groups = {"ga": idx < plan.p_ga, "gw": idx >= plan.p_ga}
        else:
            groups = {"all": idx >= 0}
        g = {}
        for name, sel in groups.items():
            g[name] = (
                int(sel.sum()),
                float(start[sel].max()),
                float(end[sel].min()),
                float(end[sel].median()),
                float(end[sel].max()),
                float((busy_ns[sel] / 1e3).median()),
            )
        idle = 1 - float((busy_ns / 1e3).sum()) / (sms * span)
        rows.append((span, idle, ghz, n_sm, int((per_sm > 1).sum()), g))
    k = len(rows) // 2
    rows.sort(key=lambda r: r[0])
    return {"median": rows[k], "all_spans": [round(r[0], 2) for r in rows]}


def print_timeline(label: str, plan, summ: dict) -> None:
    span, idle, ghz, n_sm, doubled, groups = summ["median"]
    print(
        f"  {label:<44} programs {plan.programs:>3} p_ga {plan.p_ga:>3}: span {span:6.2f} us (runs "
        f"{summ['all_spans']}), SM idle {idle * 100:4.1f} %, clock {ghz:.2f} GHz, SMs used {n_sm}, "
        f"SMs with 2+ {doubled}"
    )
    for name, (n, s_max, e_min, e_med, e_max, busy) in groups.items():
        print(
            f"      {name:<3} n={n:>3} last start {s_max:5.2f}  end min/med/max {e_min:6.2f} {e_med:6.2f} {e_max:6.2f}"
            f"  busy median {busy:6.2f} us"
        )


TIMELINE_CASES = (Case(1, 256), Case(4, 128), Case(4, 256), Case(4, 512), Case(8, 1024))


def part_timeline(tm, device) -> None:
    print("== timeline: the table's configuration, one stamp at each program's start and end", flush=True)
    for case in TIMELINE_CASES:
        m = case.batch_size * case.seq_len
        cfg = replace(config_for(m, (9, 0)), arch="hopper", bucket=m)
        plan, traces = trace_once(tm, case, cfg, device)
        print_timeline(f"{case.name} M={m} {_short(cfg)}", plan, summarise(plan, traces, sm_count(device)))
        for occ_cfg in OCC2.get(m, ()):
            cfg2 = replace(cfg, **occ_cfg)
            plan, traces = trace_once(tm, case, cfg2, device)
            print_timeline(
                f"{case.name} M={m} {_short(cfg2)} occ{cfg2.occupancy}", plan, summarise(plan, traces, sm_count(device))
            )


def part_fixed(tm, device) -> None:
    print("== fixed cost: one kind of tile alone, fewer programs so each runs several tiles", flush=True)
    for case in (Case(1, 256), Case(4, 256)):
        m = case.batch_size * case.seq_len
        cfg = replace(config_for(m, (9, 0)), arch="hopper", bucket=m)
        base = kmod.plan_schedule.__wrapped__(m, cfg, sm_count(device))
        for kind, n_tiles in (("ga", base.n_ga), ("gw", base.n_gw)):
            pts = []
            for per in (1, 2, 4, 8):
                programs = n_tiles // per
                if programs > sm_count(device) or programs < 8:
                    continue
                plan, traces = trace_once(tm, case, cfg, device, kind=kind, programs=programs)
                summ = summarise(plan, traces, sm_count(device))
                span, _, ghz, *_ = summ["median"]
                busy = summ["median"][5]["all"][5]
                pts.append((per, busy))
                print(
                    f"  {case.name} M={m} {kind} {n_tiles} tiles on {programs:>3} programs ({per}/program): span "
                    f"{span:6.2f} us, busy median {busy:6.2f} us, clock {ghz:.2f} GHz",
                    flush=True,
                )
            if len(pts) >= 2:
                xs, ys = [p[0] for p in pts], [p[1] for p in pts]
                mx, my = statistics.fmean(xs), statistics.fmean(ys)
                slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / sum((a - mx) ** 2 for a in xs)
                print(f"  {case.name} M={m} {kind}: per tile {slope:.2f} us, fixed {my - slope * mx:.2f} us (fit)")


def side_by_side(
    device, iters: int, case: Case, cands: list[tuple[str, object, int | None]]
) -> tuple[dict[str, list[float]], float]:
    """Each candidate (label, config, forced p_ga or None) checked against the reference once, then timed A/B/A/B
    with the two cuBLAS matmuls under the CUPTI span: (label -> its medians, the cuBLAS mean). An incorrect or
    failing candidate is said and left out."""
    timer, protocols = _timer_and_protocols(device, 5, iters)
    cupti = next(p for p in protocols if p.timer == "cupti")

    def planned(p_ga):  # the launcher's plan, or the partition forced to p_ga
        saved = kmod.plan_schedule
        kmod.plan_schedule = only(None, None, p_ga)
        return saved

    ok: dict[str, bool] = {}
    for label, cfg, p_ga in cands:
        saved = planned(p_ga)
        try:
            ok[label], info = check_case(case, device, cfg)
            if not ok[label]:
                print(f"  {label} INCORRECT {info}", flush=True)
        except Exception as exc:
            ok[label] = False
            print(f"  {label} x {str(exc).splitlines()[0][:120]}", flush=True)
        finally:
            kmod.plan_schedule = saved
    times: dict[str, list[float]] = {label: [] for label, _, _ in cands}
    cub = []
    for _ in range(2):
        cub.append(time_impl(timer, cupti, two_matmuls, case, False))
        for label, cfg, p_ga in cands:
            if ok[label]:
                saved = planned(p_ga)
                try:
                    fn = functools.partial(kmod.attn_output_proj_backward, config=cfg)
                    times[label].append(time_impl(timer, cupti, fn, case, True))
                finally:
                    kmod.plan_schedule = saved
    return times, statistics.fmean(cub)


def result_line(is_table: bool, label: str, times: list[float], cublas: float, extra: str = "") -> list[str]:
    """The printed line of one timed candidate (none when it was not timed), also returned for the summary."""
    if not times:
        return []
    mean = statistics.fmean(times)
    line = (
        f"{'table' if is_table else '     '} {label:<70} {extra}timed {' '.join(f'{t:.1f}' for t in times)}"
        f"  mean {mean:.1f} us {mean / cublas:.3f}x cuBLAS ({cublas:.1f})"
    )
    print("   " + line, flush=True)
    return [line]


# Two programs per SM: 4 warps and 128x128 grad_weight tiles (the small-M shapes of the table before 2026-12-01),
# stages cut so that two programs fit in shared memory (scripts/diag_compile.py: 98 KB each).
_W4 = {"gw_bn": 128, "num_warps": 4, "tma_store": True}
OCC2: dict[int, tuple[dict, ...]] = {
    256: (
        {**_W4, "occupancy": 2, "num_stages": 2},
        {**_W4, "occupancy": 2, "num_stages": 3, "tma_store": False, "ga_tma_store": False},
    ),
    512: (
        {**_W4, "occupancy": 2, "num_stages": 2},
        {**_W4, "occupancy": 2, "num_stages": 3, "tma_store": False, "ga_tma_store": False},
    ),
    1024: ({"occupancy": 2, "ga_bn": 128, "gw_bn": 128, "num_warps": 4, "num_stages": 2, "group": 4},),
}
OCCUPANCY: tuple[tuple[Case, tuple[dict, ...]], ...] = (
    (Case(1, 256), (*OCC2[256], {**_W4, "occupancy": 2, "num_stages": 2, "schedule": "shared"})),
    (Case(4, 128), (*OCC2[512], {**_W4, "occupancy": 2, "num_stages": 2, "schedule": "shared"})),
    (Case(4, 256), (*OCC2[1024], {**OCC2[1024][0], "schedule": "shared"})),
)


def part_occupancy(device, iters: int) -> list[str]:
    print("== occupancy: two programs per SM, A/B/A/B against the table (CUPTI span, us)", flush=True)
    summary = []
    for case, variants in OCCUPANCY:
        m = case.batch_size * case.seq_len
        base = replace(config_for(m, (9, 0)), arch="hopper", bucket=m)
        cands = [base] + [replace(base, **v) for v in variants]
        labelled = [(f"{case.name} {_short(cfg)} occ{cfg.occupancy}", cfg, None) for cfg in cands]
        times, c = side_by_side(device, iters, case, labelled)
        print(f"  {case.name} M={m}: two cuBLAS matmuls {c:.1f} us", flush=True)
        for i, (label, _, _) in enumerate(labelled):
            summary += result_line(i == 0, label, times[label], c)
    return summary


# (case, candidates): each a config override of the table's entry, "p_ga" forcing the partition; checked on the
# CPU to compile and fit in shared memory first (scripts/diag_compile.py). The 256 and 512 entries are the table's
# entries before 2026-12-01 (4 warps, 128x128 grad_weight tiles, TMA stores), which the screen of that day beat.
_OLD_SMALL = {"gw_bn": 128, "num_warps": 4, "tma_store": True}
SCREEN: tuple[tuple[Case, tuple[dict, ...]], ...] = (
    (Case(4, 128), (_OLD_SMALL, {"group": 8}, {"ga_tma_store": False})),
    (Case(1, 256), (_OLD_SMALL, {"ga_bm": 128})),
    (Case(4, 256), ({"num_stages": 4, "tma_store": False, "ga_tma_store": False}, {"group": 4})),
)


def part_screen(tm, device, iters: int) -> list[str]:
    """Each candidate traced (span and when each group of programs ends); the table and the two shortest spans
    then timed A/B/A/B under the CUPTI span, each checked against the reference first."""
    print("== screen: candidates traced, the best two timed against the table", flush=True)
    summary = []
    for case, cands in SCREEN:
        m = case.batch_size * case.seq_len
        base = replace(config_for(m, (9, 0)), arch="hopper", bucket=m)
        spans = []
        for i, over in enumerate(({}, *cands)):
            over = dict(over)
            p_ga = over.pop("p_ga", None)
            cfg = replace(base, **over)
            label = f"{case.name} {_short(cfg)}" + (f" p_ga={p_ga}" if p_ga else "")
            try:
                plan, traces = trace_once(tm, case, cfg, device, p_ga=p_ga)
                summ = summarise(plan, traces, sm_count(device))
                print_timeline(label, plan, summ)
                spans.append((summ["median"][0], i, cfg, p_ga, label))
            except Exception as exc:
                print(f"  {label} x {str(exc).splitlines()[0][:120]}", flush=True)
        table = next(s for s in spans if s[1] == 0)
        best = sorted((s for s in spans if s[1] != 0), key=lambda s: s[0])[:2]
        timed = [table, *best]
        times, c = side_by_side(device, iters, case, [(s[4], s[2], s[3]) for s in timed])
        for s in timed:
            summary += result_line(s[1] == 0, s[4], times[s[4]], c, f"traced {s[0]:6.2f}  ")
    return summary


def compile_only(ms: list[int]) -> int:
    """The traced copy compiled for sm_90 on this host (no GPU): one line per M with the stamps counted in the PTX."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from diag_compile import compile_for  # scripts/ is not a package

    tm = traced_module()
    for m in ms:
        cfg = config_for(m, (9, 0))
        trace = torch.empty(4 * 132, dtype=torch.int64)
        _, k = compile_for(m, min(128, m), cfg, module=tm, extra={"trace_ptr": trace})
        ptx = k.asm["ptx"]
        print(
            f"M={m} traced: shared {k.metadata.shared} B, globaltimer {ptx.count('%globaltimer')}, "
            f"clock64 {ptx.count('%clock64')}, smid {ptx.count('%smid')}, wgmma {ptx.count('wgmma.mma_async')}"
        )
    return 0


def main(args: argparse.Namespace) -> int:
    if args.compile_only is not None:
        return compile_only(args.compile_only or [256, 1024])
    device = torch.device("cuda")
    parts = args.parts.split(",")
    tm = traced_module() if {"timeline", "fixed", "screen"} & set(parts) else None
    summary: list[str] = []
    for part in parts:
        try:
            if part == "timeline":
                part_timeline(tm, device)
            elif part == "fixed":
                part_fixed(tm, device)
            elif part == "occupancy":
                summary += part_occupancy(device, args.iters)
            elif part == "screen":
                summary += part_screen(tm, device, args.iters)
        except Exception as exc:  # one part failing must not cost the others
            print(f"== {part} failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    print("\n".join(["", "SUMMARY", *summary]))
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
