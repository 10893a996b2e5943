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

Usage (GPU): PYTHONPATH=. python scripts/diag_floor.py [--ms 512,1024,2048] [--iters 50]
Usage (CPU): PYTHONPATH=. python scripts/diag_floor.py --plan-only   (the steps a program of each plan runs)
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
    ap.add_argument("--watchdog-s", type=float, default=240, help="dump every thread's stack and leave after this")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch and Triton load
    ARGS = parse_args()

import torch  # noqa: E402

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


def plans(m: int, sms: int) -> dict[str, tuple[int, int]]:
    """name -> (SMs busy, steps each): ``whole``, the table's plan at M (the busiest program's 128x128x64-equivalent
    steps, on its programs); ``split``, the problem's steps spread evenly on every SM (rounded up)."""
    cfg = gb.GLUON_TABLE[bucket_for(m)][0]
    plan = gb.plan_for(m, cfg, sms)
    per_tile = {"ga": (cfg.ga_bm * cfg.ga_bn) // (128 * 128) * (HIDDEN // STEP)}
    per_tile["gw"] = (cfg.gw_bm * cfg.gw_bn) // (128 * 128) * math.ceil(m / STEP)
    busiest = 0
    for p in range(plan.programs):
        if plan.p_ga:  # partitioned: programs < p_ga run grad_attn tiles only, the others grad_weight tiles only
            if p < plan.p_ga:
                steps = len(range(p, plan.n_ga, plan.p_ga)) * per_tile["ga"]
            else:
                steps = len(range(p - plan.p_ga, plan.n_gw, plan.programs - plan.p_ga)) * per_tile["gw"]
        else:
            steps = len(range(p, plan.n_ga, plan.programs)) * per_tile["ga"]
            steps += len(range(p, plan.n_gw, plan.programs)) * per_tile["gw"]
        busiest = max(busiest, steps)
    return {"whole": (plan.programs, busiest), "split": (sms, math.ceil(total_steps(m) / sms))}


def floor_fn(busy: int, steps: int):
    """The floor's launch as the timed call: ``fn(go, x, w, out=...)`` runs the MMA loop on 2 x ``busy`` warpgroup
    programs (two an SM) of ``steps`` steps each, its operands loaded once from the iteration's grad_output."""
    from diag_wgmma_ceiling import wgmma_loop  # scripts/ is on the path when this runs as a script

    sums = torch.empty(2 * busy, dtype=torch.float32, device="cuda")

    def fn(go, x, w, out=None):
        wgmma_loop[(2 * busy,)](go.view(-1, HIDDEN), sums, steps, BN=128, A_MN=False, DEPTH=1, NACC=1, num_warps=4)

    return fn


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
    import faulthandler
    import sys

    if not torch.cuda.is_available():
        print("diag_floor: no CUDA device here (--plan-only runs without one)", file=sys.stderr)
        sys.exit(2)

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


if __name__ == "__main__":
    main()
