"""Caching cannot pay: every timed iteration gets inputs of its own values, and the iterations whose outputs are
checked after the loop are drawn at random once it has run.

A kernel that computes once inside a timed loop and then only copies its cached outputs is reported incorrect
by the worker (through ``solci measure``, Triton's CPU interpreter); the input-set maker draws new values each
call, reproducibly from its seed; the kept iterations are not the last ones but any of them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch

from ci.harness.timing import Protocol, Timer
from problem.correctness import bitwise_equal, recheck
from problem.reference import attn_output_proj_backward_ref, timing_sets
from problem.workload import HEAD_DIM, HIDDEN, NUM_HEADS
from tests.support import fake_kernels as fk
from tests.support.measure import FAKES, run_measure


def measure_fake(tmp_path: Path, impl: str, *, baselines: bool = False) -> tuple[int, dict | None, str]:
    """``solci measure`` of one small case under the interpreter: 1 round, 1 warm-up, 3 timed iterations."""
    args = ["--mode", "cpu-interpreter", "--cases", "1,7", "--impl", f"{FAKES}:{impl}"]
    args += ["--rounds", "1", "--warmup", "1", "--iters", "3"] + ([] if baselines else ["--no-baselines"])
    return run_measure(tmp_path, *args)


# ------------------------------------------------------------------------------------------------ the worker
@pytest.mark.parametrize(
    ("impl", "says"),
    [("caches", "grad_"), ("caches_inputs_too", "was modified")],
)
def test_a_kernel_that_caches_inside_the_timed_loop_is_incorrect(tmp_path, impl, says):
    """tests/support/fake_kernels.py's ``caches`` passes every correctness round, computes on its first call inside the
    timed loop and afterwards only copies its cached outputs into ``out=`` (``caches_inputs_too`` also copies the
    first call's inputs over its own): the case is incorrect, with no kernel figure."""
    rc, doc, err = measure_fake(tmp_path, impl)
    assert doc is not None, err
    (c,) = doc["cases"]
    assert c["correctness"]["rounds_run"] == 1  # right wherever it is checked directly
    assert c["status"] == "incorrect", c
    assert "after the timed loop" in c["error"] and "timed iteration" in c["error"] and says in c["error"]
    assert rc == 1 and c["median_us"] is None and not c["timings"]


def test_an_honest_kernel_still_passes_the_recheck(tmp_path):
    rc, doc, err = measure_fake(tmp_path, "good", baselines=True)
    assert rc == 0, err
    (c,) = doc["cases"]
    assert c["status"] == "pass" and {t["impl"] for t in c["timings"]} == {"kernel", "eager", "cublas"}


# ------------------------------------------------------------------------------------------------ the input sets
def test_timing_sets_draw_fresh_values_reproducibly():
    b, s = 1, 7
    first, second, other = (timing_sets(b, s, "cpu", seed) for seed in (5, 5, 6))
    a = [first(False)[0] for _ in range(4)]
    again = [second(False)[0] for _ in range(4)]
    for i, inputs in enumerate(a):
        assert all(bitwise_equal(x, y) for x, y in zip(inputs, again[i], strict=True))  # same seed, same values
        for later in a[i + 1 :]:
            assert not any(torch.equal(x, y) for x, y in zip(inputs, later, strict=True))  # new values each call
    assert not any(torch.equal(x, y) for x, y in zip(a[0], other(False)[0], strict=True))
    assert all(bitwise_equal(x, y) for x, y in zip(first.draw(2), a[2], strict=True))  # a call's inputs, again

    # drawn as make_inputs draws them: bf16, randn, the weight scaled by 1/sqrt(2048)
    go, x, w = a[0]
    assert (go.shape, x.shape, w.shape) == ((b, s, HIDDEN), (b, s, HIDDEN), (HIDDEN, HIDDEN))
    assert {t.dtype for t in a[0]} == {torch.bfloat16}
    assert abs(float(go.float().std()) - 1) < 0.05 and abs(float(x.float().mean())) < 0.05
    assert abs(float(w.float().std()) * HIDDEN**0.5 - 1) < 0.01

    args, kwargs = first(True)
    ga, gw = kwargs["out"]
    assert ga.shape == (b, NUM_HEADS, s, HEAD_DIM) and gw.shape == (HIDDEN, HIDDEN)
    assert not ga.any() and not gw.any() and not any(torch.equal(p, q) for p, q in zip(args, a[3], strict=True))


# ------------------------------------------------------------------------------------------------ the kept ones
def test_the_kept_iterations_are_drawn_at_random_after_the_loop():
    """Over 100 runs of 10 timed iterations keeping 3, every timed iteration is kept at least once: the chance
    that a given one never is, at random, is 0.7**100 < 1e-15 (times 10: far below 1e-9); the old rule (the last
    3) never keeps the first 7. Warm-up iterations are never kept, and each kept one carries its own arguments."""
    warmup, iters, keep, reps = 2, 10, 3, 100
    p = Protocol("wall_clock", 1, warmup, iters, l2_flush=False, host_ahead=False)
    timer = Timer("cpu")
    counts: Counter[int] = Counter()
    picks: set[tuple[int, ...]] = set()

    def fn(x, *, out):
        out.copy_(x)

    for _ in range(reps):
        made: list[torch.Tensor] = []

        def make_set(made=made):
            x = torch.full((4,), float(len(made)))
            made.append(x)
            return (x,), {"out": torch.zeros(4)}

        run = timer.run(p, fn, make_set, keep=keep)
        idx = tuple(k.index for k in run.kept)
        assert len(set(idx)) == keep and all(0 <= i < iters for i in idx)
        for k in run.kept:
            assert k.args[0] is made[warmup + k.index]
            assert torch.equal(k.kwargs["out"], torch.full((4,), float(warmup + k.index)))
        counts.update(idx)
        picks.add(tuple(sorted(idx)))
    assert set(counts) == set(range(iters)) and len(picks) > 1

    few = timer.run(Protocol("wall_clock", 1, 1, 2, l2_flush=False, host_ahead=False), fn, make_set, keep=keep)
    assert sorted(k.index for k in few.kept) == [0, 1]  # at most k timed iterations: all of them


# ------------------------------------------------------------------------------------------------ recheck
def test_recheck_uses_each_iterations_own_inputs_and_names_the_one_that_failed():
    make = timing_sets(1, 3, "cpu", seed=9)
    p = Protocol("wall_clock", 1, 1, 4, l2_flush=False, host_ahead=False)
    run = Timer("cpu").run(p, fk.good, lambda: make(True), keep=4)
    assert [k.index for k in run.kept] == [0, 1, 2, 3]

    def pristine(k):
        return make.draw(1 + k.index)  # the maker's calls: one warm-up, then the timed ones

    assert recheck(run.kept, 3, pristine) is None
    ga, gw = run.kept[2].kwargs["out"]
    ref = attn_output_proj_backward_ref(*run.kept[1].args)  # right values, but of another iteration
    ga.copy_(ref[0])
    gw.copy_(ref[1])
    bad = recheck(run.kept, 3, pristine)
    assert bad is not None and bad.startswith("timed iteration 2:")
    run.kept[2].kwargs["out"][0].copy_(attn_output_proj_backward_ref(*run.kept[2].args)[0])
    run.kept[2].kwargs["out"][1].copy_(attn_output_proj_backward_ref(*run.kept[2].args)[1])
    assert recheck(run.kept, 3, pristine) is None
    run.kept[3].args[1].view(-1)[0] += 1
    bad = recheck(run.kept, 3, pristine)
    assert bad is not None and bad.startswith("timed iteration 3:") and "reshaped was modified" in bad
