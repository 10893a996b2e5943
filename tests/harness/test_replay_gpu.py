"""Record and replay on a GPU: the project's kernel replayed from its plan gives its own outputs bit for bit, and
what cannot be replayed is refused (PyTorch ops instead of launches, a host read of device data, a launch sequence
that changes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ci.harness import plan as plan_contract
from problem.correctness import bitwise_equal, poisoned_outputs
from problem.reference import make_inputs
from tests.support import fake_kernels as fk

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def recorder():
    from ci.harness.record import Recorder

    return Recorder()


def _record(recorder, fn, b: int, s: int):
    from ci.harness.record import record_call

    dev = torch.device("cuda")
    seeds = iter(range(100, 200))

    def make_call():
        gen = torch.Generator(device=dev).manual_seed(next(seeds))
        inputs = make_inputs(b, s, dev, generator=gen)
        outputs = poisoned_outputs(b, s, dev)
        known = {("input", i): t for i, t in enumerate(inputs)}
        known.update({("output", i): t for i, t in enumerate(outputs)})
        return inputs, outputs, known

    from ci.harness.timing import ActivityProfile

    return record_call(recorder, fn, make_call, b, s, lambda: torch.cuda.synchronize(dev), ActivityProfile)


@pytest.mark.parametrize("b,s", [(1, 256), (4, 1024), (3, 100), (8, 1024)])
def test_the_replayed_kernel_gives_the_kernels_own_outputs(recorder, tmp_path: Path, b: int, s: int) -> None:
    from ci.harness.replay import Replay, device_limits
    from kernel import attn_output_proj_backward

    dev = torch.device("cuda")
    plan = _record(recorder, attn_output_proj_backward, b, s)
    loaded = plan_contract.load(plan_contract.write(plan, tmp_path / "plan"), b, s, device_limits(dev))
    replay = Replay(loaded, dev)
    inputs = make_inputs(b, s, dev, generator=torch.Generator(device=dev).manual_seed(7))
    called, replayed = poisoned_outputs(b, s, dev), poisoned_outputs(b, s, dev)
    attn_output_proj_backward(*inputs, out=called)
    replay(*inputs, out=replayed)
    torch.cuda.synchronize()
    assert all(bitwise_equal(x, y) for x, y in zip(called, replayed, strict=True))


def test_scratch_the_kernel_allocates_is_replayed(recorder, tmp_path: Path) -> None:
    from ci.harness.replay import Replay, device_limits

    dev = torch.device("cuda")
    plan = _record(recorder, fk.own_scratch, 2, 128)
    assert plan.scratch and len(plan.launches) == 2
    replay = Replay(plan_contract.load(plan_contract.write(plan, tmp_path / "p"), 2, 128, device_limits(dev)), dev)
    inputs = make_inputs(2, 128, dev, generator=torch.Generator(device=dev).manual_seed(3))
    called, replayed = poisoned_outputs(2, 128, dev), poisoned_outputs(2, 128, dev)
    fk.own_scratch(*inputs, out=called)
    replay(*inputs, out=replayed)
    torch.cuda.synchronize()
    assert all(bitwise_equal(x, y) for x, y in zip(called, replayed, strict=True))


def test_pytorch_ops_instead_of_launches_are_refused(recorder) -> None:
    with pytest.raises(plan_contract.RefusedPlan, match="GPU work outside the recorded launches"):
        _record(recorder, fk.good, 1, 128)


def test_a_launch_sequence_that_changes_is_refused(recorder) -> None:
    with pytest.raises(plan_contract.RefusedPlan, match="differs between two steady calls"):
        _record(recorder, fk.alternates, 1, 128)


def test_a_host_read_of_device_data_is_refused(recorder) -> None:
    with pytest.raises(plan_contract.RefusedPlan, match=r"GPU work outside the recorded launches: .*Memcpy DtoH"):
        _record(recorder, fk.reads_back, 1, 128)
