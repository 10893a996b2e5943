"""On the H200: correctness, determinism and CUPTI timings of Gluon kernel variants beside the tile-language kernel.

Usage (GPU host, repository root): PYTHONPATH=. python scripts/bench_gluon.py [--iters 50] [--out DIR]
1. every variant on the cases with M <= 1024 and off-grid shapes, through the harness's correctness loop
   (problem.correctness.check_rounds: NaN-poisoned outputs, the benchmark's tolerance), two rounds each;
2. determinism: the same inputs twice, outputs compared bit for bit;
3. the timing protocol of ``solci bench`` (ci.harness.timing: CUPTI span, cold L2, fresh inputs per iteration)
   for the tile-language kernel (its table's config), each variant, eager and the two cuBLAS matmuls, one table.
A variant that fails correctness is not timed.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import traceback
from dataclasses import asdict, replace
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", nargs="*", help="variant names")
    ap.add_argument("--shapes", nargs="*", help="B,S pairs to check and time (default: the built-in lists)")
    return ap.parse_args(argv)


# the arguments first: --help answers without importing torch or the kernel (what follows takes seconds)
ARGS = parse_args()

import torch  # noqa: E402

from ci.harness.timing import Timer, make_protocols  # noqa: E402
from kernel import gluon_backward as gb  # noqa: E402
from kernel.backward import attn_output_proj_backward, kernel_config  # noqa: E402
from problem.correctness import check_rounds  # noqa: E402
from problem.reference import attn_output_proj_backward_eager, make_inputs, timing_sets, two_matmuls  # noqa: E402
from problem.workload import HEAD_DIM, NUM_HEADS  # noqa: E402

BASE = {m: cfg for m, (cfg, _) in gb.GLUON_TABLE.items()}
VARIANTS: dict[str, tuple[int, gb.GluonConfig]] = {f"g{m}": (m, cfg) for m, cfg in BASE.items()}
VARIANTS.update(
    {
        "g256_gw256s3": (256, replace(BASE[256], gw_bn=256, stages=3, pingpong=False)),
        "g1024_256s3": (1024, replace(BASE[1024], ga_bn=256, gw_bn=256, stages=3)),
        "g2048_256s3": (2048, replace(BASE[2048], ga_bn=256, gw_bn=256, stages=3)),
    }
)
TIMED_SHAPES = [(1, 256), (4, 128), (1, 1024), (4, 256), (8, 128), (2, 1024), (4, 512)]
CHECK_SHAPES = [*TIMED_SHAPES, (3, 128), (5, 64), (2, 192), (7, 128), (1, 64), (6, 128), (2, 384), (12, 128)]


def gluon_fn(cfg: gb.GluonConfig):
    """The public function's signature around one Gluon configuration (outputs allocated when out is None)."""

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


def bucket_ok(m: int, bucket: int) -> bool:
    lo = {256: 0, 512: 256, 1024: 512, 2048: 1024}[bucket]
    return lo < m <= bucket


