"""The workload: one place for the 16 cases, the tolerances, the SOL model and the published figures.

Every other module imports these facts from here. Source: ``../shared/PROBLEM.md`` (SOL-ExecBench problem
``004_attention_output_projection_with_reshape_backward``, evaluation stack v1.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NUM_HEADS = 32
HEAD_DIM = 64
HIDDEN = NUM_HEADS * HEAD_DIM  # 2048
BYTES_PER_ELEMENT = 2  # bf16


@dataclass(frozen=True, order=True)
class Case:
    batch_size: int
    seq_len: int

    @property
    def m(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def name(self) -> str:
        return f"B{self.batch_size}_S{self.seq_len}"

    @classmethod
    def parse(cls, text: str) -> Case:
        """Parse ``"B,S"``, ``"BxS"`` or ``"B4_S128"`` into a case; ValueError on anything else."""
        t = text.strip().upper().replace("B", "").replace("S", "")
        for sep in (",", "X", "_"):
            if sep in t:
                parts = t.split(sep)
                break
        else:
            raise ValueError(f"case {text!r}: expected 'B,S' (e.g. '4,128')")
        try:
            b, s = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"case {text!r}: expected two integers 'B,S' (e.g. '4,128')") from None
        if b < 1 or s < 1:
            raise ValueError(f"case {text!r}: batch_size and seq_len must be >= 1")
        return cls(b, s)


# The benchmark's 16 workload cases, in its order.
CASES: tuple[Case, ...] = tuple(
    Case(b, s)
    for b, s in [
        (1, 256),
        (1, 1024),
        (2, 1024),
        (2, 4096),
        (4, 128),
        (4, 256),
        (4, 512),
        (4, 1024),
        (8, 128),
        (8, 256),
        (8, 1024),
        (16, 128),
        (16, 256),
        (32, 128),
        (32, 256),
        (64, 128),
    ]
)

# Small cases for runs without a GPU (Triton's interpreter): S deliberately not a multiple of any block.
SMOKE_CASES: tuple[Case, ...] = (Case(1, 7), Case(2, 50), Case(1, 130))

# ---------------------------------------------------------------------------------------------- correctness
RTOL = 0.05
MATCH_FRACTION = 0.99  # at least this fraction of elements must match
CORRECTNESS_ROUNDS = 10
# atol by M = B*S, as the benchmark sets it.
ATOL_BY_M: dict[int, float] = {256: 1e-5, 512: 2.6e-5, 1024: 1.2e-4, 2048: 3.2e-4, 4096: 7.7e-4, 8192: 3.2e-3}


def atol_for(m: int) -> float:
    """The benchmark's atol for M; for an M it does not list, that of the largest listed M <= m (stricter)."""
    if m < 1:
        raise ValueError(f"M must be >= 1, got {m}")
    listed = [k for k in sorted(ATOL_BY_M) if k <= m]
    return ATOL_BY_M[listed[-1]] if listed else ATOL_BY_M[min(ATOL_BY_M)]


# ---------------------------------------------------------------------------------------------- timing
WARMUP_ITERS = 10
TIMED_ITERS = 50


# ---------------------------------------------------------------------------------------------- SOL model
def flops(m: int) -> int:
    """Two GEMMs of 2*M*2048*2048 each."""
    return 2 * 2 * m * HIDDEN * HIDDEN


def bytes_moved(m: int) -> int:
    """Inputs and outputs once: grad_output, reshaped, grad_attn_output (M x 2048) and weight, grad_weight."""
    return BYTES_PER_ELEMENT * (3 * m * HIDDEN + 2 * HIDDEN * HIDDEN)


@dataclass(frozen=True)
class GpuPeak:
    model: str  # short model name used as the hardware label's family, e.g. "H200"
    tensor_flops: float  # dense bf16 FLOP/s
    dram_bytes_per_s: float
    source: str


# Peak rates. B200 as the benchmark's model has it; Hopper parts from the vendor's datasheet.
# The hardware label of runs under Triton's CPU interpreter: a functional check, never a GPU figure.
CPU_LABEL = "cpu-interpreter"

