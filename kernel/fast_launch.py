"""A private fast launch of an already compiled Triton kernel, pinned to one Triton version.

Triton's JIT dispatcher (``kernel[grid](...)``) re-derives the specialisation key from every argument on every
call, which costs tens of microseconds of host time: as much as the kernel itself at small M. After the first
launch of a configuration has compiled it through the dispatcher, this module calls the compiled kernel's
launcher directly with the arguments in the order the pinned Triton's own runner passes them
(``CompiledKernel.__getitem__`` in ``triton/compiler/compiler.py``)::

    compiled.run(gridX, gridY, gridZ, stream, compiled.function, compiled.packed_metadata,
                 launch_metadata, launch_enter_hook, launch_exit_hook, *kernel_arguments)

Host tensor descriptors are passed as ``LightDesc``: the four fields the launcher reads of a
``TensorDescriptor`` (``base``, ``shape``, ``strides``, ``padding``: ``make_tensordesc_arg`` in
``triton/backends/nvidia/driver.py``), without its validation.

The protocol is private to Triton, so the fast path runs only on ``PINNED_TRITON`` (the version in
``constraints.txt``); on any other version every launch goes through the dispatcher. A registered launch hook (a
profiler, say) also sends every launch through the dispatcher, so the hook sees it.
``tests/kernel/test_fast_launch.py`` checks the call against the pinned Triton's own runner and launcher on the CPU;
the GPU tests run the kernel through both paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import triton

PINNED_TRITON = "3.6.0"
ENABLED = triton.__version__ == PINNED_TRITON

# Compiled kernels by key (device, configuration, constexprs), remembered after their first launch.
_COMPILED: dict[tuple, Any] = {}


class LightDesc:
    """What the launcher reads from a host tensor descriptor, made cheaply: used only after the kernel was
    compiled with real ``TensorDescriptor`` arguments of the same block shapes."""

    __slots__ = ("base", "padding", "shape", "strides")

    def __init__(self, base: Any, shape: list[int], strides: list[int]) -> None:
        self.base = base
        self.shape = shape
        self.strides = strides
        self.padding = "zero"


def _hook_active(hook: object) -> bool:
    return hook is not None and bool(getattr(hook, "calls", True))


def hooks_active() -> bool:
    """Whether someone registered a launch hook (then every launch goes through the dispatcher)."""
    hooks = triton.knobs.runtime
    return _hook_active(hooks.launch_enter_hook) or _hook_active(hooks.launch_exit_hook)


def compiled_for(key: tuple) -> Any | None:
    """The compiled kernel remembered for ``key``, or None: launch through the dispatcher (not compiled yet,
    another Triton version, or a launch hook registered)."""
    if not ENABLED or hooks_active():
        return None
    return _COMPILED.get(key)


def remember(key: tuple, compiled: Any) -> None:
    """Keep what the dispatcher returned for ``key`` (a ``CompiledKernel``) for the next launches."""
    if ENABLED and compiled is not None:
        _COMPILED[key] = compiled


def launch(
    compiled: Any,
    grid: tuple[int, int, int],
    stream: int,
    descs: Sequence[tuple[Any, list[int], list[int]] | None],
    args: Sequence[Any],
) -> None:
    """Launch ``compiled`` on ``stream``: ``descs`` are the kernel's leading tensor-descriptor parameters as
    (base tensor, shape, strides) or None, ``args`` every later parameter in order (constexprs included, as the
    dispatcher passes them)."""
    lead = tuple(None if d is None else LightDesc(*d) for d in descs)
    compiled.run(
        grid[0],
        grid[1],
        grid[2],
        stream,
        compiled.function,
        compiled.packed_metadata,
        None,  # launch_metadata: only launch hooks read it, and with a hook the dispatcher launches
        None,  # launch_enter_hook
        None,  # launch_exit_hook
        *lead,
        *args,
    )
