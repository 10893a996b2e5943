"""Fabricated result documents (schema v1) for tests: valid per ``storage.result.validate``.

    make_result(run_id=None, commit="c1", cases=None, medians=None, samples=None, status="pass",
                hardware_label="NVIDIA H200", gpu_model="H200", protocol="p1", started_at=None, ...)

- ``cases``: case names or ``Case`` objects (default: the 16 benchmark cases);
- ``medians``: the kernel's median per case: a number for all cases, a dict {case name: us}, or a list in case
  order; default a plausible figure (1.6 x the H200 T_SOL of the case);
- ``samples``: a dict {case name: [us, ...]} of the kernel's raw samples; otherwise ``n_samples`` samples
  (default 50) drawn around the median with relative spread ``noise`` (seeded by run_id: reproducible);
- ``status``: "pass" | "incorrect" | "error" | "timeout" for all cases, or a dict {case name: status}
  (cases left out pass); incorrect cases keep timings, error/timeout cases have none;
- ``scale``: multiplies every kernel median (and its samples): ``scale=2.0`` is a 2x slower run;
  ``control_scale`` the eager and cuBLAS figures (machine drift); ``clock_mhz`` / ``throttle`` fill the NVML
  telemetry (SM clock, throttle reason names) of every case.
"""

from __future__ import annotations

import random
import statistics
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from problem.workload import CASES, Case, geomean, sol_score, t_sol_us
from storage.result import SCHEMA_VERSION, stable_hash, timing_stats, validate

BASE_TIME = datetime(2026, 11, 1, tzinfo=UTC)


def _case_name(c: str | Case) -> str:
    return c.name if isinstance(c, Case) else Case.parse(c).name


def _per_case(value, names: list[str], default):
    if value is None:
        return {n: default(n) for n in names}
    if isinstance(value, Mapping):
        return {n: (value[n] if n in value else default(n)) for n in names}
    if isinstance(value, (int, float, str)):
        return dict.fromkeys(names, value)
    values = list(value)
    if len(values) != len(names):
        raise ValueError(f"{len(values)} values for {len(names)} cases")
    return dict(zip(names, values, strict=True))


def default_median_us(name: str, gpu_model: str | None = "H200") -> float:
    m = Case.parse(name).m
    t = t_sol_us(m, gpu_model or "H200")
    return round(1.6 * (t if t is not None else 10.0), 3)


def draw_samples(median: float, n: int, noise: float, seed: str) -> list[float]:
    """n samples spread around ``median`` (relative spread ``noise``), re-centred so their median is exact."""
    rng = random.Random(seed)
    raw = [median * (1.0 + rng.gauss(0.0, noise)) for _ in range(n)]
    shift = median - statistics.median(raw)
    return [max(1e-3, x + shift) for x in raw]


def make_protocol(hash_: str = "p1", name: str = "cuda_events_l2flush_rotate", iters: int = 50) -> dict:
    return {
        "name": name,
        "hash": hash_,
        "timer": "cuda_events",
        "warmup": 10,
        "iters": iters,
        "l2_flush": True,
        "flush_bytes": 2 * 50 * 1024 * 1024,
        "rotate_inputs": True,
        "statistic": "median",
    }


