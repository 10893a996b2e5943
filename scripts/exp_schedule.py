"""Device experiment: time candidate configurations (schedules, tile shapes, splits) per M against cuBLAS.

Usage on a GPU host: PYTHONPATH=. python3 scripts/exp_schedule.py [--iters N] [--only 256,512]
Prints, per distinct M of the 16 cases, each candidate's median (CUPTI span, L2 flushed) and its ratio to the
two cuBLAS matmuls measured in the same run; a candidate that fails to compile or is wrong prints x.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import replace

import torch

from kernel.attn_output_proj_backward import attn_output_proj_backward
from kernel.bench import _short, _timer_and_protocols, check_case, time_impl
from kernel.configs import KernelConfig as K
from kernel.configs import config_for
from kernel.reference import two_matmuls
from kernel.workload import Case

W = dict(warp_specialize=True)
BIG = dict(num_warps=8, num_stages=3, **W)
P = dict(schedule="partitioned")
SH = dict(schedule="shared")
T = dict(ws_tiles=True)
NW = dict(warp_specialize=False)


def _variants(base: K, *extra: dict) -> list[K]:
    return [base] + [replace(base, **e) for e in extra]


CANDIDATES: dict[int, list[K]] = {
    m: _variants(config_for(m, (9, 0)), dict(ga_tma_store=False), {}, dict(ga_tma_store=False))
    for m in (256, 512, 1024, 2048, 4096, 8192)
}
CASE_OF = {256: "1,256", 512: "4,128", 1024: "4,256", 2048: "4,512", 4096: "4,1024", 8192: "8,1024"}


def label(cfg: K) -> str:
    return _short(cfg) + (" gatma" if cfg.ga_tma_store else "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    device = torch.device("cuda")
    timer, protocols = _timer_and_protocols(device, 5, args.iters)
    cupti = next(p for p in protocols if p.timer == "cupti")
    only = {int(v) for v in args.only.split(",") if v}
    cap = torch.cuda.get_device_capability(device)
    summary = []
    for m, cands in CANDIDATES.items():
        if only and m not in only:
            continue
        case = Case.parse(CASE_OF[m])
        cub = time_impl(timer, cupti, two_matmuls, case, False)
        table_cfg = config_for(m, cap)
        print(f"M={m} case {case.name}: cuBLAS {cub:.1f} us; table config {label(table_cfg)}", flush=True)
        best = None
        for cfg in cands:
            cfg = replace(cfg, arch="hopper", bucket=m)
            try:
                ok, why = check_case(case, device, cfg)
                if not ok:
                    raise RuntimeError(f"incorrect {why}")
                t = time_impl(timer, cupti, functools.partial(attn_output_proj_backward, config=cfg), case, True)
            except Exception as exc:
                print(f"   {label(cfg):<58} x {str(exc).splitlines()[0][:100] if str(exc) else type(exc).__name__}",
                      flush=True)
                continue
            print(f"   {label(cfg):<58} {t:7.1f} us  {t / cub:5.3f}x cuBLAS", flush=True)
            if best is None or t < best[0]:
                best = (t, cfg)
        if best:
            summary.append((m, cub, best[0], label(best[1])))
    print("\nSUMMARY  M  cuBLAS  best  ratio  config")
    for m, cub, t, lab in summary:
        print(f"SUMMARY {m:5} {cub:7.1f} {t:7.1f} {t / cub:6.3f}  {lab}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
