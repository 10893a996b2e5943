"""The measurement protocol (names, hashes) and the timers; GPU timers only where CUDA exists."""

from __future__ import annotations

import pytest
import torch

from ci.harness import timing
from ci.harness.timing import (
    CPU_ITERS,
    CPU_ROUNDS,
    CPU_WARMUP,
    PROTOCOL_VERSION,
    AttributionError,
    Protocol,
    Timer,
    attribute_groups,
    make_protocols,
    span_us,
    timing_entry,
)
from problem.workload import CORRECTNESS_ROUNDS, TIMED_ITERS, WARMUP_ITERS
from storage.result import stable_hash

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# ------------------------------------------------------------------------------------------------ protocol
def test_same_settings_same_hash():
    a = Protocol("cuda_events", 10, 10, 50, l2_flush=True)
    b = Protocol("cuda_events", 10, 10, 50, l2_flush=True)
    assert a.hash == b.hash and a.name == b.name
    assert a.hash == stable_hash({**a.definition()})
    assert a.definition()["version"] == PROTOCOL_VERSION


@pytest.mark.parametrize(
    "change",
    [
        {"iters": 51},
        {"warmup": 9},
        {"rounds": 9},
        {"timer": "cupti"},
        {"l2_flush": False},
        {"host_ahead": False},
        {"rotate_inputs": False},
        {"flush_l2_multiple": 3},
    ],
)
def test_any_setting_changes_the_hash(change):
    base = {"timer": "cuda_events", "rounds": 10, "warmup": 10, "iters": 50, "l2_flush": True}
    assert Protocol(**{**base, **change}).hash != Protocol(**base).hash


def test_names_describe_the_protocol():
    assert Protocol("cuda_events", 10, 10, 50, l2_flush=True).name == "cuda_events-l2x2-w10-i50-r10"
    assert Protocol("wall_clock", 2, 1, 5, l2_flush=False).name == "wall_clock-nol2flush-w1-i5-r2"


def test_invalid_protocol_rejected():
    with pytest.raises(ValueError):
        Protocol("stopwatch", 1, 1, 1, l2_flush=False)
    with pytest.raises(ValueError):
        Protocol("wall_clock", 1, 1, 0, l2_flush=False)


def test_gpu_protocols_default_to_the_workload_counts():
    """The CUPTI span (the benchmark's rule) is the primary figure, CUDA events the cross-check; where the
    profiler does not work, CUDA events alone."""
    primary, events = make_protocols("gpu")
    assert (primary.timer, events.timer) == ("cupti", "cuda_events")
    for p in (primary, events):
        assert (p.rounds, p.warmup, p.iters, p.l2_flush) == (CORRECTNESS_ROUNDS, WARMUP_ITERS, TIMED_ITERS, True)
    assert [p.timer for p in make_protocols("gpu", cupti=False)] == ["cuda_events"]
    assert [p.timer for p in make_protocols("gpu", cupti=False, primary="cupti")] == ["cuda_events"]
    assert [p.timer for p in make_protocols("gpu", primary="cuda_events")] == ["cuda_events", "cupti"]
    assert make_protocols("gpu", iters=7)[0].hash != primary.hash


def test_the_harness_version_is_part_of_the_protocol(monkeypatch):
    """Upgrading the runner's harness starts a new series (another protocol hash), never a fake step."""
    p = make_protocols("gpu")[0]
    assert p.definition()["harness"] == timing.harness_version() and len(p.harness) == 12
    other = Protocol(p.timer, p.rounds, p.warmup, p.iters, p.l2_flush, harness="0" * 12)
    assert other.hash != p.hash
    assert Protocol.from_dict(p.definition()).hash == p.hash


def test_cpu_protocol_is_reduced_and_distinct():
    (p,) = make_protocols("cpu-interpreter")
    assert (p.timer, p.rounds, p.warmup, p.iters, p.l2_flush) == (
        "wall_clock",
        CPU_ROUNDS,
        CPU_WARMUP,
        CPU_ITERS,
        False,
    )
    assert p.hash not in {q.hash for q in make_protocols("gpu")}
    (q,) = make_protocols("cpu-interpreter", rounds=1, warmup=0, iters=2)
    assert (q.rounds, q.warmup, q.iters) == (1, 0, 2)


def test_protocol_entry_round_trips():
    p = Protocol("cuda_events", 10, 10, 50, l2_flush=True)
    e = p.entry(l2_bytes=60 * 2**20)
    assert e["flush_bytes"] == 120 * 2**20 and e["hash"] == p.hash and e["name"] == p.name
    assert Protocol.from_dict(p.definition()) == p
    assert Protocol("wall_clock", 2, 1, 5, l2_flush=False).entry(None)["flush_bytes"] == 0


