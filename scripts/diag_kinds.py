"""Device diagnostic: each kind of tile of the fused kernel alone against the matching cuBLAS GEMM alone.

Usage on a GPU host: PYTHONPATH=. python3 scripts/diag_kinds.py [--ms 4096,8192]
For each M: the fused kernel (table config and tile variants), the same launch with only its grad_weight tiles or
only its grad_attn tiles (the other kind's tile count set to zero, so those outputs are not written and are not
checked), and cuBLAS's grad_attn GEMM (go @ W) and grad_weight GEMM (go.T @ x) alone. CUPTI span, L2 flushed.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import replace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ms", default="4096,8192", help="the M timed, comma-separated (1024, 2048, 4096, 8192)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--base-only", action="store_true", help="only the table's configuration, no tile variants")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch, Triton and the kernel load (5-8 s on a 2-core host)
    ARGS = parse_args()

import torch  # noqa: E402

# the plan with one kind of tile (scripts/ is on the path when run as a script)
from diag_timeline import only  # noqa: E402

from ci.harness.bench import _short, _timer_and_protocols, check_case, time_impl  # noqa: E402
from kernel import backward as kmod  # noqa: E402  (the launcher's module)
from kernel.configs import config_for  # noqa: E402
from problem.workload import Case  # noqa: E402

CASE_OF = {1024: "4,256", 2048: "4,512", 4096: "4,1024", 8192: "8,1024"}


def main(args: argparse.Namespace) -> int:
    device = torch.device("cuda")
    timer, protocols = _timer_and_protocols(device, 5, args.iters)
    cupti = next(p for p in protocols if p.timer == "cupti")
    for m in (int(v) for v in args.ms.split(",")):
        case = Case.parse(CASE_OF[m])
        ga_mm = lambda go, x, w: go @ w
        gw_mm = lambda go, x, w: go.reshape(-1, 2048).t() @ x.reshape(-1, 2048)
        t_ga = time_impl(timer, cupti, ga_mm, case, False)
        t_gw = time_impl(timer, cupti, gw_mm, case, False)
        print(f"M={m}: cuBLAS grad_attn {t_ga:.1f} us, grad_weight {t_gw:.1f} us, sum {t_ga + t_gw:.1f}", flush=True)
        base = config_for(m, (9, 0))
        variants = (replace(base, gw_bm=256, gw_bn=128), replace(base, ga_bm=256, ga_bn=128))
        for cfg in (base,) + (() if args.base_only else variants):
            cfg = replace(cfg, arch="hopper", bucket=m)
            fn = functools.partial(kmod.attn_output_proj_backward, config=cfg)
            try:
                ok, _ = check_case(case, device, cfg)
                full = time_impl(timer, cupti, fn, case, True)
                parts = []
                for kind in ("gw", "ga"):
                    saved = kmod.plan_schedule
                    kmod.plan_schedule = only(kind, None)
                    try:
                        parts.append(time_impl(timer, cupti, fn, case, True))
                    finally:
                        kmod.plan_schedule = saved
                print(
                    f"   {_short(cfg):<50} ok={ok} full {full:6.1f}  gw-only {parts[0]:6.1f} "
                    f"({parts[0] / t_gw:.3f}x)  ga-only {parts[1]:6.1f} ({parts[1] / t_ga:.3f}x)",
                    flush=True,
                )
            except Exception as exc:
                print(f"   {_short(cfg):<50} x {str(exc).splitlines()[0][:100]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
