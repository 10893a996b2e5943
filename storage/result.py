"""The result document: the contract between the measuring harness (``solci measure``) and storage, owned by
the side that stores it. Storage believes nothing a document says without ``validate``: the structure below,
then the rules of ``check`` (finite positive timings within bounds, as many samples as the protocol's
iterations, statistics that match their samples, known statuses, case names that are cases, sane sizes, bounded
configuration, telemetry and warnings). A document that fails is stored as a rejected run with the reason
(``storage.ingest.reject``), never as figures.

Schema (version 1)::

    {
      "schema_version": 1,
      "run_id": str,                 # unique per run (uuid4 hex); ingesting the same run twice adds nothing
      "commit": str | None, "branch": str | None, "repo": str | None,
      "started_at": ISO-8601 str, "finished_at": ISO-8601 str, "wall_s": float,
      "mode": "gpu" | "cpu-interpreter",
      "hardware": {
        "label": str,                # what every figure is labelled with: "NVIDIA H200" or "cpu-interpreter"
        "gpu_model": str | None,     # key of problem.workload.GPU_PEAKS, None when unknown or no GPU
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

    top level:      "impl": str (the --impl measured), "worker_starts": int, "harness": str (the harness
                    version, ci.harness.timing.harness_version), "candidate": bool (a commit's tree was measured),
                    "sandbox": "bwrap" | "none", "measured_by": "replay" | "interpreter" | "direct" (how the
                    figures were made: the recorded launches replayed by a harness process, the interpreter's
                    outputs judged by one, or the kernel called in the measuring process; docs/replay.md)
    hardware:       "compute_capability": str, "l2_bytes": int, "max_sm_clock_mhz": int | None
    protocols[]:    "rounds": int, "zero_outputs": bool, "host_ahead": bool, "flush_l2_multiple": int,
                    "version": int, "harness": str   # every field of the definition is hashed except flush_bytes
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
import math
import re
import statistics
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("pass", "incorrect", "error", "timeout")
IMPLS = ("kernel", "eager", "cublas")
MODES = ("gpu", "cpu-interpreter")
MEASURED_BY = ("replay", "interpreter", "direct")
# A case's error starts with this when the harness could not record or replay its kernel's launches
# (ci.harness.plan); a verdict then rejects the run, as for an error that starts with "integrity:".
UNREPLAYABLE = "unreplayable:"
# A case's error starts with this when the kernel's processes filled the write budget of their sandbox
# (ci.harness.measure); a verdict then rejects the run too.
OVER_BUDGET = "over budget:"


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
    """Check a result document against schema version 1 and the rules of ``check``; return it, or raise
    SchemaError (RejectedResult for a rule) naming the path."""
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
    return check(doc)


class RejectedResult(SchemaError):
    """A structurally valid document whose figures cannot be believed (the message says why)."""


# Bounds of what a real measurement can give.
MAX_DOC_BYTES = 64 * 1024 * 1024
MAX_CASES = 256
MAX_SAMPLES = 100_000
MAX_SAMPLE_US = 1.0e9  # 1000 s: an interpreter case is seconds, nothing is this slow
MAX_TEXT = 200_000  # characters of any string (an error message with its traceback tail)
# What a case may carry beside its figures (issue 19: a kernel's configuration that described itself as ~50 MB
# of small strings grew the history from 9.7 MB to 62 MB in one run).
MAX_DESCRIPTION_BYTES = 16 * 1024  # config, telemetry: compact JSON
MAX_DEPTH = 4  # nesting of config and telemetry
MAX_WARNINGS = 32
MAX_WARNING_CHARS = 2_000
_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_CASE = re.compile(r"^B([1-9][0-9]{0,6})_S([1-9][0-9]{0,7})$")
_REL = 1e-6  # statistics recomputed from samples must agree to this


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= _REL * max(abs(a), abs(b), 1e-12)


def _finite_positive(x: Any, where: str) -> None:
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) or x <= 0:
        raise RejectedResult(f"{where}: {x!r} is not a finite positive number")


def _texts(obj: Any, where: str) -> None:
    if isinstance(obj, str):
        if len(obj) > MAX_TEXT:
            raise RejectedResult(f"{where}: a string of {len(obj)} characters (at most {MAX_TEXT})")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _texts(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _texts(v, f"{where}[{i}]")
    elif isinstance(obj, float) and not math.isfinite(obj):
        raise RejectedResult(f"{where}: {obj!r} (NaN or infinite)")


def check(doc: dict) -> dict:
    """The rules a structurally valid document must also follow before storage believes its figures; raises
    RejectedResult naming the first rule broken."""
    _texts(doc, "result")
    if doc.get("measured_by", "replay") not in MEASURED_BY:
        raise RejectedResult(f"result.measured_by: {str(doc.get('measured_by'))[:40]!r} is not one of {MEASURED_BY}")
    if not _RUN_ID.match(doc["run_id"]):
        raise RejectedResult(f"result.run_id: {doc['run_id'][:80]!r} is not a run id ([A-Za-z0-9_.-], 1-64)")
    _finite_nonneg(doc["wall_s"], "result.wall_s")
    hw = doc["hardware"]
    if (doc["mode"] == "cpu-interpreter") != (hw["label"] == "cpu-interpreter"):
        raise RejectedResult(f"result.hardware.label: {hw['label']!r} does not fit mode {doc['mode']!r}")
    iters: dict[str, int] = {}
    for i, p in enumerate(doc["protocols"]):
        where = f"result.protocols[{i}]"
        if not 1 <= p["iters"] <= MAX_SAMPLES or p["warmup"] < 0:
            raise RejectedResult(f"{where}: iters {p['iters']} / warmup {p['warmup']} out of range")
        if p["hash"] in iters:
            raise RejectedResult(f"{where}.hash: {p['hash']!r} appears twice")
        iters[p["hash"]] = p["iters"]
    cases = doc["cases"]
    if not 1 <= len(cases) <= MAX_CASES:
        raise RejectedResult(f"result.cases: {len(cases)} cases (1 to {MAX_CASES})")
    seen: set[str] = set()
    n_pass = 0
    for i, c in enumerate(cases):
        where = f"result.cases[{i}]"
        m = _CASE.match(c["case"])
        if m is None or (int(m.group(1)), int(m.group(2))) != (c["batch_size"], c["seq_len"]):
            raise RejectedResult(f"{where}.case: {c['case'][:80]!r} is not the case B{c['batch_size']}_S{c['seq_len']}")
        if c["m"] != c["batch_size"] * c["seq_len"]:
            raise RejectedResult(f"{where}.m: {c['m']} is not {c['batch_size']} x {c['seq_len']}")
        if c["case"] in seen:
            raise RejectedResult(f"{where}.case: {c['case']} appears twice")
        seen.add(c["case"])
        _finite_nonneg(c["wall_s"], f"{where}.wall_s")
        _bounded_case_extras(c, where)
        medians: dict[tuple[str, str], float] = {}
        for j, t in enumerate(c["timings"]):
            tw = f"{where}.timings[{j}]"
            xs = t["samples_us"]
            if len(xs) != iters[t["protocol"]]:
                raise RejectedResult(f"{tw}: {len(xs)} samples where the protocol times {iters[t['protocol']]}")
            for x in xs:
                _finite_positive(x, f"{tw}.samples_us")
                if x > MAX_SAMPLE_US:
                    raise RejectedResult(f"{tw}.samples_us: {x!r} us is beyond any measurement")
            key = (t["impl"], t["protocol"])
            if key in medians:
                raise RejectedResult(f"{tw}: a second timing of {t['impl']} under one protocol")
            med = statistics.median(xs)
            if not _close(t["median_us"], med):
                raise RejectedResult(f"{tw}.median_us: {t['median_us']!r} is not the median of its samples ({med!r})")
            medians[key] = med
        primary = doc["protocol"]
        if c["status"] == "pass":
            n_pass += 1
            if ("kernel", primary) not in medians:
                raise RejectedResult(f"{where}: passed without a kernel timing under the primary protocol")
            if not _close(c["median_us"], medians[("kernel", primary)]):
                raise RejectedResult(f"{where}.median_us: not the kernel's median under the primary protocol")
        elif c["median_us"] is not None:
            raise RejectedResult(f"{where}.median_us: a figure for a case that did not pass ({c['status']})")
        for impl in ("eager", "cublas"):
            if c[f"{impl}_us"] is not None and not _close(c[f"{impl}_us"], medians.get((impl, primary))):
                raise RejectedResult(f"{where}.{impl}_us: not the {impl} median under the primary protocol")
        for key in ("t_sol_us",):
            if c[key] is not None:
                _finite_positive(c[key], f"{where}.{key}")
        if c["score"] is not None and not 0.0 <= c["score"] <= 1.0:
            raise RejectedResult(f"{where}.score: {c['score']!r} is outside [0, 1]")
    suite = doc["suite"]
    if suite["n_cases"] != len(cases) or suite["n_pass"] != n_pass:
        raise RejectedResult(
            f"result.suite: n_cases/n_pass {suite['n_cases']}/{suite['n_pass']} do not count the "
            f"cases ({len(cases)}/{n_pass})"
        )
    all_pass = n_pass == len(cases)
    if (suite["status"] == "pass") != all_pass:
        raise RejectedResult(f"result.suite.status: {suite['status']!r} with {n_pass} of {len(cases)} cases passing")
    if suite["geomean_us"] is not None:
        logs = [math.log(c["median_us"]) for c in cases if c["median_us"]]
        if not all_pass or not _close(suite["geomean_us"], math.exp(statistics.fmean(logs))):
            raise RejectedResult("result.suite.geomean_us: not the geometric mean of the case medians")
    if suite["score"] is not None and not 0.0 <= suite["score"] <= 1.0:
        raise RejectedResult(f"result.suite.score: {suite['score']!r} is outside [0, 1]")
    return doc


def _depth(obj: Any) -> int:
    if isinstance(obj, dict):
        return 1 + max((_depth(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max((_depth(v) for v in obj), default=0)
    return 0


def _bounded_case_extras(c: dict, where: str) -> None:
    """A case's configuration, telemetry and warnings within their bounds."""
    for key in ("config", "telemetry"):
        value = c.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise RejectedResult(f"{where}.{key}: expected an object or null")
        if _depth(value) > MAX_DEPTH:
            raise RejectedResult(f"{where}.{key}: nested deeper than {MAX_DEPTH} levels")
        size = len(json.dumps(value, separators=(",", ":"), default=str))
        if size > MAX_DESCRIPTION_BYTES:
            raise RejectedResult(f"{where}.{key}: {size} bytes of JSON (at most {MAX_DESCRIPTION_BYTES})")
    warnings = c.get("warnings")
    if warnings is None:
        return
    if not isinstance(warnings, list) or len(warnings) > MAX_WARNINGS:
        raise RejectedResult(f"{where}.warnings: expected a list of at most {MAX_WARNINGS} texts")
    for i, w in enumerate(warnings):
        if not isinstance(w, str) or len(w) > MAX_WARNING_CHARS:
            raise RejectedResult(f"{where}.warnings[{i}]: expected a text of at most {MAX_WARNING_CHARS} characters")


def _finite_nonneg(x: Any, where: str) -> None:
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) or x < 0:
        raise RejectedResult(f"{where}: {x!r} is not a finite number >= 0")


def parse(data: str | bytes, where: str = "result") -> dict:
    """A result document from JSON text: strict JSON (NaN and Infinity refused), at most MAX_DOC_BYTES, an
    object; SchemaError otherwise (structure and rules are checked by ``validate``)."""
    if len(data) > MAX_DOC_BYTES:
        raise RejectedResult(f"{where}: {len(data)} bytes (at most {MAX_DOC_BYTES})")

    def no_constants(name: str) -> Any:
        raise RejectedResult(f"{where}: {name} is not valid JSON")

    try:
        doc = json.loads(data, parse_constant=no_constants)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{where}: not valid JSON ({exc})") from None
    except RecursionError:
        raise RejectedResult(f"{where}: nested too deeply") from None
    if not isinstance(doc, dict):
        raise SchemaError(f"{where}: expected a JSON object")
    return doc


def load(path: str) -> dict:
    """Read and validate a result document from a file."""
    with open(path, "rb") as fh:
        return validate(parse(fh.read(), path))
