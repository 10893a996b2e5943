"""The launch plan on a machine without a GPU: one call of the project's kernel, compiled for sm_90, recorded as a
plan (``ci.harness.record``), written and read back (``ci.harness.plan``); every refusal of the contract; the
replay's launcher and arguments against those the pinned Triton makes for the same compiled kernel
(``ci.harness.replay``); and the interpreter's judge, ``RecordedOutputs``."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import triton
import triton.runtime
from triton.backends.nvidia import driver
from triton.compiler.compiler import CompiledKernel

from ci.harness import plan, record, replay
from ci.harness.case_process import RecordedOutputs
from ci.harness.plan import Arg, Limits, RefusedPlan
from kernel import backward
from kernel.configs import config_for
from kernel.schedule import plan_schedule
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS
from tests.support import PROJECT
from tests.support.sm90 import cuda_env, ptxas_present

B, S = 2, 128
M = B * S
PROGRAMS = 132  # scripts/diag_compile.py compiles for the H200's SM count
H200 = Limits(arch=90, max_shared=232448)
FUNCTION = 0x7E57  # the CUfunction handle the recorder saw (no GPU here: any number)
BASE_ARGS = len(driver._BASE_ARGS_FORMAT)  # grid, stream, function, ... before the kernel's own arguments

# The test session runs Triton's interpreter, under which no kernel (not even triton.language's own helpers) can
# be compiled: the kernel is compiled in a child process without it, by scripts/diag_compile.py, and the child
# hands back Triton's cache entry, from which this process builds the CompiledKernel as Triton does on a cache hit.
_COMPILE = """
import json, sys
from kernel.configs import config_for
from scripts.diag_compile import compile_for
m, s, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
_schedule, k = compile_for(m, s, config_for(m, (9, 0)))
constants = [[list(path), value] for path, value in k.src.constants.items()]
doc = {"hash": k.hash, "group": k.metadata_group, "signature": k.src.signature, "constants": constants}
with open(out, "w") as fh:
    json.dump(doc, fh)
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> CompiledKernel:
    """The project's kernel compiled for sm_90 with the launcher's arguments for B2_S128."""
    if not ptxas_present():
        pytest.skip("triton's bundled ptxas is not installed")
    folder = tmp_path_factory.mktemp("compiled")
    env = cuda_env(TRITON_CACHE_DIR=str(folder / "cache"))
    out = folder / "compiled.json"
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE, str(M), str(S), str(out)],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    src = SimpleNamespace(signature=doc["signature"], constants={tuple(p): v for p, v in doc["constants"]})
    return CompiledKernel(src, doc["group"], doc["hash"])


@pytest.fixture(scope="module")
def call(compiled: CompiledKernel) -> SimpleNamespace:
    """One call's buffers (CPU bf16) and the launch as the launcher passes it to Triton's launcher
    (``kernel.backward._launch``: the host tensor descriptors, the arguments, the constexprs)."""
    grad_output = torch.randn(B, S, HIDDEN).to(torch.bfloat16)
    reshaped = torch.randn(B, S, HIDDEN).to(torch.bfloat16)
    weight = torch.randn(HIDDEN, HIDDEN).to(torch.bfloat16)
    grad_attn = torch.empty(B, NUM_HEADS, S, HEAD_DIM, dtype=torch.bfloat16)
    grad_weight = torch.empty(HIDDEN, HIDDEN, dtype=torch.bfloat16)
    go2, x2, w2 = grad_output.reshape(-1, HIDDEN), reshaped.reshape(-1, HIDDEN), weight.reshape(-1, HIDDEN)
    assert go2.data_ptr() == grad_output.data_ptr() and x2.data_ptr() == reshaped.data_ptr()
    cfg = replace(config_for(M, (9, 0)), device_desc=False)  # as diag_compile compiled it
    schedule = plan_schedule(M, cfg, PROGRAMS)
    descs, args, constexprs = backward.launch_arguments(
        go2, w2, x2, grad_weight, grad_attn, S, cfg, schedule, cuda=True
    )
    values = (*backward.tensor_descriptors(descs), *args, *constexprs)
    assert len(values) == len(compiled.src.signature)
    known = {
        ("input", 0): grad_output,
        ("input", 1): reshaped,
        ("input", 2): weight,
        ("output", 0): grad_attn,
        ("output", 1): grad_weight,
    }
    return SimpleNamespace(
        inputs=(grad_output, reshaped, weight),
        outputs=(grad_attn, grad_weight),
        known=known,
        schedule=schedule,
        grid=(schedule.programs, 1, 1),
        values=values,
    )


@pytest.fixture(scope="module")
def recorded(compiled: CompiledKernel, call: SimpleNamespace) -> plan.Plan:
    return record.describe_call([(FUNCTION, call.grid, call.values)], {FUNCTION: compiled}, call.known, B, S)


@pytest.fixture
def doc(recorded: plan.Plan) -> dict:
    """A fresh copy of the recorded plan's plan.json, to mutate."""
    return json.loads(json.dumps(plan.to_json(recorded)))


@pytest.fixture
def binaries(recorded: plan.Plan) -> dict[str, bytes]:
    return {"k0.bin": recorded.kernels[0].binary}


