"""On the H200 (issue 21, since v19): variants of the Gluon kernel (``variants``: ping-pong against the cooperative
ring, ring depths, 128x256 tiles, tile-order groups, lazy against eager mbarrier inits) beside the table's entries,
the tile-language kernel (v17) and the two cuBLAS matmuls, in one process, one table.

Usage (GPU host, repository root): PYTHONPATH=. python scripts/bench_gluon_v19.py [--out DIR] [--budget-s 330]
       [--only NAME ...] [--timed B,S ...] [--list] [--select FILE] [--table-changed FILE]

1. every (variant, shape) is first run in worker processes (spawned, several at once on the one GPU): that compiles
   it into Triton's on-disk cache, and each worker then runs the harness's correctness loop
   (problem.correctness.check_rounds: NaN-poisoned outputs, the benchmark's tolerance) and a bit-for-bit repeat on its
   variant's shapes, off-grid ones included. A variant whose worker does not answer in time (a hang: a wrong mbarrier
   phase waits forever) is killed with its process and reported, not timed;
2. the timing protocol of ``solci bench`` (ci.harness.timing: CUPTI span, cold L2, fresh inputs per iteration), in
   the main process once the workers are gone: per shape the two cuBLAS matmuls, the tile-language kernel with its
   table's config, each bucket's baseline (``baseline``: the table's Gluon entry), each correct variant, the
   baseline again (the drift within the run);
3. a summary: per M bucket the fastest correct variant and, over the 16 cases, the geometric mean of today's
   entries (the baselines; "v18" in the table's header) and of the per-bucket best, each against cuBLAS; with
   ``--select``, the selection that scripts/apply_gluon_selection.py writes into GLUON_TABLE.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", nargs="*", help="variant names")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--check-timeout-s", type=float, default=120.0, help="per variant's worker process")
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop timing new shapes after this many seconds")
    ap.add_argument("--list", action="store_true", help="print the variants and shapes, run nothing")
    ap.add_argument("--timed", nargs="*", help="B,S pairs to time (default: the built-in list)")
    ap.add_argument(
        "--select",
        help="write here, per M bucket, the variant to put in GLUON_TABLE: the fastest correct one if it beats the "
        "bucket's baseline (the faster of its two timings per shape) by MARGIN over the bucket's timed shapes, else "
        "the baseline (the table's entry: baseline() below)",
    )
    ap.add_argument("--margin", type=float, default=0.015)
    ap.add_argument(
        "--table-changed",
        metavar="SELECT_JSON",
        help="run nothing: exit 0 if that selection puts a bucket on another variant than its baseline (the table "
        "changed), 1 if not, 2 if the file cannot be read",
    )
    return ap.parse_args(argv)


# Shapes (B, S). Timed: one case per M of the 16 (M = 1024 and 2048 repeat with other (B, S) in the workload), and
# one of each large M for the exploratory large-M entries. Checked: the timed ones and off-grid ones per bucket.
TIMED = [(1, 256), (4, 128), (1, 1024), (8, 128), (2, 1024), (16, 128), (4, 1024), (2, 4096)]
CHECKED = [*TIMED, (1, 64), (1, 128), (3, 64), (1, 512), (3, 128), (7, 128), (6, 128), (2, 384), (12, 128), (1, 2048)]
CHECKED += [(24, 128), (48, 128)]
# how many of the 16 workload cases have each M (for the geometric mean over the 16)
CASES_PER_M = {256: 1, 512: 1, 1024: 3, 2048: 4, 4096: 3, 8192: 4}
LO = {256: 0, 512: 256, 1024: 512, 2048: 1024, 4096: 2048, 8192: 4096}


def variants() -> dict[str, tuple[int, object]]:
    """Name -> (M bucket, GluonConfig): each bucket's baseline (the table's entry) and the variants the kernel still
    runs beside it. The variants of the schedules measured and dropped since v19 (held stages, prefetches, K-steps of
    32, the two-pass, deferred and register epilogues, multicast, stream-K, two programs an SM, ...) went with their
    switches (kernel/NOTES.md says what each measured)."""
    from kernel import gluon_backward as gb

    # v18's entries (the table before v19): cooperative, 6 stages of 128x128 blocks, every ring mbarrier initialised
    # before the partitions start
    v18_small = gb.GluonConfig(64, 128, 128, 128, stages=6)
    v18 = gb.GluonConfig(128, 128, 128, 128, stages=6)
    base = {256: v18_small, 512: v18, 1024: v18, 2048: v18}
    # v21 (item 22): 128x256 tiles of both kinds (a quarter less L2 traffic per MMA than 128x128; the same wgmma
    # ceiling, docs/h200/wgmma_ceiling.log) with the 3 stages that fit beside their epilogue buffers
    w256 = replace(v18, ga_bn=256, gw_bn=256, stages=3)
    out: dict[str, tuple[int, object]] = {}
    # v19: ping-pong (each warpgroup runs whole tiles in turn, its epilogue in the tile's last ring stage) at 6 and 7
    # stages beside v18's cooperative ring, at every bucket up to 2048 and with 128x128 tiles above
    for m, cfg in base.items():
        out[f"v18_{m}"] = (m, cfg)
        out[f"pp6_{m}"] = (m, replace(cfg, pingpong=True, stages=6))
        out[f"pp7_{m}"] = (m, replace(cfg, pingpong=True, stages=7))
    out["pp7g8_1024"] = (1024, replace(base[1024], pingpong=True, stages=7, group=8))
    out["pp7g8_2048"] = (2048, replace(base[2048], pingpong=True, stages=7, group=8))
    out["pp7ga128_256"] = (256, replace(base[256], ga_bm=128, pingpong=True, stages=7))
    for m in (4096, 8192):
        out[f"pp7_{m}"] = (m, replace(v18, pingpong=True, stages=7))
    # item 22: the 128x256 tiles against the cooperative 128x128 ring (at M >= 4096 also against the tile-language
    # kernel), and 128x256 grad_weight tiles beside 128x128 grad_attn ones (v24 run b at M = 512-2048)
    for m in (1024, 2048, 4096, 8192):
        out[f"w256s3_{m}"] = (m, w256)
    for m in (4096, 8192):
        out[f"coop_{m}"] = (m, v18)
        out[f"gw256s3_{m}"] = (m, replace(v18, gw_bn=256, stages=3))
    for m in (512, 1024, 2048):
        out[f"gw256s3_{m}"] = (m, replace(base[m], gw_bn=256, stages=3))
    # item 22, run b: the tile order (GROUP row blocks share column blocks in flight) where the loops pull from L2
    for m in (4096, 8192):
        for g in (2, 8, 16):
            out[f"w256s3g{g}_{m}"] = (m, replace(w256, group=g))
    for m in (1024, 2048):
        for g in (8, 16):
            out[f"v18g{g}_{m}"] = (m, replace(base[m], group=g))
    # v24, run e: each ring stage's mbarriers initialised by the loader as it first fills the stage (the first load
    # leaves ~0.3 us earlier: item 25's trace has 0.45 us of inits before the partitions start), on every entry
    out["pp7lz_256"] = (256, replace(base[256], pingpong=True, stages=7, lazy_init=True))
    for m in (512, 1024, 2048):
        out[f"lz_{m}"] = (m, replace(base[m], lazy_init=True))
    for m in (4096, 8192):
        out[f"w256s3lz_{m}"] = (m, replace(w256, lazy_init=True))
    return out


def baseline(bucket: int) -> str:
    """The variant a bucket's candidates are measured against (timed twice), the table's entry: ping-pong with 7
    stages at M <= 256 (v19), v18's 128x128 entries at 512-2048, both with the loader's lazy init (v24), v21's
    128x256 ones above."""
    if bucket <= 256:
        return f"pp7lz_{bucket}"
    return f"lz_{bucket}" if bucket <= 2048 else f"w256s3_{bucket}"


def applies(bucket: int, cfg, b: int, s: int) -> bool:
    m = b * s
    return LO[bucket] < m <= bucket and s % cfg.ga_bm == 0 and m % cfg.ga_bm == 0


def gluon_fn(cfg):
    import torch

    from kernel import gluon_backward as gb
    from problem.workload import HEAD_DIM, NUM_HEADS

    def fn(go, x, w, out=None):
        b, s = go.shape[0], go.shape[1]
        if out is None:
            ga = torch.empty((b, NUM_HEADS, s, HEAD_DIM), dtype=go.dtype, device=go.device)
            gw = torch.empty((w.shape[0], w.shape[1]), dtype=go.dtype, device=go.device)
        else:
            ga, gw = out
        gb.launch(go.reshape(-1, go.shape[-1]), w, x.reshape(-1, x.shape[-1]), gw, ga, s, cfg)
        return ga, gw

    return fn


def _finish_or_exit(deadline_s: float, what: str) -> None:
    """Wait for the GPU's work so far, but not forever: a kernel that waits on a wrong mbarrier phase never ends
    and holds its SMs; leaving the process ends it (the driver tears the context down)."""
    import os

    import torch

    ev = torch.cuda.Event()
    ev.record()
    end = time.monotonic() + deadline_s
    while not ev.query():
        if time.monotonic() > end:
            print(f"HANG {what}: not finished after {deadline_s:.0f} s, leaving", flush=True)
            os._exit(3)
        time.sleep(0.01)


def check_worker(name: str, bucket: int, cfg, shapes: list[tuple[int, int]], result: str) -> None:
    """In a spawned process: compile, check and repeat one variant on its shapes (or warm the tile-language
    kernel: name 'triton'); the lines go to the file ``result``."""
    import torch

    from problem.correctness import check_rounds
    from problem.reference import make_inputs

    dev = torch.device("cuda")
    lines = []
    if name == "triton":
        import functools

        from kernel.backward import attn_output_proj_backward, kernel_config

        for b, s in shapes:
            g, x, w = make_inputs(b, s, dev)
            functools.partial(attn_output_proj_backward, config=kernel_config(b * s, dev))(g, x, w)
            torch.cuda.synchronize()
            lines.append(f"triton ({b},{s}) warmed")
        Path(result).write_text(json.dumps(lines))
        return
    fn = gluon_fn(cfg)
    for b, s in shapes:
        m = b * s
        try:
            g, x, w = make_inputs(b, s, dev, generator=torch.Generator(device=dev).manual_seed(5))
            fn(g, x, w)  # compiles (host), then runs: a hang ends the process here
            _finish_or_exit(20.0, f"{name} ({b},{s})")
            res = check_rounds(fn, b, s, dev, rounds=2, seed=17 + m)
            ga, gw = res.outputs.get("grad_attn_output", {}), res.outputs.get("grad_weight", {})
            r1 = [t.clone() for t in fn(g, x, w)]
            r2 = [t.clone() for t in fn(g, x, w)]
            same = all(torch.equal(p.view(torch.int16), q.view(torch.int16)) for p, q in zip(r1, r2, strict=True))
            ok = bool(res.ok) and same
            lines.append(
                f"{'ok' if ok else 'FAIL'} {name:<14} ({b},{s}) M={m}: {'ok' if res.ok else 'FAIL ' + str(res.reason)} "
                f"ga {ga.get('match_fraction', 0):.4f}/{ga.get('max_abs_err', 0):.2e} "
                f"gw {gw.get('match_fraction', 0):.4f}/{gw.get('max_abs_err', 0):.2e} bitwise-repeatable {same}"
            )
        except Exception as e:  # a variant that breaks must not stop the others
            lines.append(f"FAIL {name:<14} ({b},{s}) M={m}: ERROR {type(e).__name__}: {str(e)[-300:]}")
            traceback.print_exc()
        Path(result).write_text(json.dumps(lines))


def run_checks(tasks: list[tuple], workers: int, timeout_s: float, tmp: Path) -> dict[str, list[str]]:
    """Each task (name, bucket, cfg, shapes) in its own spawned process, ``workers`` at a time; a process past
    ``timeout_s`` is killed. Returns the lines per name (a missing or short file says what did not finish)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = list(tasks)
    running: dict[str, tuple] = {}
    results: dict[str, list[str]] = {}
    while queue or running:
        while queue and len(running) < workers:
            name, bucket, cfg, shapes = queue.pop(0)
            path = tmp / f"{name}.json"
            proc = ctx.Process(target=check_worker, args=(name, bucket, cfg, shapes, str(path)))
            proc.start()
            running[name] = (proc, time.monotonic(), path, len(shapes))
        for name, (proc, started, path, n) in list(running.items()):
            late = time.monotonic() - started > timeout_s
            if proc.is_alive() and not late:
                continue
            if proc.is_alive():
                proc.kill()
            proc.join()
            lines = json.loads(path.read_text()) if path.exists() else []
            if len(lines) < n:
                why = "killed after the timeout" if late else f"process ended (exit code {proc.exitcode})"
                lines.append(f"FAIL {name}: {n - len(lines)} shape(s) unfinished, {why}")
            results[name] = lines
            del running[name]
        time.sleep(0.2)
    return results


