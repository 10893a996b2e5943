"""The host-side tile scheduler (kernel/schedule.py): every tile is run exactly once, and the plan it picks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kernel.configs import M_BUCKETS, KernelConfig, config_for
from kernel.schedule import plan_schedule, tile_cost
from tests.support.plan_tiles import tiles_per_program

HOPPER = (9, 0)


@pytest.mark.parametrize("m", [1, 7, 100, 256, 300, 512, 777, 1024, 2048, 3000, 4096, 8192, 12345])
@pytest.mark.parametrize("schedule", ["auto", "shared", "partitioned"])
def test_every_tile_runs_exactly_once(m: int, schedule: str) -> None:
    cfg = replace(config_for(m, HOPPER), schedule=schedule)
    for programs in (4, 132):
        plan = plan_schedule(m, cfg, programs)
        assert 1 <= plan.programs <= programs
        per_program = tiles_per_program(plan)
        assert sorted(t for ga, _ in per_program for t in ga) == list(range(plan.n_ga))
        assert sorted(t for _, gw in per_program for t in gw) == list(range(plan.n_gw))
        assert all(ga or gw for ga, gw in per_program), "no program is launched idle"
        if plan.p_ga:
            assert plan.ga_first  # the kernel's partition assumes grad_attn tiles come first
        assert plan.makespan >= plan.mean * plan.programs / programs - 1e-9


def test_partition_balances_two_to_one_tiles() -> None:
    """M = 1024 with equal 128x256 tiles: 64 grad_attn tiles (K=2048) and 128 grad_weight tiles (K=1024). The
    shared stride leaves programs with one long and one short tile; the partition gives each program two
    tiles' worth of grad_weight or one grad_attn tile."""
    cfg = KernelConfig(128, 256, 128, 256, 64, 8, 3)
    plan = plan_schedule(1024, cfg, 132)
    assert plan.kind == "partitioned" and plan.p_ga == 64
    assert plan.makespan == pytest.approx(max(tile_cost(128, 256, 32), 2 * tile_cost(128, 256, 16)))
    shared = plan_schedule(1024, replace(cfg, schedule="shared"), 132)
    assert shared.makespan > 1.4 * plan.makespan


def test_large_m_keeps_the_shared_schedule() -> None:
    plan = plan_schedule(8192, config_for(8192, HOPPER), 132)
    assert plan.kind == "shared" and not plan.ga_first  # grad_weight tiles (K = 8192) are the long ones


def test_bad_plans_are_refused() -> None:
    with pytest.raises(ValueError, match="schedule"):
        plan_schedule(64, replace(config_for(64, HOPPER), schedule="round-robin"), 132)
    with pytest.raises(ValueError, match="M >= 1"):
        plan_schedule(0, config_for(64, HOPPER), 132)


def test_every_table_config_has_a_plan() -> None:
    for bucket in M_BUCKETS:
        plan = plan_schedule(bucket, config_for(bucket, HOPPER), 132)
        assert plan.programs <= 132 and plan.makespan > 0
