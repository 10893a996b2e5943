"""Device experiment: deeper software pipelines (more bytes in flight per SM) against the table, side by side.

Usage on a GPU host: PYTHONPATH=. python3 scripts/diag_stages.py [--apply] [--iters 20]
Per M: the two cuBLAS matmuls, the table's configuration and its stage variants (each checked once against the
reference with NaN-poisoned outputs), timed A/B/A/B (CUPTI span, L2 flushed, fresh inputs; the mean of two
medians per configuration). A variant wins its bucket when it beats the table by more than --margin. With
--apply the winners are written into kernel/configs.py's Hopper table (so that the tests and the bench that
follow in the same device call run the code that will be kept) and printed as the lines to keep.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import sys
from dataclasses import replace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--margin", type=float, default=0.015)
    ap.add_argument("--apply", action="store_true")
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch, Triton and the kernel load (5-8 s on a 2-core host)
    ARGS = parse_args()

import torch  # noqa: E402

from ci.harness.bench import _short, _timer_and_protocols, check_case, time_impl  # noqa: E402
from kernel.backward import attn_output_proj_backward  # noqa: E402
from kernel.configs import KernelConfig, config_for  # noqa: E402
from problem.reference import two_matmuls  # noqa: E402
from problem.workload import Case  # noqa: E402

# (bucket, case timed, variants of the table entry); shared memory checked with scripts/diag_compile.py
VARIANTS: tuple[tuple[int, Case, tuple[dict, ...]], ...] = (
    (256, Case(1, 256), ({"num_stages": 5}, {"num_stages": 6}, {"num_stages": 6, "tma_store": False})),
    (512, Case(4, 128), ({"num_stages": 5}, {"num_stages": 6, "tma_store": False})),
    (1024, Case(4, 256), ({"num_stages": 4, "tma_store": False, "ga_tma_store": False},)),
    (2048, Case(4, 512), ({"num_stages": 4, "tma_store": False, "ga_tma_store": False},)),
    (4096, Case(4, 1024), ({"num_stages": 4, "tma_store": False, "ga_tma_store": False},)),
)
_POSITIONAL = ("ga_bm", "ga_bn", "gw_bm", "gw_bn", "bk", "num_warps", "num_stages")
_H = {"warp_specialize": "tiles", "ga_tma_store": True}


def table_line(bucket: int, cfg: KernelConfig) -> str:
    """The kernel/configs.py line of the Hopper table for this configuration."""
    defaults = KernelConfig(0, 0, 0, 0)
    kw = {
        f.name: getattr(cfg, f.name)
        for f in dataclasses.fields(cfg)
        if f.name not in (*_POSITIONAL, "arch", "bucket") and getattr(cfg, f.name) != getattr(defaults, f.name)
    }
    use_h = all(kw.get(k) == v for k, v in _H.items())
    if use_h:
        for k in _H:
            kw.pop(k)
    args = [str(getattr(cfg, p)) for p in _POSITIONAL] + [
        f'{k}="{v}"' if isinstance(v, str) else f"{k}={v!r}" for k, v in kw.items()
    ]
    return f"    {bucket}: KernelConfig({', '.join(args)}{', **_H' if use_h else ''}),"


def apply(winners: dict[int, KernelConfig], path: str = "kernel/configs.py") -> None:
    text = open(path).read()
    for bucket, cfg in winners.items():
        text, n = re.subn(rf"^    {bucket}: KernelConfig\(.*\),$", table_line(bucket, cfg), text, count=1, flags=re.M)
        if n != 1:
            raise RuntimeError(f"no table line for bucket {bucket} in {path}")
    with open(path, "w") as fh:
        fh.write(text)


def main(args: argparse.Namespace) -> int:
    device = torch.device("cuda")
    timer, protocols = _timer_and_protocols(device, 5, args.iters)
    cupti = next(p for p in protocols if p.timer == "cupti")
    winners: dict[int, KernelConfig] = {}
    summary = []
    for bucket, case, variants in VARIANTS:
        cub = time_impl(timer, cupti, two_matmuls, case, False)
        base = replace(config_for(bucket, (9, 0)), arch="hopper", bucket=bucket)
        cands = [base] + [replace(base, **v) for v in variants]
        times: dict[int, list[float]] = {i: [] for i in range(len(cands))}
        ok = {}
        for i, cfg in enumerate(cands):
            try:
                ok[i], _ = check_case(case, device, cfg)
            except Exception as exc:  # a variant that does not compile or fit is reported, not fatal
                ok[i] = False
                print(f"  M<={bucket} {_short(cfg)} x {str(exc).splitlines()[0][:100]}", flush=True)
        for _ in range(2):  # A/B/A/B: the two medians of each configuration are averaged
            for i, cfg in enumerate(cands):
                if ok[i]:
                    fn = functools.partial(attn_output_proj_backward, config=cfg)
                    times[i].append(time_impl(timer, cupti, fn, case, True))
        means = {i: sum(t) / len(t) for i, t in times.items() if t}
        print(f"M<={bucket} {case.name}: two cuBLAS matmuls {cub:.1f} us", flush=True)
        for i, cfg in enumerate(cands):
            if i in means:
                tag = "table" if i == 0 else "     "
                runs = " ".join(f"{t:.1f}" for t in times[i])
                print(f"   {tag} {_short(cfg):<62} {runs}  mean {means[i]:.1f} us {means[i] / cub:.3f}x cuBLAS")
        best = min(means, key=means.get) if 0 in means else None
        if best not in (None, 0) and means[best] < means[0] * (1 - args.margin):
            winners[bucket] = cands[best]
            summary.append(f"M<={bucket}: {_short(cands[best])} {means[best]:.1f} vs table {means[0]:.1f} us: WINS")
        else:
            summary.append(f"M<={bucket}: table kept ({means.get(0, float('nan')):.1f} us)")
    print("\n" + "\n".join("SUMMARY " + s for s in summary))
    if args.apply and winners:
        apply(winners)
        print("applied to kernel/configs.py:")
        for bucket, cfg in winners.items():
            print(table_line(bucket, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