def _write(folder: Path, doc: dict, binaries: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in binaries.items():
        (folder / name).write_bytes(data)
    (folder / plan.PLAN_FILE).write_text(json.dumps(doc))
    return folder


def _names(compiled: CompiledKernel) -> list[str]:
    return list(compiled.src.signature)


# ------------------------------------------------------------------------------------------------ recording
def test_the_plan_keeps_what_the_launcher_needs_of_the_compiled_kernel(compiled, recorded) -> None:
    (k,) = recorded.kernels
    md = compiled.metadata
    assert k.name == compiled.name == "_fused_bwd_kernel"
    assert k.binary == compiled.asm["cubin"] and k.binary.startswith(b"\x7fELF")
    assert (k.num_warps, k.num_ctas, k.shared, k.arch) == (md.num_warps, md.num_ctas, md.shared, 90)
    assert k.signature == tuple(compiled.src.signature.items())
    assert list(k.tensordesc_meta) == md.tensordesc_meta
    assert (k.global_scratch_size, k.profile_scratch_size) == (md.global_scratch_size, md.profile_scratch_size)
    assert (k.launch_cooperative_grid, k.launch_pdl) == (md.launch_cooperative_grid, md.launch_pdl)


def test_every_argument_is_described_by_the_buffer_it_points_into(compiled, call, recorded) -> None:
    def desc(role: str, index: int, shape: tuple, strides: tuple) -> Arg:
        return Arg("desc", role, index, 0, shape, strides, "zero")

    rows = (M, HIDDEN), (HIDDEN, 1)
    square = (HIDDEN, HIDDEN), (HIDDEN, 1)
    expected = {
        "go_a": desc("input", 0, *rows),
        "w_b": desc("input", 2, *square),
        "go_t": desc("input", 0, *rows),
        "x_b": desc("input", 1, *rows),
        "gw_out": desc("output", 1, *square),
        "ga_out": desc("output", 0, (B * NUM_HEADS, S, HEAD_DIM), (S * HEAD_DIM, HEAD_DIM, 1)),
        "go_ptr": Arg("ptr", "input", 0, 0),
        "w_ptr": Arg("ptr", "input", 2, 0),
        "x_ptr": Arg("ptr", "input", 1, 0),
        "gw_ptr": Arg("ptr", "output", 1, 0),
        "ga_ptr": Arg("ptr", "output", 0, 0),
        "M": Arg("scalar", value=M),
        "S": Arg("scalar", value=S),
        "n_ga_m": Arg("scalar", value=call.schedule.n_ga_m),
        "n_gw_m": Arg("scalar", value=call.schedule.n_gw_m),
        "P_GA": Arg("scalar", value=call.schedule.p_ga),
    } | {name: Arg("constexpr") for name in backward.CONSTEXPR_NAMES}
    (launch,) = recorded.launches
    assert launch.kernel == 0 and launch.grid == (call.schedule.programs, 1, 1)
    assert dict(zip(_names(compiled), launch.args, strict=True)) == expected
    assert recorded.scratch == ()  # the kernel allocates nothing of its own


def test_a_written_plan_loads_back_equal(recorded, tmp_path: Path) -> None:
    folder = plan.write(recorded, tmp_path / "plan")
    assert sorted(p.name for p in folder.iterdir()) == ["k0.bin", "plan.json"]
    loaded = plan.load(folder, B, S, H200)
    assert loaded.steady_key() == recorded.steady_key()
    assert loaded == recorded
    assert (loaded.batch_size, loaded.seq_len, loaded.scratch, loaded.config) == (B, S, (), None)


def test_a_null_pointer_is_a_null_argument(compiled, call, tmp_path: Path) -> None:
    values = list(call.values)
    values[_names(compiled).index("go_ptr")] = None
    values[_names(compiled).index("x_ptr")] = 0
    p = record.describe_call([(FUNCTION, call.grid, tuple(values))], {FUNCTION: compiled}, call.known, B, S)
    args = dict(zip(_names(compiled), p.launches[0].args, strict=True))
    assert args["go_ptr"] == args["x_ptr"] == Arg("null")
    assert plan.load(plan.write(p, tmp_path), B, S, H200) == p


def test_a_tensor_the_kernel_allocated_is_scratch_of_its_storages_size(compiled, call, tmp_path: Path) -> None:
    own = torch.empty(4096, dtype=torch.bfloat16)
    values = list(call.values)
    values[_names(compiled).index("go_ptr")] = own[8:]
    values[_names(compiled).index("x_ptr")] = own[100:]  # the same storage: the same scratch buffer
    p = record.describe_call([(FUNCTION, call.grid, tuple(values))], {FUNCTION: compiled}, call.known, B, S)
    args = dict(zip(_names(compiled), p.launches[0].args, strict=True))
    assert args["go_ptr"] == Arg("ptr", "scratch", 0, 16)
    assert args["x_ptr"] == Arg("ptr", "scratch", 0, 200)
    assert p.scratch == (own.untyped_storage().nbytes(),) == (8192,)
    assert plan.load(plan.write(p, tmp_path), B, S, H200) == p


def test_no_launch_in_a_call_is_refused(call) -> None:
    with pytest.raises(RefusedPlan, match="no Triton launch was recorded"):
        record.describe_call([], {}, call.known, B, S)


def test_a_function_no_kernel_of_the_process_loaded_is_refused(compiled, call) -> None:
    assert compiled.function is None  # not loaded on a machine without a GPU: gc's kernels cannot claim the handle
    with pytest.raises(RefusedPlan, match="launch 0: a function no Triton kernel of this process loaded"):
        record.describe_call([(FUNCTION + 1, call.grid, call.values)], {FUNCTION: compiled}, call.known, B, S)


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("go_ptr", 0x1234, r"argument go_ptr: a pointer that belongs to no known buffer \(0x1234\)"),
        ("go_ptr", "0x1234", "argument go_ptr: a pointer argument of type str"),
        ("M", "256", "argument M: a i32 argument of type str"),
    ],
)
def test_an_argument_the_plan_cannot_describe_is_refused(compiled, call, name: str, value: Any, match: str) -> None:
    values = list(call.values)
    values[_names(compiled).index(name)] = value
    with pytest.raises(RefusedPlan, match=match):
        record.describe_call([(FUNCTION, call.grid, tuple(values))], {FUNCTION: compiled}, call.known, B, S)


