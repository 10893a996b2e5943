"""Kernel configurations per GPU architecture, keyed by an M bucket so a new M does not trigger recompiles.

The tile shapes, warps and stages are compile-time constants of the kernel; M itself is a run-time argument.
So every M that falls in one bucket reuses one compiled kernel, and there are at most ``len(M_BUCKETS)``
compiles per architecture.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace

WARP_SPECIALIZE = ("none", "k_loop", "tiles")

# Upper edges of the M buckets: an M goes to the first bucket whose edge is >= M (the last takes the rest).
M_BUCKETS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration of the fused kernel.

    ga_*: tile of grad_attn_output = grad_output @ weight (rows of M x columns of 2048, K = 2048).
    gw_*: tile of grad_weight = grad_output.T @ reshaped (2048 x 2048, reduced over M).
    """

    ga_bm: int
    ga_bn: int
    gw_bm: int
    gw_bn: int
    bk: int = 64
    num_warps: int = 8
    num_stages: int = 3
    group: int = 8  # grouped (swizzled) tile order for L2 reuse
    occupancy: int = 1  # persistent programs per SM
    use_tma: bool = True
    device_desc: bool = False  # build the TMA descriptors inside the kernel (less host work per launch)
    schedule: str = "auto"  # shared | partitioned | auto (kernel/schedule.py's cost model picks per M)
    trim: bool = True  # launch the fewest programs that keep the schedule's modelled makespan
    tma_store: bool = True  # grad_weight tiles stored through TMA (else plain stores, saving shared memory)
    ga_tma_store: bool = False  # grad_attn tiles stored through TMA when S is a multiple of ga_bm
    # Triton's automatic warp specialisation (loads and MMA in different warps): "none", "k_loop" (the K loops)
    # or "tiles" (the loops over tiles, so the next tile's loads also overlap the epilogue).
    warp_specialize: str = "none"
    arch: str = "hopper"
    bucket: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def bucket_for(m: int) -> int:
    if m < 1:
        raise ValueError(f"M must be >= 1, got {m}")
    for edge in M_BUCKETS:
        if m <= edge:
            return edge
    return M_BUCKETS[-1]


# Hopper (H100/H200, sm_90): measured on the H200, see kernel/NOTES.md.
_H = {"warp_specialize": "tiles", "ga_tma_store": True}
_HOPPER: dict[int, KernelConfig] = {
    256: KernelConfig(64, 128, 128, 256, 64, 8, 4, group=4, tma_store=False, **_H),
    512: KernelConfig(128, 128, 128, 256, 64, 8, 4, group=4, tma_store=False, **_H),
    1024: KernelConfig(128, 256, 128, 256, 64, 8, 3, **_H),
    2048: KernelConfig(128, 256, 128, 256, 64, 8, 3, **_H),
    4096: KernelConfig(128, 256, 128, 256, 64, 8, 3, group=4, tma_store=False, **_H),
    8192: KernelConfig(128, 256, 128, 256, 64, 8, 3, group=4, tma_store=False, **_H),
}
# Blackwell (sm_100): UNTESTED, never run on a Blackwell GPU. Its own table, so that tuning there cannot move the
# Hopper entries; it starts as a copy of them (TMA and these tile shapes exist there too). kernel/NOTES.md says
# what to tune first (tcgen05 tiles of 256 rows over 2-CTA pairs, deeper pipelines, then the small-M partition).
_BLACKWELL: dict[int, KernelConfig] = dict(_HOPPER)
# Anything else with CUDA (Ampere and older): pointer loads, modest tiles that fit 100 KB of shared memory.
_GENERIC = KernelConfig(64, 128, 64, 128, 32, 4, 2, use_tma=False)
# Triton's interpreter (CPU): small tiles keep numpy's work small; TMA descriptors work there.
_INTERPRETER = KernelConfig(64, 128, 64, 128, 64, 4, 1)


def interpreter_active() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def arch_of(device_capability: tuple[int, int] | None) -> str:
    if device_capability is None:
        return "interpreter"
    major = device_capability[0]
    if major == 9:
        return "hopper"
    if major == 10:
        return "blackwell"
    return "generic"


def config_for(m: int, device_capability: tuple[int, int] | None) -> KernelConfig:
    """The configuration for M on a device of this compute capability (None: the interpreter)."""
    bucket = bucket_for(m)
    arch = arch_of(device_capability)
    if arch == "interpreter":
        return replace(_INTERPRETER, arch=arch, bucket=bucket)
    if arch == "generic":
        return replace(_GENERIC, arch=arch, bucket=bucket)
    table = _HOPPER if arch == "hopper" else _BLACKWELL
    return replace(table[bucket], arch=arch, bucket=bucket)
