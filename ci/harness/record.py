"""Recording a commit's kernel: the one thing the commit's code is run for on a GPU (docs/replay.md).

In the sandboxed case process, before the commit's kernel is imported, ``Recorder`` wraps the pinned Triton's
launcher (``CudaLauncher.__call__``, which both its dispatcher and a direct ``CompiledKernel.run`` go through)
and its kernel loader (``CompiledKernel._init_handles``, to know which compiled kernel a function handle is).
``record_call`` calls the kernel on harness-made inputs and outputs until its launches are steady, records two
calls, describes every argument by the harness buffer it points into (``ci.harness.plan``) and refuses with one
line what a replay could not reproduce: GPU work the launches do not account for (CUPTI's activity records of
the same calls: a PyTorch op, a copy to the host, a library call), launch sequences that differ between the two
calls, a pointer into no buffer the harness or the kernel allocated. Nothing here is trusted: the replay
validates the plan and decides correctness and timing itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ci.harness.plan import Arg, Kernel, Launch, Plan, RefusedPlan

WARMUP_CALLS = 2  # calls before the recorded ones: compiles, autotuning, caches
RECORDED_CALLS = 2  # recorded calls whose launch sequences must be equal


class Recorder:
    """Sees every launch through the pinned Triton's launcher while ``calls`` is a list."""

    def __init__(self) -> None:
        from triton.backends.nvidia.driver import CudaLauncher
        from triton.compiler.compiler import CompiledKernel

        self.by_function: dict[int, Any] = {}  # CUfunction handle -> the CompiledKernel that loaded it
        self.calls: list[tuple[int, tuple[int, int, int], tuple]] | None = None
        recorder = self
        load = CompiledKernel._init_handles
        launch = CudaLauncher.__call__

        def _init_handles(kernel: Any) -> None:
            load(kernel)
            if kernel.function is not None:
                recorder.by_function[int(kernel.function)] = kernel

        def __call__(launcher: Any, grid_x: int, grid_y: int, grid_z: int, stream: int, function: int, *rest: Any):
            if recorder.calls is not None:
                # rest: packed metadata, launch metadata, enter hook, exit hook, then the kernel's arguments
                recorder.calls.append((int(function), (int(grid_x), int(grid_y), int(grid_z)), tuple(rest[4:])))
            return launch(launcher, grid_x, grid_y, grid_z, stream, function, *rest)

        CompiledKernel._init_handles = _init_handles
        CudaLauncher.__call__ = __call__


def _extent(t: Any) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


class _Buffers:
    """The harness's buffers of one call and the scratch the kernel allocated for it, found by address."""

    def __init__(self, known: dict[tuple[str, int], Any]) -> None:
        self.known = {key: _extent(t) for key, t in known.items()}
        self.scratch: list[tuple[int, int]] = []  # (start, end) of each scratch storage, in order of first use

    def locate(self, addr: int, obj: Any, where: str) -> tuple[str, int, int]:
        for (role, index), (lo, hi) in self.known.items():
            if lo <= addr < hi:
                return role, index, addr - lo
        for i, (lo, hi) in enumerate(self.scratch):
            if lo <= addr < hi:
                return "scratch", i, addr - lo
        storage = getattr(obj, "untyped_storage", None)
        if callable(storage):  # a tensor the kernel allocated itself: scratch of its storage's size
            st = storage()
            lo, hi = st.data_ptr(), st.data_ptr() + st.nbytes()
            if lo <= addr < hi:
                self.scratch.append((lo, hi))
                return "scratch", len(self.scratch) - 1, addr - lo
        raise RefusedPlan(f"{where}: a pointer that belongs to no known buffer (0x{addr:x})")


def _loaded_before(function: int, by_function: dict[int, Any]) -> Any | None:
    """A compiled kernel loaded before the recorder was made (in a test process, say), found by its handle."""
    import gc

    from triton.compiler.compiler import CompiledKernel

    for obj in gc.get_objects():
        if type(obj) is CompiledKernel and obj.function is not None:
            by_function.setdefault(int(obj.function), obj)
    return by_function.get(function)