def test_a_launch_with_other_arguments_than_parameters_is_refused(compiled, call) -> None:
    with pytest.raises(RefusedPlan, match=r"launch 0 \(_fused_bwd_kernel\): 31 arguments for 32 parameters"):
        record.describe_call([(FUNCTION, call.grid, call.values[:-1])], {FUNCTION: compiled}, call.known, B, S)


# ------------------------------------------------------------------------------------------------ GPU work
def test_gpu_work_outside_the_recorded_launches_is_unexplained(compiled, call) -> None:
    calls = [(FUNCTION, call.grid, call.values)]
    extra = [(compiled.name, 0, 10), ("Memcpy DtoH (Device -> Pageable)", 10, 20), ("nvjet_tst_128x256", 20, 30)]
    why = record.unexplained_work(extra, calls, {FUNCTION: compiled})
    assert why is not None and why.startswith("GPU work outside the recorded launches: ")
    assert "1 x Memcpy DtoH (Device -> Pageable)" in why and "1 x nvjet_tst_128x256" in why
    assert compiled.name not in why


def test_a_recorded_launch_the_gpu_did_not_run_is_unexplained(compiled, call) -> None:
    calls = [(FUNCTION, call.grid, call.values), (FUNCTION, call.grid, call.values)]
    why = record.unexplained_work([(compiled.name, 0, 10)], calls, {FUNCTION: compiled})
    assert why == "recorded launches the GPU did not run: _fused_bwd_kernel"


def test_the_recorded_launches_and_nothing_else_are_explained(compiled, call) -> None:
    calls = [(FUNCTION, call.grid, call.values), (FUNCTION, (0, 1, 1), call.values)]  # an empty grid runs nothing
    assert record.unexplained_work([(compiled.name, 0, 10)], calls, {FUNCTION: compiled}) is None


class _FakeRecorder:
    """What ``record_call`` uses of a Recorder: the launches seen while ``calls`` is a list, and the kernels."""

    def __init__(self, by_function: dict[int, Any]) -> None:
        self.calls: list | None = None
        self.by_function = by_function


class _Profile:
    """``profile()``: a context manager whose ``activities()`` are the GPU's records of its span."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def __call__(self) -> _Profile:
        return self

    def __enter__(self) -> _Profile:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def activities(self) -> list[tuple[str, int, int]]:
        return [(name, i, i + 1) for i, name in enumerate(self.names)]


def _record(compiled, call, grids: list[tuple[int, int, int]], profile: _Profile | None) -> plan.Plan:
    """``record_call`` on a stand-in kernel that launches once per call with the next grid, as the real launcher
    would report it to the recorder."""
    recorder = _FakeRecorder({FUNCTION: compiled})
    grid = itertools.chain(grids, itertools.repeat(grids[-1]))

    def fn(*inputs: torch.Tensor, out: tuple) -> tuple:
        g = next(grid)
        if recorder.calls is not None:
            recorder.calls.append((FUNCTION, g, call.values))
        return out

    def make_call() -> tuple:
        return call.inputs, call.outputs, call.known

    return record.record_call(recorder, fn, make_call, B, S, sync=lambda: None, profile=profile)


def test_a_steady_call_is_recorded_as_its_plan(compiled, call, recorded) -> None:
    assert _record(compiled, call, [call.grid], _Profile([compiled.name])) == recorded
    assert _record(compiled, call, [call.grid], None) == recorded


def test_a_launch_sequence_that_changes_between_the_recorded_calls_is_refused(compiled, call) -> None:
    other = (call.grid[0] // 2, 1, 1)
    grids = [call.grid] * (record.WARMUP_CALLS + record.RECORDED_CALLS - 1) + [other]
    match = rf"differs between two steady calls \(launch 0: grid \[{call.grid[0]}, 1, 1\], then \[{other[0]}, 1, 1\]\)"
    with pytest.raises(RefusedPlan, match=match):
        _record(compiled, call, grids, None)


def test_gpu_work_beside_the_launches_refuses_the_recording(compiled, call) -> None:
    with pytest.raises(RefusedPlan, match="GPU work outside the recorded launches: 1 x Memcpy DtoD"):
        _record(compiled, call, [call.grid], _Profile([compiled.name, "Memcpy DtoD (Device -> Device)"]))


# ------------------------------------------------------------------------------------------------ refusals
def _arg(doc: dict, name: str) -> dict:
    """Launch 0's argument for parameter ``name``."""
    names = [n for n, _ in doc["kernels"][0]["signature"]]
    return doc["launches"][0]["args"][names.index(name)]