def make_result(
    run_id: str | None = None,
    commit: str | None = "c1",
    cases: Iterable[str | Case] | None = None,
    medians: float | Mapping[str, float] | Sequence[float] | None = None,
    samples: Mapping[str, list[float]] | None = None,
    status: str | Mapping[str, str] = "pass",
    hardware_label: str = "NVIDIA H200",
    gpu_model: str | None = "H200",
    protocol: str = "p1",
    *,
    started_at: datetime | str | None = None,
    branch: str | None = "main",
    repo: str | None = "local",
    n_samples: int = 50,
    noise: float = 0.01,
    scale: float = 1.0,
    impls: Sequence[str] = ("kernel", "eager", "cublas"),
    seed: str | None = None,
    control_scale: float = 1.0,
    clock_mhz: float | None = None,
    throttle: Sequence[str] = (),
    mode: str | None = None,
) -> dict:
    """A valid result document; see the module docstring."""
    run_id = run_id or uuid.uuid4().hex
    seed = seed if seed is not None else run_id
    names = [_case_name(c) for c in (cases if cases is not None else CASES)]
    base = {n: default_median_us(n, gpu_model) for n in names}
    med = _per_case(medians, names, lambda n: base[n])
    med = {n: float(v) * scale for n, v in med.items()}
    stat = _per_case(status, names, lambda n: "pass") if not isinstance(status, str) else dict.fromkeys(names, status)
    if isinstance(started_at, datetime):
        t0 = started_at if started_at.tzinfo else started_at.replace(tzinfo=UTC)
    elif isinstance(started_at, str):
        t0 = datetime.fromisoformat(started_at)
    else:
        t0 = datetime.now(UTC)
    proto = make_protocol(protocol, iters=n_samples)
    model = gpu_model

    case_docs = []
    for n in names:
        c = Case.parse(n)
        st = stat[n]
        timed = st in ("pass", "incorrect")
        timings = []
        figures: dict[str, float | None] = {"kernel": None, "eager": None, "cublas": None}
        if timed:
            for impl in impls:
                if impl == "kernel":
                    if samples and n in samples:
                        xs = [float(x) * scale for x in samples[n]]
                    else:
                        xs = draw_samples(med[n], n_samples, noise, f"{seed}/{n}/{impl}")
                else:
                    centre = base[n] * (1.25 if impl == "eager" else 0.9) * control_scale
                    xs = draw_samples(centre, n_samples, noise, f"{seed}/{n}/{impl}")
                stats = timing_stats(xs)
                figures[impl] = stats["median_us"]
                timings.append({"impl": impl, "protocol": protocol, "samples_us": xs, **stats})
        t_sol = t_sol_us(c.m, model)
        score = None
        if st == "pass":
            score = sol_score(figures["kernel"], t_sol, figures["eager"])
        elif model is not None:
            score = 0.0
        case_docs.append(
            {
                "case": n,
                "batch_size": c.batch_size,
                "seq_len": c.seq_len,
                "m": c.m,
                "status": st,
                "error": None if st == "pass" else f"fabricated {st}",
                "correctness": None,
                "timings": timings,
                "median_us": figures["kernel"] if st == "pass" else None,
                "eager_us": figures["eager"],
                "cublas_us": figures["cublas"],
                "t_sol_us": t_sol,
                "score": score,
                "config": {"block_m": 128} if timed else None,
                "telemetry": None
                if clock_mhz is None
                else {side: {"sm_clock_mhz": clock_mhz, "throttle": list(throttle)} for side in ("before", "after")},
                "wall_s": 0.5,
            }
        )

    n_pass = sum(1 for c in case_docs if c["status"] == "pass")
    statuses = {c["status"] for c in case_docs}
    suite_status = "pass" if statuses == {"pass"} else ("incorrect" if "incorrect" in statuses else "error")
    all_pass = suite_status == "pass"

    def gm(key: str) -> float | None:
        vals = [c[key] for c in case_docs]
        return geomean(vals) if all_pass and all(v is not None for v in vals) else None

    scores = [c["score"] for c in case_docs]
    suite_score = statistics.fmean(s or 0.0 for s in scores) if scores and model is not None else None
    g, ge, gc = gm("median_us"), gm("eager_us"), gm("cublas_us")
    hardware = {
        "label": hardware_label,
        "gpu_model": model,
        "gpu_name": hardware_label if model else None,
        "sm_count": 132 if model else None,
        "memory_bytes": 150_000_000_000 if model else None,
        "driver": "570.00" if model else None,
        "cuda": "12.8" if model else None,
        "torch": "2.11.0",
        "triton": "3.6.0",
        "python": "3.12.0",
        "hostname": "testhost",
        "cpu": "test cpu",
    }
    hardware["fingerprint"] = stable_hash({k: v for k, v in hardware.items() if k != "hostname"})
    doc = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "commit": commit,
        "branch": branch,
        "repo": repo,
        "started_at": t0.isoformat(),
        "finished_at": (t0 + timedelta(seconds=30)).isoformat(),
        "wall_s": 30.0,
        "mode": mode or ("gpu" if model else "cpu-interpreter"),
        "hardware": hardware,
        "protocol": protocol,
        "protocols": [proto],
        "cases": case_docs,
        "suite": {
            "n_cases": len(case_docs),
            "n_pass": n_pass,
            "status": suite_status,
            "geomean_us": g,
            "geomean_eager_us": ge,
            "geomean_cublas_us": gc,
            "score": suite_score,
            "ratio_vs_cublas": g / gc if g and gc else None,
            "ratio_vs_eager": g / ge if g and ge else None,
        },
    }
    return validate(doc)


def make_series(
    n: int,
    *,
    start: datetime = BASE_TIME,
    step: timedelta = timedelta(hours=1),
    commit_prefix: str = "c",
    **kwargs,
) -> list[dict]:
    """n runs one ``step`` apart, commits ``c0``, ``c1``, ...; ``kwargs`` go to every ``make_result``."""
    return [
        make_result(run_id=f"run{i:04d}", commit=f"{commit_prefix}{i}", started_at=start + i * step, **kwargs)
        for i in range(n)
    ]
