"""The case process: ``python -I -m ci.harness.case_process --mode auto|gpu|cpu-interpreter --role ROLE``.

One process runs cases one at a time, so CUDA initialisation and kernel compiles are paid once. Its role says
what it does (docs/replay.md):

- ``record`` (with ``--candidate DIR``, the commit's tree, read-only, inside the sandbox; or this installation's
  own kernel): the only process that runs the commit's code, and it only records. On a GPU it writes the plan of
  one steady call per case (``ci.harness.record``); under the CPU interpreter it runs the correctness rounds on
  inputs drawn from the case's seed and writes the outputs as raw bytes, and times the kernel (a functional
  figure only). Nothing it says is believed: the parent reads only its files, and a judge decides.
- ``judge``: the harness's own process; it never imports any kernel. It loads and validates the plan and replays
  it (``ci.harness.replay``) through the correctness rounds and the timed loops, or, under the interpreter,
  compares the recorded outputs with its own float32 reference; and it times the baselines.
- ``direct``: the kernel called in this process, correctness and timing too (a developer's own measurement,
  ``solci measure --direct``; its documents are never stored as CI results).

A process that imports the commit's kernel first imports everything it measures with (its timers, the float32
reference, the correctness rule, the workload) from the runner's installation, then puts the commit's own
``kernel`` package in place of the harness's under the same name, so the kernel's own absolute imports work
while the harness keeps its references. Nothing else of the commit is imported: not its ``ci/`` or ``storage/``,
not a ``sitecustomize`` or ``.pth`` in its tree (the commit's tree is not on ``sys.path``, and ``python -I``
ignores ``PYTHON*`` variables). The in-process integrity checks (``Integrity``: the functions and constants the
harness relies on are still the ones it imported, no Python thread was started, the default stream is current)
stay as a second wall there; a failed one makes the case an error whose message starts with ``integrity:``.

It talks JSON lines: stdout is reserved for messages (fd 1 is pointed at stderr before anything is imported,
so prints from kernels cannot corrupt it); the parent (``ci.harness.measure``) reads them with a deadline, takes
only the reply that carries its request's ``id``, computes every statistic from the raw samples itself and,
when the worker dies or hangs, records the case and starts a fresh worker.

Messages, worker -> parent:
  {"type": "hello", "mode", "role", "device", "hardware", "l2_bytes", "pid", "harness", "cupti"} or
  {"type": "hello", "error"}
  {"type": "phase", "id", "phase": str}                  before each step, so a hang or crash can be located
  {"type": "result", "id", "result": {...case fields...}, "fatal": bool}   fatal: the worker exits after it
  {"type": "recorded", "id", "result": {"refused", "error", "incorrect", "config", "warnings", "samples_us"},
   "fatal": bool}
parent -> worker:
  {"type": "case", "id", "batch_size", "seq_len", "protocols": [definitions], "seed", "baselines",
   and one of "impl" (direct), "plan": DIR (judge, GPU), "outputs": DIR (judge, interpreter)}
  {"type": "record", "id", "batch_size", "seq_len", "impl", "seed", "dir": DIR, "protocols", "rounds"}
  {"type": "exit"}
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import importlib
import importlib.machinery
import importlib.util
import json
import math
import os
import shutil
import sys
import threading
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ci.harness import sandbox

_TIMING_SEED_OFFSET = 1_000_003
KEEP_FOR_RECHECK = 3  # timed iterations, drawn at random after the loop, whose outputs are checked again

# What the harness measures with, beyond its own modules: replacing any of these is tampering.
WATCHED = (
    "time.perf_counter",
    "time.perf_counter_ns",
    "time.monotonic",
    "time.time",
    "statistics.median",
    "statistics.fmean",
    "json.dumps",
    "json.loads",
    "math.isfinite",
    "torch.cuda.synchronize",
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.current_stream",
    "torch.cuda.default_stream",
    "torch.cuda._sleep",
    "torch.cuda.mem_get_info",
    "torch.equal",
    "torch.isfinite",
    "torch.where",
    "torch.zeros",
    "torch.zeros_like",
    "torch.full",
    "torch.empty",
    "torch.randn",
    "torch.Generator",
    "torch.matmul",
    "torch.Tensor.clone",
    "torch.Tensor.copy_",
    "torch.Tensor.fill_",
    "torch.Tensor.float",
    "torch.Tensor.abs",
    "torch.Tensor.sum",
    "torch.Tensor.mean",
    "torch.Tensor.max",
    "torch.Tensor.view",
    "torch.Tensor.data_ptr",
    "torch.Tensor.to",
    "torch.Tensor.__sub__",
    "torch.Tensor.__matmul__",
    "torch.Tensor.__le__",
    "torch.Tensor.__eq__",
    "torch.profiler.profile",
    "random.SystemRandom",
    "random.SystemRandom.sample",
    "random.SystemRandom.getrandbits",
    "random.SystemRandom._randbelow",
    "random._urandom",
)
HARNESS_MODULES = (
    "ci.harness.case_process",
    "ci.harness.plan",
    "ci.harness.record",
    "ci.harness.timing",
    "ci.harness.hardware",
    "problem.reference",
    "problem.correctness",
    "problem.workload",
)


FILE_LIMIT_ENV = "SOLCI_WORKER_FILE_LIMIT_MB"
DEFAULT_FILE_LIMIT_MB = 256


def limit_file_size() -> int:
    """Cap every file this process writes (its stderr file on the runner's disk above all, also caches) at
    ``$SOLCI_WORKER_FILE_LIMIT_MB`` (default 256): a kernel printing without end gets EFBIG instead of filling
    the runner's disk. Soft and hard limits both, set before the kernel is imported, so it cannot raise them."""
    import resource

    cap = int(float(os.environ.get(FILE_LIMIT_ENV) or DEFAULT_FILE_LIMIT_MB) * 2**20)
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    return cap


def _claim_stdout() -> TextIO:
    """Keep the real stdout for messages; everything else written to fd 1 goes to stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def _resolve_mode(requested: str) -> str:
    if requested == "cpu-interpreter" or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return "cpu-interpreter"
    import torch  # does not import triton

    if torch.cuda.is_available():
        return "gpu"
    if requested == "gpu":
        raise RuntimeError("--mode gpu: torch sees no CUDA device")
    return "cpu-interpreter"


# ------------------------------------------------------------------------------------------------ loading
def load_impl(spec: str, candidate: str | Path | None = None) -> tuple[Callable, Any]:
    """``module:function`` or ``path/to/file.py:function`` -> (function, module).

    With ``candidate`` (a commit's tree): the module's top-level package is imported from that tree alone,
    in place of any module of that name the harness had (the harness keeps its own references)."""
    mod_name, sep, fn_name = spec.rpartition(":")
    if not sep or not mod_name or not fn_name:
        raise ValueError(f"--impl {spec!r}: expected MODULE:FUNCTION")
    if candidate is None and (mod_name.endswith(".py") or os.sep in mod_name):
        path = Path(mod_name).resolve()
        name = "_solci_impl_" + "".join(ch if ch.isalnum() else "_" for ch in path.stem)
        module = sys.modules.get(name)
        if module is None:
            mspec = importlib.util.spec_from_file_location(name, path)
            if mspec is None or mspec.loader is None:
                raise ImportError(f"--impl: cannot load {path}")
            module = _execute_module(name, mspec)
    elif candidate is not None:
        module = _import_from_tree(mod_name, Path(candidate))
    else:
        module = importlib.import_module(mod_name)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise AttributeError(f"--impl {spec!r}: {fn_name!r} is not a function of {module.__name__}")
    return fn, module


_LOADED: dict[str, Path] = {}  # top-level package -> the tree it was imported from


def _import_from_tree(mod_name: str, root: Path) -> types.ModuleType:
    """Import ``mod_name`` with its top-level package taken from ``root`` (the commit's tree)."""
    top = mod_name.split(".")[0]
    loaded = sys.modules.get(top)
    if _LOADED.get(top) != root or loaded is None or not _from_tree(loaded, root):
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]  # the harness's copies: it keeps references of its own
        spec = importlib.machinery.PathFinder.find_spec(top, [str(root)])
        if spec is None or spec.loader is None:
            raise ImportError(f"the commit has no package {top!r} (looked in {root})")
        _execute_module(top, spec)
        _LOADED[top] = root
    return importlib.import_module(mod_name)


def _execute_module(name: str, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
    """A new module ``name`` from ``spec``, in ``sys.modules`` while and after it runs (not when it fails)."""
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _from_tree(module: types.ModuleType, root: Path) -> bool:
    origin = getattr(module, "__file__", None) or ""
    return bool(origin) and Path(origin).resolve().is_relative_to(root.resolve())


# ------------------------------------------------------------------------------------------------ integrity
def _resolve(root: dict[str, Any], dotted: str) -> Any:
    head, *rest = dotted.split(".")
    obj = root[head]
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def _fingerprint(value: Any) -> Any:
    """What a value is, for the integrity check: identity; a function's code object too (which can be swapped
    under the same function); the contents of small containers (which can be changed in place)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        return (id(value), id(value.__code__), id(value.__defaults__), id(value.__kwdefaults__))
    if isinstance(value, (dict, list, set, tuple)) and len(value) < 200:
        try:
            return (id(value), repr(value))
        except Exception:
            return id(value)
    return id(value)


def _module_contents(name: str, mod: types.ModuleType) -> dict[str, Any]:
    """Fingerprints of a module's names and of the attributes of the classes it defines."""
    out: dict[str, Any] = {}
    for key, value in vars(mod).items():
        if key.startswith("__") or key in _MUTABLE_STATE:
            continue
        out[key] = _fingerprint(value)
        if isinstance(value, type) and value.__module__ == name:
            for attr, v in vars(value).items():
                if not attr.startswith("__"):
                    out[f"{key}.{attr}"] = _fingerprint(v)
    return out


_MUTABLE_STATE = frozenset({"_LOADED"})  # what the harness itself changes while it runs


class Integrity:
    """Identities of the functions and constants the harness measures with, taken before the commit's kernel
    is imported; ``problems()`` names what changed since, and the Python threads that appeared."""

    def __init__(self) -> None:
        import random
        import statistics
        import time

        import torch

        self.roots = {
            "time": time,
            "statistics": statistics,
            "json": json,
            "math": math,
            "torch": torch,
            "random": random,
        }
        self.watched = {name: id(_resolve(self.roots, name)) for name in WATCHED}
        self.modules = {name: sys.modules[name] for name in HARNESS_MODULES if name in sys.modules}
        self.contents = {name: _module_contents(name, mod) for name, mod in self.modules.items()}
        self.threads = {t.ident for t in threading.enumerate()}

    def problems(self) -> list[str]:
        out = [
            f"{name} was replaced" for name, ident in self.watched.items() if id(_resolve(self.roots, name)) != ident
        ]
        for name, mod in self.modules.items():
            if sys.modules.get(name) is not mod:
                out.append(f"module {name} was replaced")
            now = _module_contents(name, mod)
            before = self.contents[name]
            for key in before.keys() | now.keys():
                if before.get(key) != now.get(key):
                    out.append(f"{name}.{key} was changed")
        new = [t for t in threading.enumerate() if t.ident not in self.threads and t.is_alive()]
        out += [f"a Python thread was started ({t.name})" for t in new]
        return out


# ------------------------------------------------------------------------------------------------ the worker
def is_fatal(exc: BaseException) -> bool:
    """Errors after which the CUDA context may be unusable: the worker is replaced."""
    import torch

    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    if type(exc).__name__ in ("AcceleratorError", "CudaError"):
        return True
    text = str(exc)
    return any(
        s in text
        for s in (
            "CUDA error",
            "illegal memory access",
            "CUBLAS_STATUS",
            "cudaError",
            "device-side assert",
            "unspecified launch failure",
        )
    )


class IntegrityError(RuntimeError):
    """The commit's code changed what the harness measures with."""


ROLES = ("direct", "record", "judge")


class CaseProcess:
    """The sandboxed process that records, judges or directly measures the cases the parent sends."""

    def __init__(self, mode: str, send: Callable[[dict], None], candidate: str | None = None, role: str = "direct"):
        # lazy: the import order is the point: these load torch, which must come after main() has capped the
        # files this process writes, claimed stdout and set TRITON_INTERPRET, and before the commit's kernel
        import torch

        from ci.harness import plan as plan_contract
        from ci.harness import timing
        from ci.harness.hardware import Nvml, fingerprint
        from problem import correctness, reference, workload

        if role not in ROLES:
            raise ValueError(f"--role {role!r}: expected one of {ROLES}")
        if role == "judge" and candidate is not None:
            raise ValueError("a judge never loads a commit's tree")
        self.torch, self.timing, self.plan_contract = torch, timing, plan_contract
        self.reference, self.correctness, self.workload = reference, correctness, workload
        self.mode = mode
        self.role = role
        self.send = send
        self.candidate = candidate
        self.request_id: Any = None
        if mode == "gpu":
            self.device = torch.device("cuda", torch.cuda.current_device())
            torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference stays fp32
            torch.backends.cudnn.allow_tf32 = False
            self.nvml = Nvml(self.device)
            self.l2_bytes = torch.cuda.get_device_properties(self.device).L2_cache_size
        else:
            self.device = torch.device("cpu")
            self.nvml = Nvml(None)
            self.l2_bytes = None
        self.hardware = fingerprint(self.device, mode, self.nvml)
        self.timer = timing.Timer(self.device, self.l2_bytes, self.hardware.get("max_sm_clock_mhz"))
        self.cupti = self.timer.cupti_works() if mode == "gpu" else False
        self.default_stream = torch.cuda.current_stream(self.device) if mode == "gpu" else None
        self.recorder = None
        if role == "record" and mode == "gpu":
            # lazy: Triton's launcher is wrapped only in a recording process on a GPU (never in a judge)
            from ci.harness.record import Recorder

            self.recorder = Recorder()  # before the commit's kernel is imported: it sees every kernel load
        self.integrity = Integrity()  # before any code of the commit runs

    def hello(self) -> dict:
        return {
            "type": "hello",
            "mode": self.mode,
            "role": self.role,
            "device": str(self.device),
            "hardware": self.hardware,
            "l2_bytes": self.l2_bytes,
            "pid": os.getpid(),
            "harness": self.timing.harness_version(),
            "cupti": self.cupti,
        }

    def phase(self, text: str) -> None:
        self.send({"type": "phase", "id": self.request_id, "phase": text})

    def verify(self, stage: str) -> None:
        problems = self.integrity.problems()
        mods = self.integrity.modules
        for attr, name in (
            ("timing", "ci.harness.timing"),
            ("reference", "problem.reference"),
            ("correctness", "problem.correctness"),
            ("workload", "problem.workload"),
        ):
            if getattr(self, attr) is not mods.get(name):
                problems.append(f"the harness's {name} was swapped")
        if type(self.timer) is not self.timing.Timer or "run" in vars(self.timer):
            problems.append("the harness's timer was replaced")
        if self.default_stream is not None and self.torch.cuda.current_stream(self.device) != self.default_stream:
            problems.append("the current CUDA stream is no longer the default stream")
        if problems:
            raise IntegrityError(f"integrity: {stage}: " + "; ".join(problems[:6]))

    def _kernel_config(self, module: Any, m: int, warnings: list[str]) -> dict | None:
        config_fn = getattr(module, "kernel_config", None)
        if not callable(config_fn):
            return None
        try:
            cfg = config_fn(m, self.device)
            return cfg.as_dict() if hasattr(cfg, "as_dict") else None
        except Exception as exc:  # a config lookup failure is not the kernel's failure
            warnings.append(f"kernel_config: {exc}")
            return None

    # -------------------------------------------------------------------------------------------- judge, direct
    def _judged_kernel(self, req: dict, b: int, s: int, res: dict) -> tuple[Callable, bool]:
        """The kernel a case request names: (callable, whether the kernel is timed here)."""
        if self.role == "judge":
            if req.get("plan"):
                # lazy: Triton's driver is loaded only by a judge that replays on a GPU
                from ci.harness.replay import Replay, device_limits

                self.phase("loading the plan")
                try:
                    plan = self.plan_contract.load(Path(req["plan"]), b, s, device_limits(self.device))
                    replay = Replay(plan, self.device)
                except self.plan_contract.RefusedPlan as exc:
                    raise Unreplayable(str(exc)) from None
                res["config"] = plan.config
                res["warnings"] += [str(w)[:300] for w in plan.recorded.get("warnings", [])][:4]
                return replay, True
            if req.get("outputs"):
                return RecordedOutputs(Path(req["outputs"]), b, s), False
            raise ValueError("a judge is given a plan or recorded outputs, never a kernel to import")
        if self.role != "direct":
            raise ValueError(f"a {self.role} process does not measure cases")
        self.phase("load impl")
        fn, module = load_impl(req["impl"], self.candidate)
        self.verify("after importing the kernel")
        res["config"] = self._kernel_config(module, b * s, res["warnings"])
        return fn, True

    def run_case(self, req: dict) -> tuple[dict, bool]:
        timing = self.timing
        b, s = int(req["batch_size"]), int(req["seq_len"])
        protocols = [timing.Protocol.from_dict(p) for p in req["protocols"]]
        seed = int(req.get("seed", 0))
        res: dict[str, Any] = {
            "status": "pass",
            "error": None,
            "correctness": None,
            "timings": [],
            "config": None,
            "telemetry": None,
            "warnings": [],
        }
        fatal = False
        tele_before = self.nvml.sample()
        try:
            fn, time_kernel = self._judged_kernel(req, b, s, res)
            self.phase("correctness")
            corr = self.correctness.check_rounds(fn, b, s, self.device, protocols[0].rounds, seed)
            self.verify("after the correctness rounds")
            res["correctness"] = corr.doc
            if not corr.ok:
                res["status"], res["error"] = "incorrect", corr.reason
            impls: list[tuple[str, Callable, bool]] = [("kernel", fn, True)] if corr.ok and time_kernel else []
            if req.get("baselines", True):
                impls += [
                    ("eager", self.reference.attn_output_proj_backward_eager, False),
                    ("cublas", self.reference.two_matmuls, False),
                ]
            make_set = self.reference.timing_sets(b, s, self.device, seed + _TIMING_SEED_OFFSET)
            draw = make_set.draw  # the maker's own, taken before any timed call of the kernel
            made = [0]  # input sets made so far (the maker's call numbers), counted here

            def next_set(with_out: bool) -> tuple[tuple, dict]:
                made[0] += 1
                return make_set(with_out)

            for k, proto in enumerate(protocols):
                for impl, f, with_out in impls:
                    self.phase(f"timing {impl} ({proto.timer})")
                    first = made[0] + proto.warmup  # the maker's call number of this run's timed iteration 0
                    try:
                        run = self.timer.run(
                            proto, f, lambda w=with_out: next_set(w), keep=KEEP_FOR_RECHECK if with_out else 0
                        )
                    except Exception as exc:
                        if k == 0 or is_fatal(exc):
                            raise
                        res["warnings"].append(f"{proto.name} {impl}: {type(exc).__name__}: {exc}")
                        continue
                    if impl == "kernel":
                        self.verify(f"after timing the kernel ({proto.timer})")
                        bad = self.correctness.recheck(run.kept, b * s, lambda it, c=first: draw(c + it.index))
                        if bad:
                            res["status"], res["error"] = "incorrect", f"after the timed loop ({proto.timer}): {bad}"
                            impls = [x for x in impls if x[0] != "kernel"]
                    run.kept = []
                    res["timings"].append(timing.timing_entry(impl, proto, run))
                if res["status"] != "pass":
                    res["timings"] = [t for t in res["timings"] if t["impl"] != "kernel"]
        except IntegrityError as exc:
            fatal = True
            res["status"], res["error"] = "error", str(exc)
            res["timings"] = []
        except Unreplayable as exc:
            res["status"], res["error"] = "error", f"{self.plan_contract.UNREPLAYABLE} {exc}"
            res["timings"] = []
        except Exception as exc:
            fatal = self.mode == "gpu" and is_fatal(exc)
            res["status"] = "error"
            tb = traceback.format_exc()
            res["error"] = f"{type(exc).__name__}: {exc}\n{tb[-3000:]}"
        res["telemetry"] = {"before": tele_before, "after": self.nvml.sample()} if tele_before else None
        res["timings"] = _clean(res["timings"])
        res["correctness"] = _clean(res["correctness"])
        return res, self._settle(fatal, res["warnings"])

    def _settle(self, fatal: bool, warnings: list[str]) -> bool:
        gc.collect()
        if self.mode == "gpu" and not fatal:
            try:
                self.torch.cuda.synchronize(self.device)
                self.torch.cuda.empty_cache()
            except Exception as exc:
                fatal = True
                warnings.append(f"device unusable after the case: {exc}")
        return fatal

    # -------------------------------------------------------------------------------------------- record
    def _call_buffers(self, b: int, s: int, seed: int) -> tuple[tuple, tuple, dict]:
        gen = self.torch.Generator(device=self.device).manual_seed(seed)
        inputs = self.reference.make_inputs(b, s, self.device, generator=gen)
        outputs = self.correctness.poisoned_outputs(b, s, self.device)
        known = {("input", i): t for i, t in enumerate(inputs)}
        known.update({("output", i): t for i, t in enumerate(outputs)})
        return inputs, outputs, known

    def record_case(self, req: dict) -> tuple[dict, bool]:
        """Record one case (see the module docstring); the reply is a hint to the parent, never a figure."""
        b, s = int(req["batch_size"]), int(req["seq_len"])
        seed = int(req.get("seed", 0))
        folder = Path(req["dir"])
        _clear_earlier_records(folder)
        res: dict[str, Any] = {
            "refused": None,
            "error": None,
            "incorrect": None,
            "config": None,
            "warnings": [],
            "samples_us": None,
        }
        fatal = False
        try:
            if self.role != "record":
                raise ValueError(f"a {self.role} process does not record")
            self.phase("load impl")
            fn, module = load_impl(req["impl"], self.candidate)
            self.verify("after importing the kernel")
            res["config"] = self._kernel_config(module, b * s, res["warnings"])
            if self.mode == "gpu":
                self._record_plan(fn, b, s, seed, folder, res)
            else:
                self._record_outputs(fn, b, s, seed, req, folder, res)
        except IntegrityError as exc:
            fatal = True
            res["error"] = str(exc)
        except self.plan_contract.RefusedPlan as exc:
            res["refused"] = str(exc)
        except Exception as exc:
            fatal = self.mode == "gpu" and is_fatal(exc)
            res["error"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}"
        return _clean(res), self._settle(fatal, res["warnings"])

    def _record_plan(self, fn: Callable, b: int, s: int, seed: int, folder: Path, res: dict) -> None:
        from dataclasses import replace

        # lazy: as for Recorder above
        from ci.harness.record import RECORDED_CALLS, record_call

        torch, timing = self.torch, self.timing
        calls = [0]

        def make_call() -> tuple[tuple, tuple, dict]:
            calls[0] += 1
            return self._call_buffers(b, s, seed + _TIMING_SEED_OFFSET * 7 + calls[0])

        if not self.cupti:
            res["warnings"].append("GPU work outside the launches was not checked (CUPTI does not work here)")
        self.phase("recording")
        plan = record_call(
            self.recorder,
            fn,
            make_call,
            b,
            s,
            lambda: torch.cuda.synchronize(self.device),
            timing.ActivityProfile if self.cupti else None,
        )
        self.verify("after recording the kernel")
        recorded = {"calls": RECORDED_CALLS, "gpu_work_checked": bool(self.cupti), "warnings": res["warnings"][:4]}
        self.plan_contract.write(replace(plan, config=res["config"], recorded=recorded), folder)

    def _record_outputs(self, fn: Callable, b: int, s: int, seed: int, req: dict, folder: Path, res: dict) -> None:
        """Under the interpreter: each correctness round's outputs (and its inputs as the kernel left them) as
        raw bytes, for the judge to compare; then the kernel's wall-clock timing (functional only)."""
        torch, timing = self.torch, self.timing
        folder.mkdir(parents=True, exist_ok=True)
        protocols = [timing.Protocol.from_dict(p) for p in req["protocols"]]
        for r in range(int(req["rounds"])):
            self.phase(f"correctness round {r}")
            inputs, outputs, _known = self._call_buffers(b, s, seed + r)
            fn(*inputs, out=outputs)
            with open(folder / f"round{r}.bin", "wb") as fh:
                for t in (*outputs, *inputs):
                    fh.write(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
        self.verify("after the correctness rounds")
        proto = protocols[0]
        make_set = self.reference.timing_sets(b, s, self.device, seed + _TIMING_SEED_OFFSET)
        made = [0]

        def next_set() -> tuple[tuple, dict]:
            made[0] += 1
            return make_set(True)

        self.phase(f"timing kernel ({proto.timer})")
        run = self.timer.run(proto, fn, next_set, keep=KEEP_FOR_RECHECK)
        self.verify(f"after timing the kernel ({proto.timer})")
        bad = self.correctness.recheck(run.kept, b * s, lambda it: make_set.draw(proto.warmup + it.index))
        if bad:
            res["incorrect"] = f"after the timed loop ({proto.timer}): {bad}"
        res["samples_us"] = [float(x) for x in run.samples_us]


class Unreplayable(RuntimeError):
    """The plan a recording left cannot be replayed (its message says why): the run is rejected."""


class RecordedOutputs:
    """The interpreter's judge: called like the kernel, it puts into ``out=`` the outputs the recording process
    wrote for this round, and into the inputs what the kernel left of them, so the harness's correctness rounds
    compare what the kernel did with the harness's own reference."""

    def __init__(self, folder: Path, batch_size: int, seq_len: int) -> None:
        self.folder = folder
        self.round = 0

    def __call__(self, *inputs: Any, out: tuple) -> tuple:
        # lazy: the import order is the point (torch after main()'s set-up; see CaseProcess.__init__)
        import torch

        from ci.harness.plan import RefusedPlan, read_file

        tensors = (*out, *inputs)
        expected = sum(t.numel() * t.element_size() for t in tensors)
        path = self.folder / f"round{self.round}.bin"
        self.round += 1
        try:
            data = read_file(path, expected)
        except RefusedPlan as exc:
            raise RuntimeError(f"the kernel's process left no outputs for this round ({exc})") from None
        if len(data) != expected:
            raise RuntimeError(f"the kernel's process left {len(data)} bytes of outputs, not {expected}")
        pos = 0
        for t in tensors:
            n = t.numel() * t.element_size()
            t.view(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(data[pos : pos + n]), dtype=torch.uint8))
            pos += n
        return out


def _clean(obj: Any) -> Any:
    """Strict JSON: non-finite floats (an error figure of a NaN output, say) become None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def _clear_earlier_records(folder: Path) -> None:
    """Remove the folders of the cases recorded before (the parent copied each before sending the next): the
    write budget then holds one case's files, not the run's."""
    parent = folder.parent
    if parent.name == "record" and parent.is_dir():
        for old in parent.iterdir():
            if old.name != folder.name:
                shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.harness.case_process", description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("auto", "gpu", "cpu-interpreter"), default="auto")
    parser.add_argument("--candidate", help="the commit's tree: its kernel package is the one measured")
    parser.add_argument("--role", choices=ROLES, default="direct", help="what this process does (see above)")
    args = parser.parse_args(argv)
    limit_file_size()
    sandbox.seed_triton_cache()  # the commit's kept compiles, before any of its code (a budgeted sandbox only)
    proto = _claim_stdout()
    faulthandler.enable(sys.stderr)  # a crash leaves its Python stack in the stderr tail

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    try:
        mode = _resolve_mode(args.mode)
        if mode == "cpu-interpreter":
            os.environ["TRITON_INTERPRET"] = "1"  # before triton or the kernel is imported
        worker = CaseProcess(mode, send, args.candidate, args.role)
    except Exception as exc:
        send({"type": "hello", "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"})
        return 2
    send(worker.hello())
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        if msg.get("type") == "exit":
            break
        if msg.get("type") in ("case", "record"):
            worker.request_id = msg.get("id")
            if msg["type"] == "case":
                result, fatal = worker.run_case(msg)
            else:
                result, fatal = worker.record_case(msg)
            reply = "result" if msg["type"] == "case" else "recorded"
            send({"type": reply, "id": msg.get("id"), "result": result, "fatal": fatal})
            if fatal:
                return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