def select(rows: dict, candidates: dict[str, tuple[int, object]], margin: float) -> dict[str, dict]:
    """Per bucket with a correct timing of its baseline: the candidate with the smallest geometric mean over the
    bucket's timed shapes (timed on all of them), kept only if below (1 - margin) x the baseline's (each shape's
    baseline the faster of its two timings). ``ratio_to_v18``: to the baseline (the table's entry; the key keeps
    v19's name)."""
    out: dict[str, dict] = {}
    for bucket in LO:
        shapes = [bs for bs in rows if LO[bucket] < bs[0] * bs[1] <= bucket]
        ref = baseline(bucket)
        if not shapes or ref not in candidates or any(ref not in rows[bs] for bs in shapes):
            continue

        def gmean(values: list[float]) -> float:
            return math.exp(sum(math.log(v) for v in values) / len(values))

        base = gmean([min(rows[bs][ref], rows[bs].get(ref + "_again", rows[bs][ref])) for bs in shapes])
        best, best_t = ref, base
        for n, (b, _) in candidates.items():
            if b == bucket and n != ref and all(n in rows[bs] for bs in shapes):
                tn = gmean([rows[bs][n] for bs in shapes])
                if tn < best_t:
                    best, best_t = n, tn
        if best != ref and best_t > base * (1 - margin):
            best, best_t = ref, base
        out[str(bucket)] = {
            "name": best,
            "config": asdict(candidates[best][1]),
            "ratio_to_v18": best_t / base,
            "shapes": [f"({b},{s})" for b, s in shapes],
        }
    return out


