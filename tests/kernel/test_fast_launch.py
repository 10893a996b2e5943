"""kernel.fast_launch against the pinned Triton, on the CPU: the call it makes is the call Triton's dispatcher
makes (``JITFunction.run`` -> ``CompiledKernel.run``) for the same launch, argument for argument, and its light
descriptors expand in the launcher exactly as real ``TensorDescriptor`` objects do. The GPU tests run the
kernel through both paths (the first call of a configuration compiles through the dispatcher, the later ones
take the fast path)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.driver import make_tensordesc_arg
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature
from triton.tools.tensor_descriptor import TensorDescriptor

from kernel import fast_launch
from kernel.backward import (
    CONSTEXPR_NAMES,
    _fused_bwd_kernel,
    launch_arguments,
    shape_strides,
    tensor_descriptors,
)
from kernel.configs import config_for
from kernel.schedule import plan_schedule
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS
from tests.support import PROJECT


class Recorder:
    """A compiled kernel as the launch paths see it: ``run`` records its arguments."""

    function = object()
    packed_metadata = object()

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def run(self, *args) -> None:
        self.calls.append(args)


def _launch_inputs(m: int, s: int):
    cfg = replace(config_for(m, (9, 0)), device_desc=False)  # the H200's table, host tensor descriptors
    plan = plan_schedule(m, cfg, 132)
    go2, x2 = torch.empty(m, HIDDEN, dtype=torch.bfloat16), torch.empty(m, HIDDEN, dtype=torch.bfloat16)
    w2, gw = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16), torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16)
    ga = torch.empty(m // s, NUM_HEADS, s, HEAD_DIM, dtype=torch.bfloat16)
    descs, args, constexprs = launch_arguments(go2, w2, x2, gw, ga, s, cfg, plan, cuda=True)
    return cfg, plan, descs, args, constexprs


def _expanded(arg):
    """An argument as the launcher receives it: a descriptor as make_tensordesc_arg expands it."""
    if isinstance(arg, TensorDescriptor | fast_launch.LightDesc):
        return ("desc", *make_tensordesc_arg(arg, None))
    return arg


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_the_pin_is_the_locked_triton() -> None:
    """The fast path is on only for the Triton it was checked against, which is the locked one: an upgrade of
    the lock fails here until the protocol is checked again (and the pin moved)."""
    locked = re.search(r"^triton==(\S+)", (PROJECT / "constraints.txt").read_text(), re.M)
    assert locked is not None and locked.group(1) == fast_launch.PINNED_TRITON == triton.__version__
    assert fast_launch.ENABLED


@pytest.mark.parametrize(("m", "s"), [(256, 128), (8192, 128), (1024, 100)])
def test_the_fast_call_is_the_dispatchers_call(m: int, s: int) -> None:
    """Run without the interpreter (which the test session turns on), as scripts/diag_compile.py does: the
    kernel is then Triton's JIT function, whose binder gives the dispatcher's arguments."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(PROJECT)}
    code = f"import tests.kernel.test_fast_launch as t; t.check_against_the_dispatcher({m}, {s}); print('same')"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "same", proc.stderr[-3000:]


def check_against_the_dispatcher(m: int, s: int) -> None:
    cfg, plan, descs, args, constexprs = _launch_inputs(m, s)
    # What the dispatcher passes CompiledKernel.run (triton/runtime/jit.py, JITFunction.run): the grid, the stream,
    # the function and metadata, launch metadata and hooks (None without a hook), then every bound argument.
    kwargs = dict(zip(CONSTEXPR_NAMES, constexprs, strict=True)) | {
        "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
    }
    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(_fused_bwd_kernel.signature, _fused_bwd_kernel.params, backend)
    bound, _spec, _options = binder(*tensor_descriptors(descs), *args, **kwargs)
    stream = 7
    fake = Recorder()
    dispatcher = (plan.programs, 1, 1, stream, fake.function, fake.packed_metadata, None, None, None)
    dispatcher += tuple(bound.values())

    parts = tuple(None if d is None else (d[0], *_layout(d)) for d in descs)
    fast_launch.launch(fake, (plan.programs, 1, 1), stream, parts, (*args, *constexprs))
    (fast,) = fake.calls
    assert len(fast) == len(dispatcher)
    for i, (a, b) in enumerate(zip(fast, dispatcher, strict=True)):
        assert _same(_expanded(a), _expanded(b)), (i, a, b)
    assert sum(isinstance(a, fast_launch.LightDesc) for a in fast) == sum(d is not None for d in descs) > 0


def _layout(d: tuple) -> tuple[list[int], list[int]]:
    return shape_strides(d[0], *d[2:])


def test_the_kernel_launch_takes_the_fast_path_only_when_it_may(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled kernel is remembered and reused; with a launch hook, or on another Triton, the dispatcher
    launches every time."""
    key = ("test", object())
    fake = Recorder()
    fast_launch.remember(key, fake)
    assert fast_launch.compiled_for(key) is fake

    class Hook:
        def __call__(self, *_a) -> None: ...

    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", Hook())
    assert fast_launch.compiled_for(key) is None
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(fast_launch, "ENABLED", False)
    assert fast_launch.compiled_for(key) is None
    other = ("test", object())
    fast_launch.remember(other, fake)
    monkeypatch.setattr(fast_launch, "ENABLED", True)
    assert fast_launch.compiled_for(other) is None  # not remembered while disabled
