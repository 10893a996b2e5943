"""The case process: ``python -I -m ci.harness.case_process --mode auto|gpu|cpu-interpreter [--candidate DIR]``.

One process runs cases one at a time, so CUDA initialisation and kernel compiles are paid once. It is the
only process that runs the commit's code, and the only code of the commit it runs is its kernel: with
``--candidate DIR`` (the commit's tree, read-only, inside the sandbox) the harness first imports everything
it measures with (its timers, the float32 reference, the correctness rule, the workload) from the runner's
installation, then puts the commit's own ``kernel`` package in place of the harness's under the same name, so
the kernel's own absolute imports work while the harness keeps its references. Nothing else of the commit is
imported: not its ``ci/`` or ``storage/``, not a ``sitecustomize`` or ``.pth`` in its tree (the commit's tree
is not on ``sys.path``, and ``python -I`` ignores ``PYTHON*`` variables).

After importing the kernel, after its correctness rounds and after its timed loop, the harness checks that the
functions and constants it relies on are still the ones it imported (``Integrity``), that the kernel started
no Python thread and left the default stream current, and, after timing, that the outputs of timed iterations
drawn at random once the loop has run match the reference of that iteration's own inputs (every iteration gets
new input values, so reusing an earlier call's results fails). A failed integrity check makes the case an
error and ends the worker; a failed output check makes it incorrect.

It talks JSON lines: stdout is reserved for messages (fd 1 is pointed at stderr before anything is imported,
so prints from kernels cannot corrupt it); the parent (``ci.harness.measure``) reads them with a deadline, computes
every statistic from the raw samples itself and, when the worker dies or hangs, records the case and starts a
fresh worker.

Messages, worker -> parent:
  {"type": "hello", "mode", "device", "hardware", "l2_bytes", "pid", "harness", "cupti"} or {"type": "hello", "error"}
  {"type": "phase", "phase": str}                     before each step, so a hang or crash can be located
  {"type": "result", "result": {...case fields...}, "fatal": bool}   fatal: the worker exits after it
parent -> worker:
  {"type": "case", "batch_size", "seq_len", "impl", "protocols": [definitions], "seed", "baselines"}
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
import sys
import threading
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

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
            module = importlib.util.module_from_spec(mspec)
            sys.modules[name] = module
            mspec.loader.exec_module(module)
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
        module = importlib.util.module_from_spec(spec)
        sys.modules[top] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[top]
            raise
        _LOADED[top] = root
    return importlib.import_module(mod_name)


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


class CaseProcess:
    """The sandboxed process that calls a kernel on the cases the parent (``ci.harness.measure``) sends."""

    def __init__(self, mode: str, send: Callable[[dict], None], candidate: str | None = None) -> None:
        # lazy: the import order is the point: these load torch, which must come after main() has capped the
        # files this process writes, claimed stdout and set TRITON_INTERPRET, and before the commit's kernel
        import torch

        from ci.harness import timing
        from ci.harness.hardware import Nvml, fingerprint
        from problem import correctness, reference, workload

        self.torch, self.timing = torch, timing
        self.reference, self.correctness, self.workload = reference, correctness, workload
        self.mode = mode
        self.send = send
        self.candidate = candidate
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
        self.integrity = Integrity()  # before any code of the commit runs

    def hello(self) -> dict:
        return {
            "type": "hello",
            "mode": self.mode,
            "device": str(self.device),
            "hardware": self.hardware,
            "l2_bytes": self.l2_bytes,
            "pid": os.getpid(),
            "harness": self.timing.harness_version(),
            "cupti": self.cupti,
        }

    def phase(self, text: str) -> None:
        self.send({"type": "phase", "phase": text})

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

    def run_case(self, req: dict) -> tuple[dict, bool]:
        torch, timing = self.torch, self.timing
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
            self.phase("load impl")
            fn, module = load_impl(req["impl"], self.candidate)
            self.verify("after importing the kernel")
            config_fn = getattr(module, "kernel_config", None)
            if callable(config_fn):
                try:
                    cfg = config_fn(b * s, self.device)
                    res["config"] = cfg.as_dict() if hasattr(cfg, "as_dict") else None
                except Exception as exc:  # a config lookup failure is not the kernel's failure
                    res["warnings"].append(f"kernel_config: {exc}")
            self.phase("correctness")
            corr = self.correctness.check_rounds(fn, b, s, self.device, protocols[0].rounds, seed)
            self.verify("after the correctness rounds")
            res["correctness"] = corr.doc
            if not corr.ok:
                res["status"], res["error"] = "incorrect", corr.reason
            impls: list[tuple[str, Callable, bool]] = [("kernel", fn, True)] if corr.ok else []
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
        except Exception as exc:
            fatal = self.mode == "gpu" and is_fatal(exc)
            res["status"] = "error"
            tb = traceback.format_exc()
            res["error"] = f"{type(exc).__name__}: {exc}\n{tb[-3000:]}"
        res["telemetry"] = {"before": tele_before, "after": self.nvml.sample()} if tele_before else None
        res["timings"] = _clean(res["timings"])
        res["correctness"] = _clean(res["correctness"])
        gc.collect()
        if self.mode == "gpu" and not fatal:
            try:
                torch.cuda.synchronize(self.device)
                torch.cuda.empty_cache()
            except Exception as exc:
                fatal = True
                res["warnings"].append(f"device unusable after the case: {exc}")
        return res, fatal


def _clean(obj: Any) -> Any:
    """Strict JSON: non-finite floats (an error figure of a NaN output, say) become None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.harness.case_process", description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("auto", "gpu", "cpu-interpreter"), default="auto")
    parser.add_argument("--candidate", help="the commit's tree: its kernel package is the one measured")
    args = parser.parse_args(argv)
    limit_file_size()
    proto = _claim_stdout()
    faulthandler.enable(sys.stderr)  # a crash leaves its Python stack in the stderr tail

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    try:
        mode = _resolve_mode(args.mode)
        if mode == "cpu-interpreter":
            os.environ["TRITON_INTERPRET"] = "1"  # before triton or the kernel is imported
        worker = CaseProcess(mode, send, args.candidate)
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
        if msg.get("type") == "case":
            result, fatal = worker.run_case(msg)
            send({"type": "result", "result": result, "fatal": fatal})
            if fatal:
                return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