def _address(obj: Any, where: str) -> int:
    if isinstance(obj, int) and not isinstance(obj, bool):
        return obj
    data_ptr = getattr(obj, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    raise RefusedPlan(f"{where}: a pointer argument of type {type(obj).__name__}")


def kernel_entry(compiled: Any) -> Kernel:
    """What the plan keeps of a pinned Triton's ``CompiledKernel``."""
    md = compiled.metadata
    signature = getattr(compiled.src, "signature", None)
    if not isinstance(signature, dict):
        raise RefusedPlan(f"kernel {compiled.name}: compiled from a source without a signature")
    meta = getattr(md, "tensordesc_meta", None)
    return Kernel(
        name=str(compiled.name),
        binary=bytes(compiled.asm["cubin"]),
        num_warps=int(md.num_warps),
        num_ctas=int(md.num_ctas),
        shared=int(md.shared),
        signature=tuple((str(k), str(v)) for k, v in signature.items()),
        tensordesc_meta=tuple(dict(m) for m in meta) if meta else None,
        cluster_dims=tuple(getattr(md, "cluster_dims", None) or (1, 1, 1)),  # type: ignore[arg-type]
        global_scratch_size=int(md.global_scratch_size),
        global_scratch_align=int(md.global_scratch_align),
        profile_scratch_size=int(md.profile_scratch_size),
        profile_scratch_align=int(md.profile_scratch_align),
        launch_cooperative_grid=bool(md.launch_cooperative_grid),
        launch_pdl=bool(md.launch_pdl),
        arch=int(md.target.arch),
    )


def describe_call(
    calls: list[tuple[int, tuple[int, int, int], tuple]],
    by_function: dict[int, Any],
    known: dict[tuple[str, int], Any],
    batch_size: int,
    seq_len: int,
) -> Plan:
    """One recorded call as a plan: its kernels, its launches with every argument described symbolically."""
    if not calls:
        raise RefusedPlan("no Triton launch was recorded in a call of the kernel")
    buffers = _Buffers(known)
    kernels: list[Kernel] = []
    index_of: dict[int, int] = {}
    launches = []
    for n, (function, grid, values) in enumerate(calls):
        compiled = by_function.get(function) or _loaded_before(function, by_function)
        if compiled is None:
            raise RefusedPlan(f"launch {n}: a function no Triton kernel of this process loaded")
        if id(compiled) not in index_of:
            index_of[id(compiled)] = len(kernels)
            kernels.append(kernel_entry(compiled))
        k = index_of[id(compiled)]
        sig = kernels[k].signature
        if len(values) != len(sig):
            raise RefusedPlan(f"launch {n} ({compiled.name}): {len(values)} arguments for {len(sig)} parameters")
        args = []
        for (name, ty), v in zip(sig, values, strict=True):
            where = f"launch {n} ({compiled.name}) argument {name}"
            if ty == "constexpr":
                args.append(Arg("constexpr"))
            elif ty.startswith("*"):
                addr = 0 if v is None else _address(v, where)
                args.append(Arg("null") if addr == 0 else Arg("ptr", *buffers.locate(addr, v, where)))
            elif ty.startswith("tensordesc"):
                base = getattr(v, "base", None)
                role, index, offset = buffers.locate(_address(base, where), base, where)
                args.append(
                    Arg(
                        "desc",
                        role,
                        index,
                        offset,
                        tuple(int(x) for x in v.shape),
                        tuple(int(x) for x in v.strides),
                        str(getattr(v, "padding", "zero")),
                    )
                )
            elif isinstance(v, (bool, int, float)):
                args.append(Arg("scalar", value=v))
            else:
                raise RefusedPlan(f"{where}: a {ty} argument of type {type(v).__name__}")
        launches.append(Launch(k, grid, tuple(args)))
    scratch = tuple(hi - lo for lo, hi in buffers.scratch)
    return Plan(batch_size, seq_len, tuple(kernels), tuple(launches), scratch)


def unexplained_work(
    activities: list[tuple[str, int, int]],
    calls: list[tuple[int, tuple[int, int, int], tuple]],
    by_function: dict[int, Any],
) -> str | None:
    """What the GPU ran during a recorded call beyond its recorded launches (CUPTI's records), or None."""
    expected: Counter[str] = Counter()
    for function, grid, _values in calls:
        compiled = by_function.get(function) or _loaded_before(function, by_function)
        if compiled is not None and grid[0] * grid[1] * grid[2] > 0:
            expected[str(compiled.name)] += 1
    seen = Counter(name for name, _, _ in activities)
    extra = seen - expected
    if extra:
        names = ", ".join(f"{n} x {name[:80]}" for name, n in extra.most_common(4))
        return f"GPU work outside the recorded launches: {names}"
    missing = expected - seen
    if missing:
        names = ", ".join(f"{name[:80]}" for name in missing)
        return f"recorded launches the GPU did not run: {names}"
    return None


def record_call(
    recorder: Recorder,
    fn: Callable,
    make_call: Callable[[], tuple[tuple, tuple, dict[tuple[str, int], Any]]],
    batch_size: int,
    seq_len: int,
    sync: Callable[[], None],
    profile: Callable[[], Any] | None,
) -> Plan:
    """Warm the kernel up, record ``RECORDED_CALLS`` calls and return the plan of the last, or RefusedPlan.

    ``make_call()`` gives one call's (inputs, outputs, buffers by role); ``profile()`` a context manager whose
    ``activities()`` are the GPU's activity records of its span (None: GPU work is not checked)."""
    for _ in range(WARMUP_CALLS):
        inputs, outputs, _known = make_call()
        fn(*inputs, out=outputs)
    sync()
    plans = []
    for _ in range(RECORDED_CALLS):
        inputs, outputs, known = make_call()
        sync()
        recorder.calls = []
        try:
            if profile is not None:
                with profile() as prof:
                    fn(*inputs, out=outputs)
                    sync()
                activities = prof.activities()
            else:
                fn(*inputs, out=outputs)
                sync()
                activities = None
            calls = recorder.calls
        finally:
            recorder.calls = None
        if activities is not None:
            why = unexplained_work(activities, calls, recorder.by_function)
            if why:
                raise RefusedPlan(why)
        plans.append(describe_call(calls, recorder.by_function, known, batch_size, seq_len))
    first = plans[0].steady_key()
    for p in plans[1:]:
        if p.steady_key() != first:
            raise RefusedPlan(f"the launch sequence differs between two steady calls ({_difference(plans[0], p)})")
    return plans[-1]


def _difference(a: Plan, b: Plan) -> str:
    if len(a.launches) != len(b.launches):
        return f"{len(a.launches)} launches, then {len(b.launches)}"
    if [k.sha256 for k in a.kernels] != [k.sha256 for k in b.kernels]:
        return "other kernel binaries"
    for i, (x, y) in enumerate(zip(a.launches, b.launches, strict=True)):
        if x.grid != y.grid:
            return f"launch {i}: grid {list(x.grid)}, then {list(y.grid)}"
        if x != y:
            return f"launch {i}: other arguments"
    return "other scratch buffers"
