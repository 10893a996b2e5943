"""The isolated case worker: ``python -m ci.worker --mode auto|gpu|cpu-interpreter``.

One process runs cases one at a time, so CUDA initialisation and kernel compiles are paid once. It talks JSON
lines: stdout is reserved for messages (fd 1 is pointed at stderr before anything is imported, so prints from
kernels cannot corrupt it); the parent (``ci.measure``) reads them with a deadline and, when the worker dies
or hangs, records the case and starts a fresh worker.

Messages, worker -> parent:
  {"type": "hello", "mode", "device", "hardware", "l2_bytes", "pid"}   or {"type": "hello", "error": str}
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
import importlib.util
import json
import math
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

OUTPUT_NAMES = ("grad_attn_output", "grad_weight")
INPUT_NAMES = ("grad_output", "reshaped", "weight")
_TIMING_SEED_OFFSET = 1_000_003


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


# ------------------------------------------------------------------------------------------------ helpers
def load_impl(spec: str) -> tuple[Callable, Any]:
    """``module:function`` or ``path/to/file.py:function`` -> (function, module)."""
    mod_name, sep, fn_name = spec.rpartition(":")
    if not sep or not mod_name or not fn_name:
        raise ValueError(f"--impl {spec!r}: expected MODULE:FUNCTION")
    if mod_name.endswith(".py") or os.sep in mod_name:
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
    else:
        module = importlib.import_module(mod_name)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise AttributeError(f"--impl {spec!r}: {fn_name!r} is not a function of {module.__name__}")
    return fn, module


def _bits(t: Any) -> Any:
    import torch

    views = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(views[t.element_size()]) if t.element_size() in views else t


def bitwise_equal(a: Any, b: Any) -> bool:
    """Same shape, dtype and bits (NaN payloads included)."""
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def is_fatal(exc: BaseException) -> bool:
    """Errors after which the CUDA context may be unusable: the worker is replaced."""
    import torch

    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    if type(exc).__name__ in ("AcceleratorError", "CudaError"):
        return True
    text = str(exc)
    return any(s in text for s in ("CUDA error", "illegal memory access", "CUBLAS_STATUS", "cudaError",
                                   "device-side assert", "unspecified launch failure"))


@dataclass
class Correctness:
    ok: bool
    reason: str | None
    doc: dict[str, Any]
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)


def check_correctness(fn: Callable, b: int, s: int, device: Any, rounds: int, seed: int) -> Correctness:
    """Rounds of fresh inputs; NaN-poisoned outputs passed as out=; inputs compared bit for bit afterwards.

    Stops at the first failing round. Output figures are the worst over the rounds run.
    """
    import torch

    from kernel.correctness import check_output, poisoned_outputs
    from kernel.reference import attn_output_proj_backward_ref, make_inputs
    from kernel.workload import RTOL, atol_for

    m = b * s
    worst: dict[str, dict[str, Any]] = {}
    reason: str | None = None
    inputs_unchanged = True
    run = 0
    for r in range(rounds):
        run = r + 1
        gen = torch.Generator(device=device).manual_seed(seed + r)
        inputs = make_inputs(b, s, device, generator=gen)
        pristine = [t.clone() for t in inputs]
        ga, gw = poisoned_outputs(b, s, device)
        ret = fn(*inputs, out=(ga, gw))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        refs = attn_output_proj_backward_ref(*pristine)
        problems: list[str] = []
        if not (isinstance(ret, (tuple, list)) and len(ret) == 2
                and all(isinstance(t, torch.Tensor) for t in ret)):
            problems.append(f"returned {type(ret).__name__}, not a pair of tensors")
            outs = (ga, gw)
        else:
            outs = tuple(ret)
            for name, got, buf in zip(OUTPUT_NAMES, outs, (ga, gw), strict=True):
                if got.data_ptr() != buf.data_ptr():
                    problems.append(f"{name}: not written into the out= tensor")
        for name, got, ref in zip(OUTPUT_NAMES, outs, refs, strict=True):
            chk = check_output(got, ref, m)
            w = worst.setdefault(name, {"match_fraction": 1.0, "max_abs_err": 0.0, "nonfinite": 0,
                                        "all_zero": False, "shape_ok": True, "dtype_ok": True})
            w["match_fraction"] = min(w["match_fraction"], chk.match_fraction)
            w["max_abs_err"] = max(w["max_abs_err"], chk.max_abs_err)
            w["nonfinite"] = max(w["nonfinite"], chk.nonfinite)
            w["all_zero"] = w["all_zero"] or chk.all_zero
            w["shape_ok"] = w["shape_ok"] and chk.shape_ok
            w["dtype_ok"] = w["dtype_ok"] and chk.dtype_ok
            if not chk.ok:
                problems.append(_describe(name, chk, tuple(ref.shape), ref.dtype))
        for name, now, before in zip(INPUT_NAMES, inputs, pristine, strict=True):
            if not bitwise_equal(now, before):
                inputs_unchanged = False
                problems.append(f"input {name} was modified")
        if problems:
            reason = f"round {r}: " + "; ".join(problems)
            break
    doc = {"rounds": rounds, "rounds_run": run, "atol": atol_for(m), "rtol": RTOL, "seed": seed,
           "inputs_unchanged": inputs_unchanged, "outputs": worst}
    return Correctness(reason is None, reason, doc, worst)


def _describe(name: str, chk: Any, shape: tuple, dtype: Any) -> str:
    if not chk.shape_ok:
        return f"{name}: wrong shape (expected {shape})"
    if not chk.dtype_ok:
        return f"{name}: wrong dtype (expected {dtype})"
    if chk.nonfinite:
        return f"{name}: {chk.nonfinite} NaN/Inf elements (unwritten poisoned outputs stay NaN)"
    if chk.all_zero:
        return f"{name}: all zero"
    return f"{name}: only {chk.match_fraction:.4f} of elements match (max abs err {chk.max_abs_err:.3g})"


# ------------------------------------------------------------------------------------------------ the worker
class Worker:
    def __init__(self, mode: str, send: Callable[[dict], None]) -> None:
        import torch

        from ci.hardware import Nvml, fingerprint
        from ci.timing import Timer

        self.torch = torch
        self.mode = mode
        self.send = send
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
        self.timer = Timer(self.device, self.l2_bytes, self.hardware.get("max_sm_clock_mhz"))

    def hello(self) -> dict:
        return {"type": "hello", "mode": self.mode, "device": str(self.device), "hardware": self.hardware,
                "l2_bytes": self.l2_bytes, "pid": os.getpid()}

    def phase(self, text: str) -> None:
        self.send({"type": "phase", "phase": text})

    def run_case(self, req: dict) -> tuple[dict, bool]:
        from ci.timing import Protocol, timing_entry

        torch = self.torch
        b, s = int(req["batch_size"]), int(req["seq_len"])
        protocols = [Protocol.from_dict(p) for p in req["protocols"]]
        seed = int(req.get("seed", 0))
        res: dict[str, Any] = {"status": "pass", "error": None, "correctness": None, "timings": [],
                               "config": None, "telemetry": None, "warnings": []}
        fatal = False
        tele_before = self.nvml.sample()
        try:
            self.phase("load impl")
            fn, module = load_impl(req["impl"])
            config_fn = getattr(module, "kernel_config", None)
            if callable(config_fn):
                try:
                    res["config"] = config_fn(b * s, self.device).as_dict()
                except Exception as exc:  # a config lookup failure is not the kernel's failure
                    res["warnings"].append(f"kernel_config: {exc}")
            self.phase("correctness")
            corr = check_correctness(fn, b, s, self.device, protocols[0].rounds, seed)
            res["correctness"] = corr.doc
            if not corr.ok:
                res["status"], res["error"] = "incorrect", corr.reason
            impls: list[tuple[str, Callable, bool]] = [("kernel", fn, True)] if corr.ok else []
            if req.get("baselines", True):
                from kernel.reference import attn_output_proj_backward_eager, two_matmuls

                impls += [("eager", attn_output_proj_backward_eager, False), ("cublas", two_matmuls, False)]
            make_set = self._set_maker(b, s, seed + _TIMING_SEED_OFFSET)
            for k, proto in enumerate(protocols):
                for impl, f, with_out in impls:
                    self.phase(f"timing {impl} ({proto.timer})")
                    try:
                        run = self.timer.run(proto, f, lambda w=with_out: make_set(w))
                    except Exception as exc:
                        if k == 0 or is_fatal(exc):
                            raise
                        res["warnings"].append(f"{proto.name} {impl}: {type(exc).__name__}: {exc}")
                        continue
                    res["timings"].append(timing_entry(impl, proto, run))
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

    def _set_maker(self, b: int, s: int, seed: int) -> Callable[[bool], tuple[tuple, dict]]:
        """One iteration's inputs: fresh copies (new addresses) and, for the kernel, zeroed outputs."""
        torch = self.torch
        from kernel.reference import make_inputs
        from kernel.workload import HEAD_DIM, HIDDEN, NUM_HEADS

        proto_inputs = make_inputs(b, s, self.device, generator=torch.Generator(self.device).manual_seed(seed))

        def make(with_out: bool) -> tuple[tuple, dict]:
            args = tuple(t.clone() for t in proto_inputs)
            if not with_out:
                return args, {}
            ga = torch.zeros((b, NUM_HEADS, s, HEAD_DIM), dtype=torch.bfloat16, device=self.device)
            gw = torch.zeros((HIDDEN, HIDDEN), dtype=torch.bfloat16, device=self.device)
            return args, {"out": (ga, gw)}

        return make


def _clean(obj: Any) -> Any:
    """Strict JSON: non-finite floats (an error figure of a NaN output, say) become None."""
    if isinstance(obj, float):
        return _finite(obj)
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("auto", "gpu", "cpu-interpreter"), default="auto")
    args = parser.parse_args(argv)
    proto = _claim_stdout()
    faulthandler.enable(sys.stderr)  # a crash leaves its Python stack in the stderr tail

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    try:
        mode = _resolve_mode(args.mode)
        if mode == "cpu-interpreter":
            os.environ["TRITON_INTERPRET"] = "1"  # before triton or the kernel is imported
        worker = Worker(mode, send)
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