GPU_PEAKS: dict[str, GpuPeak] = {
    "B200": GpuPeak("B200", 1.811e15, 7.67e12, "SOL-ExecBench model, clocks locked at 1.5 GHz"),
    "H100": GpuPeak("H100", 989e12, 3.35e12, "NVIDIA H100 SXM datasheet (dense bf16)"),
    "H200": GpuPeak("H200", 989e12, 4.8e12, "NVIDIA H200 SXM datasheet (dense bf16)"),
}


def gpu_model(device_name: str) -> str | None:
    """Map a device name (``torch.cuda.get_device_name``) to a key of GPU_PEAKS, or None when unknown.

    Parts whose peaks differ from the table's (H100 PCIe / NVL) are unknown rather than guessed.
    """
    name = device_name.upper()
    if "H100" in name and ("PCIE" in name or "NVL" in name):
        return None
    for key in GPU_PEAKS:
        if key in name:
            return key
    return None


def t_sol_us(m: int, model: str | None) -> float | None:
    """T_SOL in microseconds = max(FLOPs / tensor rate, bytes / bandwidth); None for an unknown GPU."""
    if model is None or model not in GPU_PEAKS:
        return None
    peak = GPU_PEAKS[model]
    return max(flops(m) / peak.tensor_flops, bytes_moved(m) / peak.dram_bytes_per_s) * 1e6


def floors_us(m: int, model: str) -> tuple[float, float]:
    """The two floors separately, (compute, memory), in microseconds."""
    peak = GPU_PEAKS[model]
    return flops(m) / peak.tensor_flops * 1e6, bytes_moved(m) / peak.dram_bytes_per_s * 1e6


def sol_score(t_kernel_us: float | None, t_sol: float | None, t_baseline_us: float | None) -> float | None:
    """S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)), clamped to [0, 1]; None when not defined.

    The baseline scores 0.5 and T_SOL scores 1.0. A failed correctness check scores 0 (the caller passes 0).
    """
    if t_kernel_us is None or t_sol is None or t_baseline_us is None:
        return None
    if t_baseline_us <= t_sol or t_kernel_us <= 0:
        return None
    s = 1.0 / (1.0 + (t_kernel_us - t_sol) / (t_baseline_us - t_sol))
    return min(1.0, max(0.0, s))


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None]
    if not vals or any(v <= 0 for v in vals):
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


# ---------------------------------------------------------------------------------------------- published
# Published B200 figures per M (us), evaluation stack v1.1.
B200_T_SOL_US: dict[int, float] = {256: 3.0, 512: 5.1, 1024: 9.9, 2048: 19.4, 4096: 38.3, 8192: 76.3}
B200_BASELINE_US: dict[int, float] = {256: 24.4, 512: 30.3, 1024: 39.0, 2048: 59.6, 4096: 99.5, 8192: 173.5}
B200_SUITE_SOL_US = 22.4
B200_SUITE_BASELINE_US = 71.8

LEADERBOARD_SOURCE = (
    "SOL-ExecBench leaderboard, problem 004_attention_output_projection_with_reshape_backward "
    "(KernelIndex page, evaluation stack v1.1)"
)


@dataclass(frozen=True)
class Record:
    rank: int
    implementation: str
    latency_us: float  # geometric mean over the 16 cases
    pct_sol: float  # the page's "% of SOL" (the mean score x 100)
    observed: str  # ISO date
    gpu_model: str = "B200"


B200_RECORDS: tuple[Record, ...] = tuple(
    Record(*row)
    for row in [
        (1, "RIAC as well", 39.4, 75, "2026-08-10"),
        (2, "Amir M. Mir / SF Tensor", 42.1, 73, "2026-08-15"),
        (3, "OpenKernels-Ruibo", 43.0, 73, "2026-07-12"),
        (4, "Geometric", 44.5, 70, "2026-08-16"),
        (5, "Hyra", 44.6, 70, "2026-07-14"),
        (7, "Recursive", 45.8, 69, "2026-07-10"),
        (8, "ac4k", 46.5, 68, "2026-07-10"),
        (14, "Databricks", 49.7, 66, "2026-07-10"),
        (23, "TileGym (TH3CHARLie)", 56.6, 60, "2026-07-15"),
        (27, "Cursor", 61.5, 56, "2026-07-10"),
        (28, "Runic Kingfisher", 98.6, 39, "2026-08-02"),
    ]
)
