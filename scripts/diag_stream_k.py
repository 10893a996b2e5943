"""Device diagnostic (issue 21, v30 runs b and c; kernel/NOTES.md item 30): where stream-K's time goes. Per shape,
side by side in one process with ``solci bench``'s timing protocol (CUPTI span, cold L2): the table's entry,
stream-K on the SMs' programs with the stream's tiles interleaved (``sk``) and in their grouped order (``skl``), the
same code on 128 programs (``sk128``, ``skl128``: ranges of whole tiles, nothing split or joined, the entry's tile
order for sk128), and diagnostic copies without parts of the join (wrong results by design, labelled): ``d1`` no
partial stored or loaded, ``d2`` no flag, ``d3`` neither.

Usage (GPU): PYTHONPATH=. python scripts/diag_stream_k.py [--shapes 8,128 16,128 4,1024 2,4096] [--variants sk,d3]
             [--iters 50]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", default=["8,128", "16,128", "4,1024", "2,4096"], help="B,S pairs")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    return ap.parse_args(argv)


# name -> (programs: None for the SM count, GluonConfig overrides of the entry's, DIAG)
VARIANTS = {
    "sk": (None, {"stream_k": True}, 0),
    "skl": (None, {"stream_k": True, "sk_order": "linear"}, 0),
    "sk128": (128, {"stream_k": True}, 0),
    "skl128": (128, {"stream_k": True, "sk_order": "linear"}, 0),
    "d1": (None, {"stream_k": True}, 1),
    "d2": (None, {"stream_k": True}, 2),
    "d3": (None, {"stream_k": True}, 3),
}


def sk_fn(gb, cfg, programs: int, diag: int):
    """A stream-K launch on ``programs`` programs with DIAG ``diag``, through the module's own arguments."""
    import torch

    from problem.workload import HEAD_DIM, NUM_HEADS

    def fn(go, x, w, out=None):
        b, s = go.shape[0], go.shape[1]
        ga, gw = out or (
            torch.empty((b, NUM_HEADS, s, HEAD_DIM), dtype=go.dtype, device=go.device),
            torch.empty_like(w),
        )
        go2, x2 = go.reshape(b * s, -1), x.reshape(b * s, -1)
        plan = gb.plan_for(b * s, cfg, programs)
        index = go.device.index or 0
        ws = gb._sk_workspace(cfg, plan.programs, go.device, index)
        args, kw = gb.launch_arguments(go2, w, x2, gw, ga, s, cfg, plan, sk_workspace=ws)
        gb.gluon_bwd_kernel_sk[(plan.programs,)](*args, **kw, DIAG=diag, num_warps=4)
        return ga, gw

    return fn


def main(args: argparse.Namespace) -> None:
    import torch

    from ci.harness.timing import Timer, make_protocols
    from kernel import gluon_backward as gb
    from kernel.configs import bucket_for
    from problem.correctness import check_rounds
    from problem.reference import timing_sets, two_matmuls
    from tests.kernel.test_gluon import _gluon_fn

    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    timer = Timer(dev, l2_bytes=torch.cuda.get_device_properties(dev).L2_cache_size)
    proto = make_protocols("gpu", rounds=1, warmup=args.warmup, iters=args.iters)[0]
    print(f"GPU {torch.cuda.get_device_name(dev)}, {sms} SMs; protocol {proto.name} ({proto.timer}); us (x entry)")

    def t(fn, b: int, s: int, with_out: bool) -> float:
        make = timing_sets(b, s, dev, seed=0)
        return statistics.median(timer.run(proto, fn, lambda: make(with_out)).samples_us)

    for shape in args.shapes:
        b, s = map(int, shape.split(","))
        m = b * s
        entry = gb.GLUON_TABLE[bucket_for(m)][0]
        fns = {"entry": _gluon_fn(entry)}
        notes = {}
        for name in args.variants.split(","):
            programs, over, diag = VARIANTS[name]
            cfg = replace(entry, **over)
            p = programs or sms
            if not gb.stream_k_kind(m, cfg, p):
                notes[name] = "n/a"
                continue
            fns[name] = sk_fn(gb, cfg, p, diag)
            res = check_rounds(fns[name], b, s, dev, rounds=1, seed=5)
            torch.cuda.synchronize()
            kind = gb.stream_k_kind(m, cfg, p)
            c = gb.stream_k_interleave(m, cfg, p, kind)
            notes[name] = f"{'ok' if res.ok else 'WRONG' + (' (by design)' if diag else '')} P={p} c={c}"
        row = {"cublas": t(two_matmuls, b, s, False)}
        for name, fn in fns.items():
            row[name] = t(fn, b, s, True)
        row["entry_again"] = t(fns["entry"], b, s, True)
        base = row["entry"]
        print(f"({b},{s}) M={m}: " + "; ".join(f"{k} {v:.1f} ({v / base:.3f})" for k, v in row.items()), flush=True)
        print("   " + "; ".join(f"{k}: {v}" for k, v in notes.items()), flush=True)


if __name__ == "__main__":
    main(parse_args())