# ------------------------------------------------------------------------------------------------ CUPTI attribution
SLEEP, FLUSH = "spin_kernel", "fill_u8"


def _trace(iterations: list[list[tuple[str, int]]]) -> list[tuple[str, int, int]]:
    """Build [sleep][flush][kernels...] per iteration; kernels given as (name, duration_ns)."""
    acts, t = [], 0
    for kernels in iterations:
        for name, dur in [(SLEEP, 1000), (FLUSH, 500), *kernels]:
            acts.append((name, t, t + dur))
            t += dur + 50
    return acts


def test_attribution_splits_at_the_flush_kernels():
    acts = _trace([[("gemm_a", 2000), ("gemm_b", 3000)], [("gemm_a", 2100)]])
    groups = attribute_groups(list(reversed(acts)), {FLUSH}, {SLEEP}, expected=2)  # order does not matter
    assert [[a[0] for a in g] for g in groups] == [["gemm_a", "gemm_b"], ["gemm_a"]]
    assert span_us(groups[0]) == pytest.approx((2000 + 50 + 3000) / 1000)
    assert span_us(groups[1]) == pytest.approx(2.1)


def test_attribution_ignores_work_before_the_first_flush():
    acts = [("prep_copy", 0, 10), *[(n, s + 100, e + 100) for n, s, e in _trace([[("k", 1000)]])]]
    assert len(attribute_groups(acts, {FLUSH}, {SLEEP}, expected=1)) == 1


def test_a_sleep_the_call_launches_itself_stays_in_its_iteration():
    """A kernel that launches a sleep-named kernel mid-call cannot hide the work after it (it was cut off at
    that sleep before); the harness's own host-ahead sleep before the next flush is still left out."""
    acts = _trace([[("part1", 1000), (SLEEP, 500), ("part2", 4000)], [("part1", 1000), (SLEEP, 500), ("part2", 4000)]])
    groups = attribute_groups(acts, {FLUSH}, {SLEEP}, expected=2)
    assert [[a[0] for a in g] for g in groups] == [["part1", SLEEP, "part2"]] * 2
    assert span_us(groups[0]) > 5.0


def test_an_extra_flush_named_kernel_breaks_the_count():
    acts = _trace([[("k", 1000), (FLUSH, 10), ("hidden", 5000)], [("k", 1000)]])
    with pytest.raises(AttributionError, match="expected 2"):
        attribute_groups(acts, {FLUSH}, {SLEEP}, expected=2)


def test_attribution_errors():
    acts = _trace([[("k", 1000)], [("k", 1000)]])
    with pytest.raises(AttributionError, match="expected 3"):
        attribute_groups(acts, {FLUSH}, {SLEEP}, expected=3)
    with pytest.raises(AttributionError, match="no GPU activity"):
        attribute_groups(_trace([[("k", 1000)], []]), {FLUSH}, {SLEEP}, expected=2)


# ------------------------------------------------------------------------------------------------ timers
def test_wall_clock_rotates_inputs_and_zeroes_outputs():
    seen: list[tuple[int, float]] = []
    src = torch.randn(64)

    def make_set():
        return (src.clone(),), {"out": torch.zeros(64)}

    def fn(x, *, out):
        seen.append((x.data_ptr(), float(out.abs().sum())))
        out.copy_(x)

    p = Protocol("wall_clock", 1, 2, 4, l2_flush=False, host_ahead=False)
    run = Timer("cpu").run(p, fn, make_set)
    assert len(run.samples_us) == 4 and all(s > 0 for s in run.samples_us)
    assert len({ptr for ptr, _ in seen}) == 6  # every iteration, warm-up too, at its own address
    assert all(total == 0.0 for _, total in seen)  # outputs zeroed before every call
    entry = timing_entry("kernel", p, run)
    assert entry["protocol"] == p.hash and entry["median_us"] > 0 and len(entry["samples_us"]) == 4


def test_gpu_timers_need_cuda():
    with pytest.raises(RuntimeError, match="CUDA"):
        Timer("cpu").run(Protocol("cuda_events", 1, 0, 1, l2_flush=True), lambda: None, lambda: ((), {}))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("timer", ["cuda_events", "cupti"])
def test_gpu_timer_measures_a_matmul(timer):
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    a = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
    p = Protocol(timer, 1, 2, 5, l2_flush=True)
    run = Timer(dev, props.L2_cache_size).run(p, torch.matmul, lambda: ((a.clone(), a.clone()), {}))
    assert len(run.samples_us) == 5 and all(0 < s < 10_000 for s in run.samples_us)
    if timer == "cupti":
        assert run.extra["activities_per_iter"] >= 1