def _set_arg(doc: dict, name: str, value: dict) -> None:
    names = [n for n, _ in doc["kernels"][0]["signature"]]
    doc["launches"][0]["args"][names.index(name)] = value


def _retype(doc: dict, name: str, ty: Any) -> None:
    for pair in doc["kernels"][0]["signature"]:
        if pair[0] == name:
            pair[1] = ty


def _kernel(doc: dict) -> dict:
    return doc["kernels"][0]


def _scalar_fp32(doc: dict, value: Any) -> None:
    _retype(doc, "M", "fp32")
    _set_arg(doc, "M", {"kind": "scalar", "value": value})


INPUT0 = M * HIDDEN * 2  # bytes of grad_output
CAP = plan.scratch_cap(B, S)
PTR = {"kind": "ptr", "role": "input", "index": 0, "offset": 0}

MUTATIONS = [
    # the document
    (lambda d, b: d.update(extra=1), r"^plan: unknown key 'extra'$"),
    (lambda d, b: d.pop("launches"), r"^plan: missing 'launches'$"),
    (lambda d, b: d.update(plan_version=2), r"^plan\.plan_version: 2 is not 1$"),
    (lambda d, b: d.update(batch_size=4), r"^plan: recorded for B4_S128, not B2_S128$"),
    (lambda d, b: d.update(scratch=[CAP + 1]), rf"^plan\.scratch: '{CAP + 1}' is not an integer in \[1, {CAP}\]$"),
    (lambda d, b: d.update(scratch=[CAP // 2 + 1] * 2), rf"plan\.scratch: {2 * (CAP // 2 + 1)} bytes of scratch"),
    (lambda d, b: d.update(scratch=[0]), r"plan\.scratch: '0' is not an integer"),
    (lambda d, b: d.update(recorded={"log": "x" * 5000}), r"^plan\.recorded: expected a small object$"),
    (lambda d, b: d.update(recorded=["calls"]), r"^plan\.recorded: expected a small object$"),
    (lambda d, b: d.update(config={"tile": "64; rm -rf /"}), r"^plan\.config\.tile: text outside"),
    (lambda d, b: d.update(config={"tile": "x" * 65}), r"^plan\.config\.tile: text outside .* longer than 64$"),
    (lambda d, b: d.update(config={"1x": 1}), r"^plan\.config: key '1x' is not a name$"),
    (lambda d, b: d.update(config={"tile": [64]}), r"^plan\.config\.tile: expected a number, a short text"),
    (lambda d, b: d.update(config={f"k{i}": i for i in range(33)}), r"^plan\.config: expected an object of at most"),
    # a kernel
    (lambda d, b: d.update(kernels=[]), r"^plan\.kernels: expected a list of 1 to 16 items$"),
    (lambda d, b: _kernel(d).update(regs=1), r"^plan\.kernels\[0\]: unknown key 'regs'$"),
    (lambda d, b: _kernel(d).pop("arch"), r"^plan\.kernels\[0\]: missing 'arch'$"),
    (lambda d, b: _kernel(d).update(name="k; rm"), r"^plan\.kernels\[0\]\.name: not a kernel name$"),
    (lambda d, b: _kernel(d).update(binary="../k0.bin"), r"^plan\.kernels\[0\]\.binary: no such binary in the plan$"),
    (lambda d, b: _kernel(d).update(binary="k1.bin"), r"^file k1\.bin: No such file or directory$"),
    (lambda d, b: b.update({"k0.bin": b"MZ" + b["k0.bin"][2:]}), r"^plan\.kernels\[0\]\.binary: not a cubin \(ELF\)$"),
    (
        lambda d, b: b.update({"k0.bin": b["k0.bin"] + b"\0"}),
        r"^plan\.kernels\[0\]\.sha256: does not match the binary$",
    ),
    (lambda d, b: _kernel(d).update(sha256="0" * 64), r"^plan\.kernels\[0\]\.sha256: does not match the binary$"),
    (lambda d, b: _kernel(d).update(num_warps=64), r"num_warps: '64' is not an integer in \[1, 32\]$"),
    (lambda d, b: _kernel(d).update(num_ctas=0), r"num_ctas: '0' is not an integer in \[1, 16\]$"),
    (lambda d, b: _kernel(d).update(shared=232449), r"\.shared: '232449' is not an integer in \[0, 232448\]$"),
    (lambda d, b: _kernel(d).update(cluster_dims=[1, 1]), r"cluster_dims: expected a list of 3 to 3 items$"),
    (
        lambda d, b: _kernel(d).update(profile_scratch_size=64),
        r"profile_scratch_size: '64' is not an integer in \[0, 0\]",
    ),
    (lambda d, b: _kernel(d).update(launch_pdl=1), r"launch_pdl: expected true or false$"),
    (lambda d, b: _kernel(d).update(global_scratch_size=CAP), r"^plan\.launches\[0\]: Triton's global scratch"),
    (lambda d, b: _retype(d, "go_ptr", '*bf16); system("x")'), r"signature\[6\]: signature type .* is not one the"),
    (lambda d, b: _retype(d, "go_a", "tensordesc<bf16[64, 64]>junk"), r"signature\[0\]: signature type .* is not one"),
    (lambda d, b: _retype(d, "M", "i128"), r"signature\[11\]: signature type 'i128' is not one the replay knows$"),
    (lambda d, b: _retype(d, "M", 32), r"signature\[11\]: not a signature type$"),
    (lambda d, b: _kernel(d)["signature"][1].__setitem__(0, "go_a"), r"signature\[1\]: argument 'go_a' twice$"),
    (
        lambda d, b: _kernel(d)["signature"][1].__setitem__(0, "w-b"),
        r"signature\[1\]: expected \[argument name, type\]",
    ),
    (lambda d, b: _kernel(d)["tensordesc_meta"].pop(), r"tensordesc_meta: 5 entries for 6 descriptors$"),
    (lambda d, b: _kernel(d)["tensordesc_meta"][0].update(x=1), r"tensordesc_meta\[0\]: unknown key 'x'$"),
    (lambda d, b: _kernel(d)["tensordesc_meta"][0].update(swizzle=4), r"swizzle: '4' is not an integer in \[0, 3\]$"),
    # a launch
    (lambda d, b: d.update(launches=[]), r"^plan\.launches: expected a list of 1 to 64 items$"),
    (lambda d, b: d.update(launches=d["launches"] * 65), r"^plan\.launches: expected a list of 1 to 64 items$"),
    (
        lambda d, b: d["launches"][0].update(kernel=1),
        r"^plan\.launches\[0\]\.kernel: '1' is not an integer in \[0, 0\]$",
    ),
    (lambda d, b: d["launches"][0].update(stream=7), r"^plan\.launches\[0\]: unknown key 'stream'$"),
    (lambda d, b: d["launches"][0].update(grid=[132, 70000, 1]), r"^plan\.launches\[0\]\.grid: beyond the device's"),
    (lambda d, b: d["launches"][0].update(grid=[132, 1]), r"^plan\.launches\[0\]\.grid: expected a list of 3 to 3"),
    (lambda d, b: d["launches"][0]["args"].pop(), r"^plan\.launches\[0\]\.args: 31 arguments for a signature of 32$"),
    # an argument
    (lambda d, b: _arg(d, "go_ptr").update(kind="host"), r"\(go_ptr\): expected an argument of kind ptr, desc, null"),
    (lambda d, b: _arg(d, "go_ptr").update(role="host"), r"\(go_ptr\)\.role: 'host' is not a known buffer role$"),
    (lambda d, b: _arg(d, "go_ptr").update(index=5), r"\(go_ptr\): there is no buffer input 5$"),
    (lambda d, b: _arg(d, "go_ptr").update(role="scratch"), r"\(go_ptr\): there is no buffer scratch 0$"),
    (
        lambda d, b: _arg(d, "go_ptr").update(offset=INPUT0),
        rf"offset: '{INPUT0}' is not an integer in \[0, {INPUT0 - 1}\]",
    ),
    (
        lambda d, b: _arg(d, "go_ptr").update(offset=-2),
        rf"\(go_ptr\)\.offset: '-2' is not an integer in \[0, {INPUT0 - 1}",
    ),
    (lambda d, b: _arg(d, "go_ptr").update(shape=[1]), r"\(go_ptr\): unknown key 'shape'$"),
    (lambda d, b: _set_arg(d, "go_ptr", _arg(d, "go_a")), r"\(go_ptr\): a pointer parameter \(\*bf16\) given a desc$"),
    (lambda d, b: _arg(d, "go_a")["shape"].__setitem__(0, M + 1), rf"reaches {INPUT0 + HIDDEN * 2} bytes into input 0"),
    (lambda d, b: _arg(d, "go_a").update(offset=16), rf"\(go_a\): the descriptor reaches {INPUT0 + 16} bytes into"),
    (lambda d, b: _arg(d, "go_a").update(offset=8), r"\(go_a\): a descriptor's base and strides must be 16-byte al"),
    (lambda d, b: _arg(d, "go_a").update(strides=[2047, 1]), r"\(go_a\): a descriptor's base and strides must be 16"),
    (lambda d, b: _arg(d, "go_a").update(strides=[2048, 2]), r"\(go_a\)\.strides: the last dimension must be contig"),
    (lambda d, b: _arg(d, "go_a").update(shape=[INPUT0 // 2]), r"\(go_a\): a rank-2 descriptor given shape \[524288\]"),
    (lambda d, b: _arg(d, "go_a").update(padding="one"), r"\(go_a\)\.padding: must be zero or nan$"),
    (lambda d, b: _set_arg(d, "go_a", dict(PTR)), r"\(go_a\): a tensor descriptor parameter given a ptr$"),
    (lambda d, b: _set_arg(d, "GA_FIRST", dict(PTR)), r"\(GA_FIRST\): a constexpr parameter given a ptr$"),
    (lambda d, b: _arg(d, "GA_FIRST").update(value=1), r"\(GA_FIRST\): unknown key 'value'$"),
    (lambda d, b: _set_arg(d, "M", dict(PTR)), r"\(M\): a scalar parameter \(i32\) given a ptr$"),
    (lambda d, b: _arg(d, "M").update(value=2**31), r"\(M\)\.value: '2147483648' is not an integer in \[-2147483648, "),
    (lambda d, b: _arg(d, "M").update(value=1.5), r"\(M\)\.value: '1\.5' is not an integer"),
    (lambda d, b: _scalar_fp32(d, "1.0"), r"\(M\)\.value: expected a finite number for fp32$"),
]


@pytest.mark.parametrize(("mutate", "match"), MUTATIONS)
def test_a_plan_outside_the_contract_is_refused(doc, binaries, tmp_path: Path, mutate, match: str) -> None:
    mutate(doc, binaries)
    with pytest.raises(RefusedPlan, match=match):
        plan.load(_write(tmp_path, doc, binaries), B, S, H200)


@pytest.mark.parametrize(
    "meta",
    [{"elem_size": 8}, {"elem_type": 9}, {"fp4_padded": True}],  # elem_type 9: Triton's code for float64
)
def test_tma_metadata_other_than_the_descriptors_dtype_is_refused(doc, binaries, tmp_path: Path, meta: dict) -> None:
    """The replay's TMA descriptor is encoded from the metadata, not the signature: byte strides are elem_size
    times the strides, the innermost extent is in elements of elem_type, fp4_padded doubles the last dimension.
    Metadata other than bf16's would reach past the bytes validate measured for a bf16 descriptor."""
    _kernel(doc)["tensordesc_meta"][0].update(meta)
    with pytest.raises(RefusedPlan, match=r"tensordesc_meta\[0\]"):
        plan.load(_write(tmp_path, doc, binaries), B, S, H200)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), True])
def test_a_float_scalar_must_be_a_finite_number(doc, binaries, value: Any) -> None:
    """JSON cannot carry NaN (plan.load refuses the literal, below): the document is validated directly."""
    _scalar_fp32(doc, value)
    with pytest.raises(RefusedPlan, match=r"\(M\)\.value: expected a finite number for fp32$"):
        plan.validate(doc, binaries, B, S, H200)


GLUON_DESC = (
    "tensordesc<bf16[64, 64],NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, "
    "transposed=False, fp4_padded=False, cga_layout=[])>"
)


@pytest.mark.parametrize(
    ("ty", "ok"),
    [
        (GLUON_DESC, True),  # what a Gluon kernel's host descriptor is called (seen on the H200)
        (GLUON_DESC.replace("transposed=False", "transposed=True"), True),
        (GLUON_DESC.replace("element_bitwidth=16", "element_bitwidth=32"), False),  # not bf16's
        (GLUON_DESC.replace("rank=2", "rank=3"), False),  # not the block's rank
        (GLUON_DESC.replace("fp4_padded=False", "fp4_padded=True"), False),
        (GLUON_DESC.replace("cga_layout=[]", "cga_layout=[[0, 1]]"), False),
        (GLUON_DESC.replace("NVMMASharedLayout", "SwizzledSharedLayout"), False),
        (GLUON_DESC[:-1] + ");\nabort();>", False),
        ("tensordesc<bf16[64, 64]," + "x" * 200 + ">", False),
    ],
)
def test_a_gluon_descriptor_type_is_kept_only_in_its_plain_form(ty: str, ok: bool) -> None:
    """The signature's text reaches Triton's generated C launcher: a descriptor's layout is accepted only as the
    plain NVMMA layout of its dtype and rank."""
    if ok:
        assert plan.signature_type(ty, "t") == ty
        assert plan.desc_block(ty) == ("bf16", (64, 64))
    else:
        with pytest.raises(RefusedPlan):
            plan.signature_type(ty, "t")


def test_a_warp_specialised_kernel_s_warp_count_is_kept(doc, binaries) -> None:
    """A Gluon kernel with ``warp_specialize`` runs three warpgroups: 12 warps, not a power of two (the H200 replay
    refused the first one: the contract had assumed powers of two)."""
    _kernel(doc).update(num_warps=12)
    assert plan.validate(doc, binaries, B, S, H200).kernels[0].num_warps == 12


def test_a_finite_float_scalar_is_kept(doc, binaries) -> None:
    _scalar_fp32(doc, 2)
    p = plan.validate(doc, binaries, B, S, H200)
    assert p.launches[0].args[11] == Arg("scalar", value=2.0)


def test_a_plan_for_another_case_is_refused(recorded, tmp_path: Path) -> None:
    folder = plan.write(recorded, tmp_path)
    with pytest.raises(RefusedPlan, match=r"^plan: recorded for B2_S128, not B2_S256$"):
        plan.load(folder, B, 2 * S, H200)


@pytest.mark.parametrize(
    ("limits", "match"),
    [
        (Limits(arch=100, max_shared=232448), r"^plan\.kernels\[0\]\.arch: compiled for sm_90, the device is sm_100$"),
        (
            Limits(arch=90, max_shared=100_000),
            r"^plan\.kernels\[0\]\.shared: '\d+' is not an integer in \[0, 100000\]$",
        ),
        (Limits(arch=90, max_shared=232448, max_threads=128), r"num_warps: '8' is not an integer in \[1, 4\]$"),
    ],
)
def test_a_plan_the_device_cannot_run_is_refused(recorded, tmp_path: Path, limits: Limits, match: str) -> None:
    folder = plan.write(recorded, tmp_path)
    with pytest.raises(RefusedPlan, match=match):
        plan.load(folder, B, S, limits)


def test_a_symbolic_link_is_not_followed(recorded, tmp_path: Path) -> None:
    folder = plan.write(recorded, tmp_path / "real")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "plan.json").symlink_to(folder / "plan.json")
    (linked / "k0.bin").write_bytes(recorded.kernels[0].binary)
    with pytest.raises(RefusedPlan, match=r"^file plan\.json: Too many levels of symbolic links$"):
        plan.load(linked, B, S, H200)
    (linked / "plan.json").unlink()
    (linked / "plan.json").write_bytes((folder / "plan.json").read_bytes())
    (linked / "k0.bin").unlink()
    (linked / "k0.bin").symlink_to(folder / "k0.bin")
    with pytest.raises(RefusedPlan, match=r"^file k0\.bin: Too many levels of symbolic links$"):
        plan.load(linked, B, S, H200)


def test_a_plan_file_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plan.json").mkdir()
    with pytest.raises(RefusedPlan, match=r"^file plan\.json: not a regular file$"):
        plan.load(tmp_path, B, S, H200)


def test_a_missing_plan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusedPlan, match=r"^file plan\.json: No such file or directory$"):
        plan.load(tmp_path, B, S, H200)


def test_a_file_over_its_cap_is_refused(recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = plan.write(recorded, tmp_path)
    size = (folder / "plan.json").stat().st_size
    monkeypatch.setattr(plan, "MAX_PLAN_BYTES", size - 1)
    with pytest.raises(RefusedPlan, match=rf"^file plan\.json: {size} bytes \(at most {size - 1}\)$"):
        plan.load(folder, B, S, H200)
    monkeypatch.setattr(plan, "MAX_PLAN_BYTES", size)
    assert plan.load(folder, B, S, H200) == recorded
    monkeypatch.setattr(plan, "MAX_BINARY_BYTES", 1024)
    with pytest.raises(RefusedPlan, match=r"^file k0\.bin: \d+ bytes \(at most 1024\)$"):
        plan.load(folder, B, S, H200)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b"{", r"^plan\.json: not JSON \(Expecting property name"),
        (b"\xff\xfe", r"^plan\.json: not JSON \('utf-8' codec can't decode"),
        (b'{"plan_version": NaN}', r"^plan\.json: not JSON \(NaN is not JSON\)$"),
        (b'{"plan_version": -Infinity}', r"^plan\.json: not JSON \(-Infinity is not JSON\)$"),
        (b"[]", r"^plan: expected an object$"),
    ],
)
def test_a_plan_file_that_is_not_a_json_object_is_refused(tmp_path: Path, text: bytes, match: str) -> None:
    (tmp_path / "plan.json").write_bytes(text)
    with pytest.raises(RefusedPlan, match=match):
        plan.load(tmp_path, B, S, H200)