def table_changed(path: str) -> int:
    """--table-changed: 0 if the selection file moves a bucket off its baseline, 1 if not, 2 (one line) if unread."""
    try:
        sel = json.loads(Path(path).read_text())
        names = {int(bucket): entry["name"] for bucket, entry in sel.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"bench_gluon_v19: cannot read the selection {path}: {exc}", file=sys.stderr)
        return 2
    return 0 if any(name != baseline(bucket) for bucket, name in names.items()) else 1


def main() -> int:
    args = parse_args()
    if args.table_changed:
        return table_changed(args.table_changed)
    allv = variants()
    names = args.only or list(allv)
    unknown = [n for n in names if n not in allv]
    if unknown:
        print(f"unknown variant(s) {unknown}; --list shows them", file=sys.stderr)
        return 2
    if args.list:
        for n in names:
            bucket, cfg = allv[n]
            print(n, bucket, [bs for bs in CHECKED if applies(bucket, cfg, *bs)], asdict(cfg))
        return 0
    global TIMED
    if args.timed:
        TIMED = [tuple(int(v) for v in p.split(",")) for p in args.timed]
    t0 = time.monotonic()
    out = Path(args.out)
    log: dict = {"check": {}, "timing": {}, "variants": {n: asdict(allv[n][1]) for n in names}}
    # ---- 1: compile, check and repeat in worker processes
    import tempfile

    tasks = [("triton", 0, None, TIMED)]
    for n in names:
        bucket, cfg = allv[n]
        tasks.append((n, bucket, cfg, [bs for bs in CHECKED if applies(bucket, cfg, *bs)]))
    with tempfile.TemporaryDirectory() as tmp:
        results = run_checks(tasks, args.workers, args.check_timeout_s, Path(tmp))
    ok: set[str] = set()
    for n, lines in results.items():
        for ln in lines:
            print(ln, flush=True)
        log["check"][n] = lines
        if n != "triton" and lines and all(ln.startswith("ok ") for ln in lines):
            ok.add(n)
    print(f"checks done in {time.monotonic() - t0:.0f} s; correct and repeatable: {sorted(ok)}", flush=True)

    # ---- 2: timing, CUPTI span (the primary protocol of solci bench)
    import functools

    import torch

    from ci.harness.timing import Timer, make_protocols
    from kernel.backward import attn_output_proj_backward, kernel_config
    from problem.reference import timing_sets, two_matmuls

    dev = torch.device("cuda")
    print(f"GPU {torch.cuda.get_device_name(dev)} torch {torch.__version__}", flush=True)
    timer = Timer(dev, l2_bytes=torch.cuda.get_device_properties(dev).L2_cache_size)
    proto = make_protocols("gpu", rounds=1, warmup=args.warmup, iters=args.iters)[0]
    print(f"\ntiming protocol {proto.name} ({proto.timer}); us, (x cuBLAS)", flush=True)

    def t(fn, b: int, s: int, with_out: bool) -> float:
        make = timing_sets(b, s, dev, seed=0)
        return statistics.median(timer.run(proto, fn, lambda: make(with_out)).samples_us)

    rows: dict[tuple[int, int], dict[str, float]] = {}
    for b, s in TIMED:
        if time.monotonic() - t0 > args.budget_s:
            print(f"({b},{s}): skipped, past the time budget", flush=True)
            continue
        m = b * s
        row = {"cublas": t(two_matmuls, b, s, False)}
        row["triton"] = t(functools.partial(attn_output_proj_backward, config=kernel_config(m, dev)), b, s, True)
        here = [n for n in names if n in ok and applies(allv[n][0], allv[n][1], b, s)]
        for n in here:
            row[n] = t(gluon_fn(allv[n][1]), b, s, True)
        again = [n for n in here if n == baseline(allv[n][0])]
        if again:  # the baseline timed twice: the drift within the run
            row[again[0] + "_again"] = t(gluon_fn(allv[again[0]][1]), b, s, True)
        rows[(b, s)] = row
        cb = row["cublas"]
        print(
            f"({b},{s}) M={m}: cuBLAS {cb:.1f} | " + "; ".join(f"{k} {v:.1f} ({v / cb:.3f})" for k, v in row.items()),
            flush=True,
        )
        log["timing"][f"({b},{s})"] = row
    (out / "bench_gluon_v19.json").write_text(json.dumps(log, indent=1))

    # ---- 3: summary
    print("\n| shape | M | cuBLAS | v17 (tile) | v18 | best variant | best | best/cuBLAS | v18/cuBLAS | best/v18 |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    logs = {"cublas": 0.0, "v18": 0.0, "best": 0.0, "n": 0}
    baselines = {baseline(bucket) for bucket in LO}
    for (b, s), row in rows.items():
        m = b * s
        cand = {k: v for k, v in row.items() if k not in ("cublas", "triton") and not k.endswith("_again")}
        # what runs today at this M: its baseline variant (the tile-language kernel where none was timed)
        base = min([v for k, v in row.items() if k in baselines] or [row["triton"]])
        best_k, best = min(cand.items(), key=lambda kv: kv[1]) if cand else ("triton", row["triton"])
        if row["triton"] < best:
            best_k, best = "triton", row["triton"]
        cb = row["cublas"]
        print(
            f"| ({b},{s}) | {m} | {cb:.1f} | {row['triton']:.1f} | {base:.1f} | {best_k} | {best:.1f} | "
            f"{best / cb:.3f} | {base / cb:.3f} | {best / base:.3f} |"
        )
        w = CASES_PER_M.get(m, 0)
        logs["cublas"] += w * math.log(cb)
        logs["v18"] += w * math.log(base)
        logs["best"] += w * math.log(best)
        logs["n"] += w
    if logs["n"]:
        n = logs["n"]
        g = {k: math.exp(logs[k] / n) for k in ("cublas", "v18", "best")}
        print(
            f"\nweighted over the {n} cases (one timed shape per M stands for its cases): cuBLAS {g['cublas']:.1f} us, "
            f"today {g['v18']:.1f} ({g['v18'] / g['cublas']:.3f}x), per-bucket best {g['best']:.1f} "
            f"({g['best'] / g['cublas']:.3f}x)"
        )
    if args.select:
        sel = select(rows, {n: allv[n] for n in names if n in ok}, args.margin)
        Path(args.select).write_text(json.dumps(sel, indent=1))
        for bucket, e in sel.items():
            print(f"select {bucket}: {e['name']} (x{e['ratio_to_v18']:.3f} v18 over {e['shapes']})", flush=True)
    print(f"total {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
