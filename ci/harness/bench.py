"""Benchmark of the fused kernel against PyTorch eager and the two cuBLAS matmuls, on a GPU.

``solci bench`` (or ``python -m ci.cli bench``): per case, the kernel, eager (two matmuls + transpose copy),
the two cuBLAS matmuls alone, T_SOL for the detected GPU and the SOL score (T_b = eager of the same run),
with geometric means. Timing: the protocols of ``solci measure`` (ci.harness.timing):
fresh input copies and zeroed outputs per iteration, a cold L2, warm-up then the median of the timed runs, under
both the CUPTI span (the benchmark's own rule) and CUDA events (with the host let run ahead).
``--sweep`` times candidate configurations per M bucket and prints the fastest (used to fill kernel/configs.py).
The kernel is called in this process (as ``solci measure --direct``): a developer's own figures, printed, never
stored as a CI result (docs/replay.md).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from ci.harness.timing import Protocol, Timer, make_protocols
from kernel.backward import attn_output_proj_backward, kernel_config
from kernel.configs import M_BUCKETS, KernelConfig, bucket_for, config_for
from problem.correctness import check_rounds
from problem.reference import (
    attn_output_proj_backward_eager,
    timing_sets,
    two_matmuls,
)
from problem.workload import (
    CASES,
    Case,
    geomean,
    gpu_model,
    sol_score,
    t_sol_us,
)

Impl = Callable[..., object]


def _timer_and_protocols(device: torch.device, warmup: int, iters: int) -> tuple[Timer, list[Protocol]]:
    """The measurement protocols of ``solci measure`` (ci.harness.timing): CUDA events and the CUPTI span."""
    props = torch.cuda.get_device_properties(device)
    timer = Timer(device, l2_bytes=props.L2_cache_size)
    return timer, make_protocols("gpu", rounds=1, warmup=warmup, iters=iters)


def time_impl(timer: Timer, protocol: Protocol, fn: Impl, case: Case, with_out: bool) -> float:
    """Median microseconds of ``fn`` on fresh input copies (and zeroed outputs) per iteration, cold L2: the
    harness's input-set maker (problem.reference.timing_sets) and timer."""
    make = timing_sets(case.batch_size, case.seq_len, timer.device, seed=0)
    return statistics.median(timer.run(protocol, fn, lambda: make(with_out)).samples_us)


def check_case(case: Case, device: torch.device, config: KernelConfig | None = None) -> tuple[bool, str]:
    """One round of the harness's correctness loop (problem.correctness.check_rounds); (ok, summary)."""
    kern = functools.partial(attn_output_proj_backward, config=config)
    res = check_rounds(kern, case.batch_size, case.seq_len, device, rounds=1)
    ga, gw = res.outputs.get("grad_attn_output", {}), res.outputs.get("grad_weight", {})
    summary = (
        f"ga {ga.get('match_fraction', 0):.4f}/{ga.get('max_abs_err', 0):.2e} "
        f"gw {gw.get('match_fraction', 0):.4f}/{gw.get('max_abs_err', 0):.2e}"
    )
    return res.ok, summary if res.ok else f"{summary} ({res.reason})"


def bench_cases(
    cases: Sequence[Case], warmup: int, iters: int, configs: dict[int, KernelConfig] | None = None
) -> list[dict]:
    device = torch.device("cuda")
    model = gpu_model(torch.cuda.get_device_name(device))
    timer, protocols = _timer_and_protocols(device, warmup, iters)
    rows = []
    for i, case in enumerate(cases, 1):
        print(f"bench: case {i}/{len(cases)} {case.name} (M={case.m})", file=sys.stderr, flush=True)
        cfg = (configs or {}).get(bucket_for(case.m))
        kern = functools.partial(attn_output_proj_backward, config=cfg)
        impls = (
            ("kernel", kern, True),
            ("eager", attn_output_proj_backward_eager, False),
            ("cublas", two_matmuls, False),
        )
        ok, summary = check_case(case, device, cfg)
        row: dict = {"case": case.name, "m": case.m, "correct": ok, "check": summary}
        for protocol in protocols:
            for name, fn, with_out in impls:
                row[f"{name}_{protocol.timer}_us"] = time_impl(timer, protocol, fn, case, with_out)
        k, e = row["kernel_cupti_us"], row["eager_cupti_us"]
        tsol = t_sol_us(case.m, model)
        row.update(
            t_sol_us=tsol,
            score=sol_score(k, tsol, e) if ok else 0.0,
            config=(cfg or kernel_config(case.m, device)).as_dict(),
        )
        rows.append(row)
    return rows


