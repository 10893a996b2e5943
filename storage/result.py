"""The result document that ``solci measure`` writes and storage ingests: one JSON object per run.

Schema (version 1)::

    {
      "schema_version": 1,
      "run_id": str,                 # unique per run (uuid4 hex); ingesting the same run twice adds nothing
      "commit": str | None, "branch": str | None, "repo": str | None,
      "started_at": ISO-8601 str, "finished_at": ISO-8601 str, "wall_s": float,
      "mode": "gpu" | "cpu-interpreter",
      "hardware": {
        "label": str,                # what every figure is labelled with: "NVIDIA H200" or "cpu-interpreter"
        "gpu_model": str | None,     # key of kernel.workload.GPU_PEAKS, None when unknown or no GPU
        "gpu_name": str | None, "sm_count": int | None, "memory_bytes": int | None,
        "driver": str | None, "cuda": str | None, "torch": str, "triton": str, "python": str,
        "hostname": str, "cpu": str,
        "fingerprint": str,          # sha256 of the stable fields above (not hostname)
      },
      "protocol": str,               # hash of the primary protocol (the one the series and scores use)
      "protocols": [ {"name": str, "hash": str, "timer": "cuda_events" | "cupti" | "wall_clock",
                      "warmup": int, "iters": int, "l2_flush": bool, "flush_bytes": int,
                      "rotate_inputs": bool, "statistic": "median"} ],
      "cases": [ {
        "case": "B4_S128", "batch_size": int, "seq_len": int, "m": int,
        "status": "pass" | "incorrect" | "error" | "timeout",
        "error": str | None,         # message / traceback tail for error and timeout, reason for incorrect
        "correctness": {"rounds": int, "atol": float, "rtol": float,
                        "outputs": {"grad_attn_output": {"match_fraction": float, "max_abs_err": float,
                                                         "nonfinite": int, "all_zero": bool},
                                    "grad_weight": {...}}} | None,
        "timings": [ {"impl": "kernel" | "eager" | "cublas", "protocol": str (hash),
                      "samples_us": [float, ...], "median_us": float, "mean_us": float,
                      "min_us": float, "max_us": float, "iqr_us": float, "stdev_us": float} ],
        "median_us": float | None,   # the kernel's median under the primary protocol
        "eager_us": float | None, "cublas_us": float | None,
        "t_sol_us": float | None, "score": float | None,
        "config": dict | None,       # the kernel configuration chosen for this case
        "telemetry": {"before": {...}, "after": {...}} | None,   # NVML samples (clocks, temp, power, throttle)
        "wall_s": float,
      } ],
      "suite": {"n_cases": int, "n_pass": int, "status": "pass" | "incorrect" | "error",
                "geomean_us": float | None, "geomean_eager_us": float | None,
                "geomean_cublas_us": float | None, "score": float | None,
                "ratio_vs_cublas": float | None, "ratio_vs_eager": float | None},
    }

Optional keys ``solci measure`` adds (readers must not require them)::

    top level:      "impl": str (the --impl measured), "worker_starts": int
    hardware:       "compute_capability": str, "l2_bytes": int, "max_sm_clock_mhz": int | None
    protocols[]:    "rounds": int, "zero_outputs": bool, "host_ahead": bool, "flush_l2_multiple": int,
                    "version": int       # every field of the definition is hashed except flush_bytes
    correctness:    "rounds_run": int, "seed": int, "inputs_unchanged": bool; outputs also carry
                    "shape_ok", "dtype_ok"; a non-finite max_abs_err is written as null (strict JSON)
    timings[]:      "host_enqueue_us": float; CUPTI ones also "activities_per_iter", "activity_names"
    cases[]:        "warnings": [str]    # e.g. a secondary (CUPTI) timer that failed for this case
    telemetry:      before/after: "sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w",
                    "utilization_pct", "throttle_reasons" (NVML bitmask), "throttle" ([names])
    suite:          "geomean_t_sol_us", "primary_protocol": str,
                    "geomeans_by_protocol": {hash: {"kernel": float | None, "eager": ..., "cublas": ...}}
"""

from __future__ import annotations

import hashlib
import json
import statistics
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("pass", "incorrect", "error", "timeout")
IMPLS = ("kernel", "eager", "cublas")
MODES = ("gpu", "cpu-interpreter")