def test_a_nan_scalar_written_by_json_is_refused_as_not_json(doc, binaries, tmp_path: Path) -> None:
    _scalar_fp32(doc, float("nan"))
    folder = _write(tmp_path, doc, binaries)
    assert b"NaN" in (folder / "plan.json").read_bytes()
    with pytest.raises(RefusedPlan, match=r"^plan\.json: not JSON \(NaN is not JSON\)$"):
        plan.load(folder, B, S, H200)


# ------------------------------------------------------------------------------------------------ replay launcher
def test_the_replays_launcher_is_the_one_triton_builds_for_the_compiled_kernel(compiled, recorded) -> None:
    (k,) = recorded.kernels
    src, md = replay.launcher_source(k), replay.launcher_metadata(k)
    ours = driver.make_launcher(src.constants, src.signature, md.tensordesc_meta)
    tritons = driver.make_launcher(compiled.src.constants, compiled.src.signature, compiled.metadata.tensordesc_meta)
    assert ours == tritons
    assert list(src.signature.items()) == list(compiled.src.signature.items())


def test_the_replays_launcher_metadata_is_the_compiled_kernels(compiled, recorded) -> None:
    md = replay.launcher_metadata(recorded.kernels[0])
    fields = (
        "num_ctas",
        "global_scratch_size",
        "global_scratch_align",
        "profile_scratch_size",
        "profile_scratch_align",
        "launch_cooperative_grid",
        "launch_pdl",
        "tensordesc_meta",
    )
    assert {f: getattr(md, f) for f in fields} == {f: getattr(compiled.metadata, f) for f in fields}
    k = recorded.kernels[0]
    assert (k.num_warps, k.num_ctas, k.shared) == compiled.packed_metadata  # what Replay passes the launcher