def print_table(rows: list[dict], gpu: str) -> None:
    print(f"\nGPU: {gpu}. Medians (us), L2 flushed, fresh inputs per iteration (ci.harness.timing protocols).")
    print(
        "CUPTI = first-kernel-start to last-kernel-end span (the benchmark's rule); events = CUDA events, host ahead."
    )
    hdr = (
        f"{'case':<10}{'M':>6}{'ok':>3} | {'kernel':>7}{'eager':>7}{'cuBLAS':>7}{'k/cuB':>6}{'k/eag':>6} |"
        f" {'kernel':>7}{'eager':>7}{'cuBLAS':>7}{'k/cuB':>6} | {'T_SOL':>6}{'score':>6}"
    )
    print(f"{'':<19} | {'CUPTI span':^33} | {'CUDA events':^27} |")
    print(hdr)

    def line(label: str, m: str, ok: str, v: dict) -> str:
        kc, ec, cc = v["kernel_cupti_us"], v["eager_cupti_us"], v["cublas_cupti_us"]
        ke, ee, ce = v["kernel_cuda_events_us"], v["eager_cuda_events_us"], v["cublas_cuda_events_us"]
        tsol = f"{v['t_sol_us']:.1f}" if v.get("t_sol_us") else "-"
        score = f"{v['score']:.3f}" if v.get("score") is not None else "-"
        return (
            f"{label:<10}{m:>6}{ok:>3} | {kc:>7.1f}{ec:>7.1f}{cc:>7.1f}{kc / cc:>6.2f}{kc / ec:>6.2f} |"
            f" {ke:>7.1f}{ee:>7.1f}{ce:>7.1f}{ke / ce:>6.2f} | {tsol:>6}{score:>6}"
        )

    for r in rows:
        print(line(r["case"], str(r["m"]), "y" if r["correct"] else "N", r))
    keys = [k for k in rows[0] if k.endswith("_us") and k != "t_sol_us"]
    geo = {k: geomean([r[k] for r in rows]) for k in keys}
    geo["t_sol_us"] = geomean([r["t_sol_us"] for r in rows]) if all(r["t_sol_us"] for r in rows) else None
    scores = [r["score"] for r in rows if r["score"] is not None]
    geo["score"] = sum(scores) / len(scores) if scores else None
    print(line("geomean", "", "", geo) + "   (score: mean over cases)")


def sweep_candidates() -> dict[int, list[KernelConfig]]:
    """Candidate configurations per M bucket (what --sweep times): the Hopper table's entry, then variants of it
    (schedule, warp specialisation, pipeline depth) and of its tile shapes."""
    variants: tuple[dict, ...] = (
        {},
        {"schedule": "shared"},
        {"schedule": "partitioned"},
        {"warp_specialize": "k_loop"},
        {"warp_specialize": "none"},
        {"ga_tma_store": False},
        {"trim": False},
        {"num_stages": 4, "tma_store": False},
        {"group": 4},
        {"group": 8},
        {"group": 16},
    )
    tiles: dict[int, tuple[dict, ...]] = {
        256: (
            {"ga_bm": 64, "ga_bn": 64},
            {"gw_bn": 256, "num_warps": 8, "num_stages": 3},
            {"bk": 128, "num_stages": 3},
            {"ga_bm": 128, "ga_bn": 64},
        ),
        512: (
            {"ga_bm": 64},
            {"gw_bn": 256, "num_warps": 8, "num_stages": 3},
            {"bk": 128, "num_stages": 3},
            {"num_warps": 8, "num_stages": 3},
        ),
        1024: ({"ga_bn": 128, "gw_bn": 128, "num_warps": 4, "num_stages": 4},),
        2048: ({"ga_bm": 256, "ga_bn": 128},),
        4096: ({"ga_bm": 256, "ga_bn": 128}, {"bk": 128, "num_stages": 2}),
        8192: ({"ga_bm": 256, "ga_bn": 128}, {"bk": 128, "num_stages": 2}),
    }
    out: dict[int, list[KernelConfig]] = {}
    for bucket in M_BUCKETS:
        base = config_for(bucket, (9, 0))
        cands = [replace(base, **v) for v in variants + tiles[bucket]]
        out[bucket] = list(dict.fromkeys(cands))  # distinct, in order
    return out