def main() -> int:
    args = ARGS
    out = Path(args.out)
    dev = torch.device("cuda")
    names = args.only or list(VARIANTS)
    shapes = [tuple(int(v) for v in p.split(",")) for p in args.shapes] if args.shapes else None
    check_shapes, timed_shapes = shapes or CHECK_SHAPES, shapes or TIMED_SHAPES
    ok_variants: set[str] = set()
    log: dict = {"check": {}, "determinism": {}, "timing": {}}
    print(f"GPU {torch.cuda.get_device_name(dev)} torch {torch.__version__}", flush=True)
    # ---- 1, 2: correctness and determinism
    for name in names:
        bucket, cfg = VARIANTS[name]
        fn = gluon_fn(cfg)
        good = True
        for b, s in check_shapes:
            m = b * s
            if not bucket_ok(m, bucket) or s % cfg.ga_bm:
                continue
            try:
                res = check_rounds(fn, b, s, dev, rounds=2, seed=17 + m)
                ga, gw = res.outputs.get("grad_attn_output", {}), res.outputs.get("grad_weight", {})
                line = (
                    f"{name:<14} ({b},{s}) M={m}: {'ok' if res.ok else 'FAIL ' + str(res.reason)} "
                    f"ga {ga.get('match_fraction', 0):.4f}/{ga.get('max_abs_err', 0):.2e} "
                    f"gw {gw.get('match_fraction', 0):.4f}/{gw.get('max_abs_err', 0):.2e} "
                    f"nonfinite {ga.get('nonfinite')}/{gw.get('nonfinite')}"
                )
                good &= bool(res.ok)
                g, x, w = make_inputs(b, s, dev, generator=torch.Generator(device=dev).manual_seed(5))
                r1 = [t.clone() for t in fn(g, x, w)]
                r2 = [t.clone() for t in fn(g, x, w)]
                same = all(torch.equal(p.view(torch.int16), q.view(torch.int16)) for p, q in zip(r1, r2, strict=True))
                log["determinism"][f"{name} ({b},{s})"] = same
                good &= same
                line += f" bitwise-repeatable {same}"
            except Exception as e:  # a variant that breaks must not stop the others
                good = False
                line = f"{name:<14} ({b},{s}) M={m}: ERROR {type(e).__name__}: {str(e)[-400:]}"
                traceback.print_exc()
            print(line, flush=True)
            log["check"][f"{name} ({b},{s})"] = line
        if good:
            ok_variants.add(name)
    # the public function on an off-grid shape (falls back to the tile-language kernel) and on the grid
    for b, s in [(3, 100), (1, 256), (2, 333)]:
        res = check_rounds(attn_output_proj_backward, b, s, dev, rounds=1, seed=3)
        print(f"public ({b},{s}): {'ok' if res.ok else 'FAIL ' + str(res.reason)}", flush=True)
    # ---- 3: timing, CUPTI span (the primary protocol of solci bench)
    timer = Timer(dev, l2_bytes=torch.cuda.get_device_properties(dev).L2_cache_size)
    proto = make_protocols("gpu", rounds=1, warmup=args.warmup, iters=args.iters)[0]
    print(f"\ntiming protocol {proto.name} ({proto.timer})", flush=True)

    def t(fn, b: int, s: int, with_out: bool) -> float:
        make = timing_sets(b, s, dev, seed=0)
        return statistics.median(timer.run(proto, fn, lambda: make(with_out)).samples_us)

    header = (
        f"{'shape':<10}{'M':>6} {'triton':>8} {'cuBLAS':>8} {'eager':>8} | variant: us (x triton, x cuBLAS, x eager)"
    )
    print(header, flush=True)
    for b, s in timed_shapes:
        m = b * s
        tri = functools.partial(attn_output_proj_backward, config=kernel_config(m, dev))
        row = {"triton": t(tri, b, s, True), "cublas": t(two_matmuls, b, s, False)}
        row["eager"] = t(attn_output_proj_backward_eager, b, s, False)
        parts = []
        for name in names:
            bucket, cfg = VARIANTS[name]
            if name not in ok_variants or not bucket_ok(m, bucket) or s % cfg.ga_bm:
                continue
            row[name] = t(gluon_fn(cfg), b, s, True)
            parts.append(
                f"{name} {row[name]:.1f} ({row[name] / row['triton']:.3f}, {row[name] / row['cublas']:.3f}, "
                f"{row[name] / row['eager']:.3f})"
            )
        # the tile-language kernel again, to see the drift within the run
        row["triton_again"] = t(tri, b, s, True)
        print(
            f"({b},{s}){'':<{10 - len(f'({b},{s})')}}{m:>6} {row['triton']:>8.1f} {row['cublas']:>8.1f} "
            f"{row['eager']:>8.1f} | " + "; ".join(parts) + f" | triton again {row['triton_again']:.1f}",
            flush=True,
        )
        log["timing"][f"({b},{s})"] = row
    log["variants"] = {n: asdict(VARIANTS[n][1]) for n in names}
    (out / "bench_gluon.json").write_text(json.dumps(log, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