class _FakeUtils:
    """Triton's ``fill_tma_descriptor`` (it needs a GPU): what it was given, as the 'descriptor' it returns."""

    def fill_tma_descriptor(self, ptr: int, *rest: Any) -> tuple:
        return ("tma", ptr, *(list(x) if isinstance(x, list | tuple | torch.Size) else x for x in rest))


@pytest.fixture
def fake_tma(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=SimpleNamespace(utils=_FakeUtils())))


def test_a_replayed_descriptor_is_read_as_a_host_tensor_descriptor(fake_tma) -> None:
    base = replay._Pointer(0x7000)
    desc = replay._Descriptor(base, [256, 2048], [2048, 1], "zero")
    expanded = driver.make_tensordesc_arg(desc, None)
    assert expanded[0] is base and expanded[0].data_ptr() == 0x7000
    assert expanded[1:] == [256, 2048, 2048, 1, False, 256, 2048, 2048, 1]
    assert driver.make_tensordesc_arg(replay._Descriptor(base, [256, 2048], [2048, 1], "nan"), None)[5] is True
    meta = {"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [64, 64], "fp4_padded": False}
    filled = ("tma", 0x7000, 3, 2, driver.TMA_DTYPE_DEVICE_TO_HOST[10], [64, 64], [256, 2048], [2048, 1], 0)
    assert driver.make_tensordesc_arg(desc, meta) == [filled, 256, 2048, 2048, 1]


def _launched(signature: dict, tensordesc_meta: list | None, values: tuple) -> list:
    """What Triton's launcher hands its C launch function for ``values`` (descriptors expanded by Triton's own
    wrapper), with every pointer as its address; constexprs (which the C launcher skips) as None."""
    seen: list = []
    launch = driver.wrap_handle_tensordesc(lambda *a: seen.extend(a), signature, tensordesc_meta)
    values = tuple(None if ty == "constexpr" else v for ty, v in zip(signature.values(), values, strict=True))
    launch(*([0] * BASE_ARGS), *values)
    return [v.data_ptr() if hasattr(v, "data_ptr") else v for v in seen[BASE_ARGS:]]


def test_the_replay_passes_the_launcher_what_the_kernel_passed_it(compiled, call, recorded, fake_tma) -> None:
    """The replay's arguments, rebuilt from the plan and the same buffers, reach Triton's launcher as the kernel's
    own did: the same addresses, the same TMA descriptors, the same scalars."""
    bases = {key: t.data_ptr() for key, t in call.known.items()}
    rebuilt = tuple(replay.Replay._arg(None, a, bases) for a in recorded.launches[0].args)  # type: ignore[arg-type]
    signature, meta = compiled.src.signature, compiled.metadata.tensordesc_meta
    ours = _launched(signature, meta, rebuilt)
    assert ours == _launched(signature, meta, call.values)
    assert sum(isinstance(v, tuple) and v[0] == "tma" for v in ours) == 6
    assert _launched(signature, None, rebuilt) == _launched(signature, None, call.values)


# ------------------------------------------------------------------------------------------------ interpreter's judge
def _round_tensors() -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    inputs = (torch.zeros(3, 4, dtype=torch.bfloat16), torch.zeros(5, dtype=torch.bfloat16), torch.zeros(2, 2))
    out = (torch.full((2, 3), float("nan"), dtype=torch.bfloat16), torch.full((4,), float("nan"), dtype=torch.bfloat16))
    return inputs, out


def test_recorded_outputs_fill_the_outputs_and_the_inputs_of_each_round(tmp_path: Path) -> None:
    inputs, out = _round_tensors()
    written = [torch.randn(t.shape).to(t.dtype) for t in (*out, *inputs)]
    (tmp_path / "round0.bin").write_bytes(b"".join(t.view(-1).view(torch.uint8).numpy().tobytes() for t in written))
    judge = RecordedOutputs(tmp_path, B, S)
    result = judge(*inputs, out=out)
    assert result is out
    for got, want in zip((*out, *inputs), written, strict=True):
        assert torch.equal(got, want)
    with pytest.raises(RuntimeError, match=r"the kernel's process left no outputs for this round \(file round1\.bin"):
        judge(*inputs, out=out)  # the next round reads round1.bin, which is not there


def test_a_round_file_of_another_size_is_refused(tmp_path: Path) -> None:
    inputs, out = _round_tensors()
    expected = sum(t.numel() * t.element_size() for t in (*out, *inputs))
    (tmp_path / "round0.bin").write_bytes(b"\0" * (expected - 2))
    (tmp_path / "round1.bin").write_bytes(b"\0" * (expected + 2))
    judge = RecordedOutputs(tmp_path, B, S)
    with pytest.raises(RuntimeError, match=rf"left {expected - 2} bytes of outputs, not {expected}$"):
        judge(*inputs, out=out)
    with pytest.raises(RuntimeError, match=rf"left no outputs for this round \(file round1\.bin: {expected + 2} bytes"):
        judge(*inputs, out=out)