def _short(cfg: KernelConfig) -> str:
    ws = {"none": "", "k_loop": " ws-k", "tiles": " ws-tiles"}.get(cfg.warp_specialize, f" ws-{cfg.warp_specialize}")
    extra = "".join(
        [
            "" if cfg.schedule == "auto" else f" {cfg.schedule}",
            "" if cfg.tma_store else " ptrstore",
            " ga-tma" if cfg.ga_tma_store else "",
            "" if cfg.trim else " untrimmed",
            ws,
        ]
    )
    return (
        f"{cfg.ga_bm}x{cfg.ga_bn}|{cfg.gw_bm}x{cfg.gw_bn} k{cfg.bk} w{cfg.num_warps} s{cfg.num_stages} "
        f"g{cfg.group}{extra}"
    )


def sweep(cases: Sequence[Case], warmup: int, iters: int, save: str | None = None) -> None:
    """Time each candidate on one case per distinct M of each bucket; print (and save) the fastest per bucket."""
    device = torch.device("cuda")
    timer, protocols = _timer_and_protocols(device, warmup, iters)
    cupti = next(p for p in protocols if p.timer == "cupti")
    cands = sweep_candidates()
    best_by_bucket: dict[int, dict] = {}
    print(
        "\nsweep (kernel median us per case, CUPTI span, L2 flushed; the ratio is to the two cuBLAS matmuls timed "
        "in the same run; x = failed to compile or incorrect)"
    )
    for bucket in M_BUCKETS:
        distinct = {c.m: c for c in cases if bucket_for(c.m) == bucket}
        bcases = list(distinct.values())
        if not bcases:
            continue
        cublas = geomean([time_impl(timer, cupti, two_matmuls, case, False) for case in bcases])
        print(f"  M<={bucket:<5} {'two cuBLAS matmuls':<60} {cublas:.1f}", flush=True)
        results = []
        for cfg in cands[bucket]:
            cfg = replace(cfg, arch="hopper", bucket=bucket)
            times = []
            try:
                for case in bcases:
                    ok, summary = check_case(case, device, cfg)
                    if not ok:
                        raise RuntimeError(f"incorrect: {summary}")
                    fn = functools.partial(attn_output_proj_backward, config=cfg)
                    times.append(time_impl(timer, cupti, fn, case, True))
                g = geomean(times)
                results.append((g, cfg))
                print(
                    f"  M<={bucket:<5} {_short(cfg):<60} {' '.join(f'{t:.1f}' for t in times)}"
                    f"  {g / cublas:.3f}x cuBLAS",
                    flush=True,
                )
            except Exception as exc:  # a candidate that does not compile or fit is reported, not fatal
                msg = str(exc).splitlines()[0][:90] if str(exc) else type(exc).__name__
                print(f"  M<={bucket:<5} {_short(cfg):<60} x {msg}", flush=True)
        if results:
            g, cfg = min(results, key=lambda r: r[0])
            best_by_bucket[bucket] = cfg.as_dict()
            print(f"BEST M<={bucket}: {_short(cfg)}  geo {g:.1f} us, {g / cublas:.3f}x cuBLAS", flush=True)
    if save:
        with open(save, "w") as fh:
            json.dump(best_by_bucket, fh, indent=1)


def load_configs(path: str) -> dict[int, KernelConfig]:
    """Configurations per M bucket from a --sweep --save file (to time them before they enter configs.py).
    ValueError with the file and the reason when it cannot be read as one."""
    try:
        with open(path) as fh:
            raw = json.load(fh)
        configs = {int(b): KernelConfig(**d) for b, d in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"--configs {path}: not a file of configurations from `solci bench --sweep --save` "
            f"({type(exc).__name__}: {exc})"
        ) from None
    unknown = sorted(set(configs) - set(M_BUCKETS))
    if unknown:
        raise ValueError(f"--configs {path}: {unknown} are not M buckets (those are {list(M_BUCKETS)})")
    return configs


def parse_cases(values: Sequence[str] | None) -> list[Case]:
    if not values or values == ["all"]:
        return list(CASES)
    return [Case.parse(v) for v in values]


def run(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("solci bench: needs a CUDA GPU (use `solci measure` for the CPU interpreter)", file=sys.stderr)
        return 2
    try:
        cases = parse_cases(args.cases)
        configs = load_configs(args.configs) if args.configs else None
    except ValueError as exc:
        print(f"solci bench: {exc}", file=sys.stderr)
        return 2
    if args.sweep:
        sweep(cases, args.warmup, args.iters, args.save)
        return 0
    rows = bench_cases(cases, args.warmup, args.iters, configs)
    print_table(rows, torch.cuda.get_device_name())
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=[k for k in rows[0] if k != "config"], extrasaction="ignore")
            writer.writeheader()
            for r in rows:
                writer.writerow({k: v for k, v in r.items() if k != "config"})
    return 0 if all(r["correct"] for r in rows) else 1