def stable_hash(obj: Any, length: int = 16) -> str:
    """sha256 over canonical JSON (sorted keys), truncated: for protocols and hardware fingerprints."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def timing_stats(samples_us: list[float]) -> dict[str, float]:
    """Median, mean, min, max, interquartile range and standard deviation of timing samples (us)."""
    if not samples_us:
        raise ValueError("timing_stats: no samples")
    s = sorted(samples_us)
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) > 1 else [s[0], s[0], s[0]]
    return {
        "median_us": statistics.median(s),
        "mean_us": statistics.fmean(s),
        "min_us": s[0],
        "max_us": s[-1],
        "iqr_us": q[2] - q[0],
        "stdev_us": statistics.stdev(s) if len(s) > 1 else 0.0,
    }


class SchemaError(ValueError):
    """A result document that does not follow the schema; the message names the offending path."""


def _req(doc: dict, key: str, types: type | tuple[type, ...], path: str, nullable: bool = False) -> Any:
    if key not in doc:
        raise SchemaError(f"{path}.{key}: missing")
    val = doc[key]
    if val is None and nullable:
        return None
    if isinstance(val, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise SchemaError(f"{path}.{key}: expected {types}, got bool")
    if not isinstance(val, types):
        raise SchemaError(f"{path}.{key}: expected {types}, got {type(val).__name__}")
    return val


def validate(doc: Any) -> dict:
    """Check a result document against schema version 1; return it, or raise SchemaError naming the path."""
    num = (int, float)
    if not isinstance(doc, dict):
        raise SchemaError("result: expected a JSON object")
    version = _req(doc, "schema_version", int, "result")
    if version != SCHEMA_VERSION:
        raise SchemaError(f"result.schema_version: {version} is not supported (expected {SCHEMA_VERSION})")
    _req(doc, "run_id", str, "result")
    for key in ("commit", "branch", "repo"):
        _req(doc, key, str, "result", nullable=True)
    _req(doc, "started_at", str, "result")
    _req(doc, "finished_at", str, "result")
    _req(doc, "wall_s", num, "result")
    if _req(doc, "mode", str, "result") not in MODES:
        raise SchemaError(f"result.mode: must be one of {MODES}")
    hw = _req(doc, "hardware", dict, "result")
    for key in ("label", "torch", "triton", "python", "fingerprint"):
        _req(hw, key, str, "result.hardware")
    _req(hw, "gpu_model", str, "result.hardware", nullable=True)
    primary = _req(doc, "protocol", str, "result")
    protocols = _req(doc, "protocols", list, "result")
    hashes = set()
    for i, p in enumerate(protocols):
        where = f"result.protocols[{i}]"
        if not isinstance(p, dict):
            raise SchemaError(f"{where}: expected an object")
        for key in ("name", "hash", "timer", "statistic"):
            _req(p, key, str, where)
        for key in ("warmup", "iters", "flush_bytes"):
            _req(p, key, int, where)
        hashes.add(p["hash"])
    if primary not in hashes:
        raise SchemaError("result.protocol: not among result.protocols")
    cases = _req(doc, "cases", list, "result")
    for i, c in enumerate(cases):
        where = f"result.cases[{i}]"
        if not isinstance(c, dict):
            raise SchemaError(f"{where}: expected an object")
        _req(c, "case", str, where)
        for key in ("batch_size", "seq_len", "m"):
            _req(c, key, int, where)
        if _req(c, "status", str, where) not in STATUSES:
            raise SchemaError(f"{where}.status: must be one of {STATUSES}")
        _req(c, "error", str, where, nullable=True)
        for key in ("median_us", "eager_us", "cublas_us", "t_sol_us", "score"):
            _req(c, key, num, where, nullable=True)
        for j, t in enumerate(_req(c, "timings", list, where)):
            tw = f"{where}.timings[{j}]"
            if _req(t, "impl", str, tw) not in IMPLS:
                raise SchemaError(f"{tw}.impl: must be one of {IMPLS}")
            if _req(t, "protocol", str, tw) not in hashes:
                raise SchemaError(f"{tw}.protocol: unknown protocol hash")
            samples = _req(t, "samples_us", list, tw)
            if not all(isinstance(x, num) for x in samples):
                raise SchemaError(f"{tw}.samples_us: expected numbers")
            _req(t, "median_us", num, tw)
        _req(c, "config", dict, where, nullable=True)
        _req(c, "wall_s", num, where)
    suite = _req(doc, "suite", dict, "result")
    _req(suite, "n_cases", int, "result.suite")
    _req(suite, "n_pass", int, "result.suite")
    _req(suite, "status", str, "result.suite")
    for key in ("geomean_us", "score"):
        _req(suite, key, num, "result.suite", nullable=True)
    return doc


def load(path: str) -> dict:
    """Read and validate a result document from a file."""
    with open(path, encoding="utf-8") as fh:
        try:
            doc = json.load(fh)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{path}: not valid JSON ({exc})") from None
    return validate(doc)
