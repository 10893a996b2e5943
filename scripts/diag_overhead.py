"""Where does host time go per call, and what does the GPU kernel alone take? (GPU diagnostic.)

Usage on a GPU host: PYTHONPATH=. python3 scripts/diag_overhead.py (scripts/gpu_kernel_session.sh diag)
For five shapes: the host time of the launcher's argument checks, of two cuBLAS matmuls and of the kernel's call
with host or device tensor descriptors or plain pointers, beside the GPU span (CUPTI); then a cProfile of 300
calls of the fast path for M=256.
"""

import argparse
import statistics
import time
from dataclasses import replace


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    return ap.parse_args(argv)


if __name__ == "__main__":  # --help answers before torch, Triton and the kernel load (5-8 s on a 2-core host)
    parse_args()

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from kernel import attn_output_proj_backward  # noqa: E402
from kernel.backward import _validate, kernel_config  # noqa: E402
from problem.reference import make_inputs, two_matmuls  # noqa: E402


def host_us(fn, n=200):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host


def gpu_span_us(fn, n=20):
    """Median first-kernel-start to last-kernel-end span per call, from CUPTI records."""
    fn()
    torch.cuda.synchronize()
    spans = []
    for _ in range(n):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        ks = [e for e in prof.events() if e.device_type.name == "CUDA"]
        if ks:
            spans.append(max(e.time_range.end for e in ks) - min(e.time_range.start for e in ks))
    return statistics.median(spans) if spans else float("nan")


def diag(b: int, s: int) -> None:
    go, x, w = make_inputs(b, s, "cuda")
    ga = torch.empty(b, 32, s, 64, dtype=torch.bfloat16, device="cuda")
    gw = torch.empty(2048, 2048, dtype=torch.bfloat16, device="cuda")
    base = kernel_config(b * s, go.device)
    val = host_us(lambda: _validate(go, x, w, (ga, gw)))
    cub_host = host_us(lambda: two_matmuls(go, x, w))
    cub_gpu = gpu_span_us(lambda: two_matmuls(go, x, w))
    print(f"M={b * s:<5} validate {val:5.1f} us host; two cuBLAS matmuls: host {cub_host:5.1f} GPU span {cub_gpu:6.1f}")
    for name, cfg in [
        ("host desc", base),
        ("device desc", replace(base, device_desc=True)),
        ("pointers", replace(base, use_tma=False)),
    ]:
        try:

            def call(cfg=cfg):
                return attn_output_proj_backward(go, x, w, out=(ga, gw), config=cfg)

            h = host_us(call)
            k = gpu_span_us(call)
            print(f"   {name:<12} host/call {h:6.1f} us   GPU span (CUPTI) {k:7.1f} us")
        except Exception as exc:
            print(f"   {name:<12} failed: {str(exc).splitlines()[0][:120]}")


def host_profile(b: int, s: int) -> None:
    """cProfile of 300 calls on the fast path: where the host time goes."""
    import cProfile
    import pstats

    go, x, w = make_inputs(b, s, "cuda")
    ga = torch.empty(b, 32, s, 64, dtype=torch.bfloat16, device="cuda")
    gw = torch.empty(2048, 2048, dtype=torch.bfloat16, device="cuda")
    attn_output_proj_backward(go, x, w, out=(ga, gw))
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        attn_output_proj_backward(go, x, w, out=(ga, gw))
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def main() -> None:
    for bs in [(1, 256), (4, 512), (8, 256), (2, 4096), (64, 128)]:
        diag(*bs)
    host_profile(1, 256)


if __name__ == "__main__":
    main()
