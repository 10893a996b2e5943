"""The tiles each program of a plan runs (kernel/schedule.py's closed form, as the kernels compute it): shared by
the scheduler's tests and the Gluon ring model."""

from __future__ import annotations

from kernel.schedule import Plan


def tiles_per_program(plan: Plan) -> list[tuple[list[int], list[int]]]:
    """(grad_attn tiles, grad_weight tiles) each program runs: the same arithmetic as _fused_bwd_kernel."""
    out = []
    nprog = plan.programs
    for pid in range(nprog):
        if plan.p_ga > 0:
            if pid < plan.p_ga:
                ga, gw = range(pid, plan.n_ga, plan.p_ga), range(plan.n_gw, plan.n_gw)
            else:
                ga, gw = range(plan.n_ga, plan.n_ga), range(pid - plan.p_ga, plan.n_gw, nprog - plan.p_ga)
        else:
            n_first = plan.n_ga if plan.ga_first else plan.n_gw
            second_lo = pid + -(-max(n_first - pid, 0) // nprog) * nprog - n_first
            ga_lo, gw_lo = (pid, second_lo) if plan.ga_first else (second_lo, pid)
            ga, gw = range(ga_lo, plan.n_ga, nprog), range(gw_lo, plan.n_gw, nprog)
        out.append((list(ga), list(gw)))
    return out
