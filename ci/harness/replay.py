"""Replaying a plan: the recorded launches run from the harness's own process, pinned to one Triton version.

``Replay(plan, device)`` loads each kernel's binary with the pinned Triton's loader
(``driver.active.utils.load_binary``) and builds its launcher with the pinned Triton's own launcher class
(``CudaLauncher``: the C launcher it generates from the signature, which ``ci.harness.plan`` has checked against
a closed vocabulary). The object is called like a kernel, ``replay(grad_output, reshaped, weight, out=(ga, gw))``,
so the harness's correctness rounds and timers run it exactly as they ran a kernel: every pointer and tensor
descriptor is rebuilt from the call's own buffers (and the plan's scratch, allocated here), and the launches go
to the current stream in the recorded order. No code of the commit is imported or run here: only its binaries,
on the GPU. ``tests/harness/test_plan.py`` checks the launcher this makes against the one Triton makes for the
same compiled kernel; ``tests/harness/test_replay_gpu.py`` compares the replayed outputs with the kernel's own,
bit for bit.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import triton

from ci.harness.plan import Arg, Limits, Plan, RefusedPlan

PINNED_TRITON = "3.6.0"
SCRATCH_FILL = 0xFF  # scratch starts as NaN-like garbage: a kernel must write what it reads


class _Pointer:
    """What Triton's launcher reads of a pointer-like object (``data_ptr()``)."""

    __slots__ = ("addr",)

    def __init__(self, addr: int) -> None:
        self.addr = addr

    def data_ptr(self) -> int:
        return self.addr


class _Descriptor:
    """What Triton's launcher reads of a host tensor descriptor (``make_tensordesc_arg`` in the pinned Triton's
    ``backends/nvidia/driver.py``): base, shape, strides, padding."""

    __slots__ = ("base", "padding", "shape", "strides")

    def __init__(self, base: _Pointer, shape: list[int], strides: list[int], padding: str) -> None:
        self.base = base
        self.shape = shape
        self.strides = strides
        self.padding = padding


def device_limits(device: torch.device) -> Limits:
    """The device's limits the plan is validated against."""
    from triton.runtime import driver

    index = device.index if device.index is not None else torch.cuda.current_device()
    props = driver.active.utils.get_device_properties(index)
    major, minor = torch.cuda.get_device_capability(index)
    return Limits(arch=major * 10 + minor, max_shared=int(props["max_shared_mem"]))


def launcher_source(kernel: Any) -> SimpleNamespace:
    """The ``src`` Triton's launcher class reads (``signature``, ``constants``) for a plan's kernel."""
    return SimpleNamespace(signature=dict(kernel.signature), constants={})


def launcher_metadata(kernel: Any) -> SimpleNamespace:
    """The metadata fields Triton's launcher class reads, from a plan's (validated) kernel."""
    return SimpleNamespace(
        num_ctas=kernel.num_ctas,
        tensordesc_meta=None if kernel.tensordesc_meta is None else [dict(m) for m in kernel.tensordesc_meta],
        global_scratch_size=kernel.global_scratch_size,
        global_scratch_align=kernel.global_scratch_align,
        profile_scratch_size=kernel.profile_scratch_size,
        profile_scratch_align=kernel.profile_scratch_align,
        launch_cooperative_grid=kernel.launch_cooperative_grid,
        launch_pdl=kernel.launch_pdl,
    )


class Replay:
    """A validated plan, callable like the kernel it was recorded from."""

    def __init__(self, plan: Plan, device: torch.device) -> None:
        if triton.__version__ != PINNED_TRITON:
            raise RefusedPlan(f"the replay is pinned to Triton {PINNED_TRITON}; this is {triton.__version__}")
        from triton.backends.nvidia.driver import CudaLauncher
        from triton.runtime import driver

        self.plan = plan
        self.device = device
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.kernels = []
        with torch.cuda.device(index):
            for k in plan.kernels:
                launcher = CudaLauncher(launcher_source(k), launcher_metadata(k))
                _module, function, _regs, _spills, max_threads = driver.active.utils.load_binary(
                    k.name, k.binary, k.shared, index
                )
                if k.num_warps * 32 > max_threads:
                    raise RefusedPlan(f"kernel {k.name}: {k.num_warps} warps; the binary allows {max_threads} threads")
                self.kernels.append((launcher, function, (k.num_warps, k.num_ctas, k.shared)))
        self.scratch = [torch.full((n,), SCRATCH_FILL, dtype=torch.uint8, device=device) for n in plan.scratch]
        if any(k.global_scratch_size for k in plan.kernels):
            triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=device))
        torch.cuda.synchronize(device)

    def _arg(self, a: Arg, bases: dict[tuple[str, int], int]) -> Any:
        if a.kind == "ptr":
            return bases[(a.role, a.index)] + a.offset  # type: ignore[index]
        if a.kind == "desc":
            base = _Pointer(bases[(a.role, a.index)] + a.offset)  # type: ignore[index]
            return _Descriptor(base, list(a.shape or ()), list(a.strides or ()), a.padding or "zero")
        if a.kind == "scalar":
            return a.value
        return None  # null pointers; constexprs (the launcher skips them)

    def __call__(
        self,
        grad_output: torch.Tensor,
        reshaped: torch.Tensor,
        weight: torch.Tensor,
        *,
        out: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        bases = {
            ("input", 0): grad_output.data_ptr(),
            ("input", 1): reshaped.data_ptr(),
            ("input", 2): weight.data_ptr(),
            ("output", 0): out[0].data_ptr(),
            ("output", 1): out[1].data_ptr(),
        }
        for i, buf in enumerate(self.scratch):
            bases[("scratch", i)] = buf.data_ptr()
        stream = torch.cuda.current_stream(self.device).cuda_stream
        for ln in self.plan.launches:
            launcher, function, packed = self.kernels[ln.kernel]
            args = [self._arg(a, bases) for a in ln.args]
            launcher(ln.grid[0], ln.grid[1], ln.grid[2], stream, function, packed, None, None, None, *args)
        return out
