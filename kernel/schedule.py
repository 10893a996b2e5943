"""The tile scheduler of the fused kernel: which persistent program runs which tiles (decided on the host).

Two schedules, both closed forms the kernel computes from a few integers (no table to read, so a program starts
its first tile at once):

- shared: every program strides over the whole tile space, the longer kind of tile first (for small M the
  K = 2048 tiles of grad_attn_output, for large M the K = M tiles of grad_weight), so the short tiles fill the tail;
- partitioned: programs 0 .. p_ga-1 stride over the grad_attn_output tiles only and the rest over the
  grad_weight tiles only. When one kind of tile is twice as long as the other (M = 1024 with equal tile shapes:
  64 tiles of K = 2048 against 128 of K = 1024), giving each kind its own programs in proportion to its work
  balances what the shared stride cannot (there the busiest program runs one long and one short tile).

The cost model counts main-loop steps of BK, scaled by tile area and by the tile's efficiency, plus a fixed cost
per tile (pipeline fill, epilogue); the schedule with the shortest modelled makespan wins, the shared one unless
the partition is better by more than ``_PARTITION_MARGIN``. With ``trim`` (the default) the plan launches the fewest
programs that keep the same modelled makespan: at M = 8192, 128 programs run exactly what 132 would, and the four
that would have idled at the end no longer compete for L2 bandwidth meanwhile.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from kernel.configs import WARP_SPECIALIZE, KernelConfig
from problem.workload import HEAD_DIM, HIDDEN

# A step is one BK slice of a 128 x 256 tile; smaller tiles run their multiply-adds less efficiently.
_TILE_EFFICIENCY = {128 * 256: 1.0, 128 * 128: 0.85, 64 * 256: 0.8, 64 * 128: 0.7, 64 * 64: 0.5}
_FIXED_COST = 1.5  # pipeline fill + epilogue of one tile, in steps
_PARTITION_MARGIN = 0.02
SCHEDULES = ("auto", "shared", "partitioned")


@dataclass(frozen=True)
class Plan:
    n_ga_m: int  # row blocks of grad_attn_output (its column blocks are 2048 // ga_bn)
    n_gw_m: int  # row blocks of grad_weight
    n_ga: int  # grad_attn_output tiles
    n_gw: int  # grad_weight tiles
    ga_first: bool  # grad_attn_output tiles are units 0 .. n_ga-1 of the tile space
    p_ga: int  # programs that run only grad_attn_output tiles (0: shared schedule)
    programs: int  # programs launched
    makespan: float  # modelled, in steps
    mean: float  # modelled work per program, in steps

    @property
    def kind(self) -> str:
        return "partitioned" if self.p_ga else "shared"


def tile_cost(bm: int, bn: int, k_steps: int) -> float:
    """Modelled time of one tile, in 128x256xBK steps."""
    eff = _TILE_EFFICIENCY.get(bm * bn, 1.0 if bm * bn > 128 * 256 else 0.5)
    return k_steps * (bm * bn) / (128 * 256) / eff + _FIXED_COST


def _shared_makespan(n_first: int, c_first: float, n_second: int, c_second: float, programs: int) -> float:
    """Busiest program when every program strides over [first kind..., second kind...]."""
    total = n_first + n_second
    worst = 0.0
    for p in range(min(programs, total)):
        n_all = -(-(total - p) // programs)
        n_1 = -(-(n_first - p) // programs) if p < n_first else 0
        worst = max(worst, n_1 * c_first + (n_all - n_1) * c_second)
    return worst


def _kind_costs(m: int, cfg: KernelConfig) -> tuple[float, float]:
    """Modelled time of one grad_attn tile (K = HIDDEN) and of one grad_weight tile (K = M)."""
    return tile_cost(cfg.ga_bm, cfg.ga_bn, HIDDEN // cfg.bk), tile_cost(cfg.gw_bm, cfg.gw_bn, -(-m // cfg.bk))


def _ordered_makespan(ga_first: bool, n_ga: int, c_ga: float, n_gw: int, c_gw: float, programs: int) -> float:
    """Busiest program of the shared stride with the grad_attn tiles first, or the grad_weight ones."""
    if ga_first:
        return _shared_makespan(n_ga, c_ga, n_gw, c_gw, programs)
    return _shared_makespan(n_gw, c_gw, n_ga, c_ga, programs)


@functools.lru_cache(maxsize=256)
def plan_schedule(m: int, cfg: KernelConfig, programs: int) -> Plan:
    """The schedule of one call: M rows on ``programs`` persistent programs (the SM count times occupancy).
    Also where a configuration is checked (once per M and configuration, not on every call): ValueError."""
    if m < 1 or programs < 1:
        raise ValueError(f"plan_schedule: need M >= 1 and programs >= 1, got M={m}, programs={programs}")
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"config: schedule must be one of {SCHEDULES}, got {cfg.schedule!r}")
    if cfg.warp_specialize not in WARP_SPECIALIZE:
        raise ValueError(f"config: warp_specialize must be one of {WARP_SPECIALIZE}, got {cfg.warp_specialize!r}")
    if HIDDEN % cfg.bk or HIDDEN % cfg.ga_bn or HIDDEN % cfg.gw_bm or HIDDEN % cfg.gw_bn or cfg.ga_bn % HEAD_DIM:
        raise ValueError(f"config: bk and the tiles must divide {HIDDEN}, ga_bn be a multiple of {HEAD_DIM}: {cfg}")
    n_ga_m = -(-m // cfg.ga_bm)
    n_gw_m = HIDDEN // cfg.gw_bm
    n_ga = n_ga_m * (HIDDEN // cfg.ga_bn)
    n_gw = n_gw_m * (HIDDEN // cfg.gw_bn)
    c_ga, c_gw = _kind_costs(m, cfg)
    mean = (n_ga * c_ga + n_gw * c_gw) / programs
    ga_first = c_ga >= c_gw
    shared = _ordered_makespan(ga_first, n_ga, c_ga, n_gw, c_gw, programs)
    used = min(programs, n_ga + n_gw)
    if cfg.trim:  # fewest programs with the same modelled makespan: no program launched just to idle at the end
        for fewer in range(max(1, (3 * used) // 4), used):
            if _ordered_makespan(ga_first, n_ga, c_ga, n_gw, c_gw, fewer) <= shared + 1e-9:
                used = fewer
                break
    best = Plan(n_ga_m, n_gw_m, n_ga, n_gw, ga_first, 0, used, shared, mean)
    if cfg.schedule == "shared" or programs < 2:
        return best
    part_best: Plan | None = None
    for p_ga in range(1, min(programs - 1, n_ga) + 1):
        p_gw = min(programs - p_ga, n_gw)
        span = max(-(-n_ga // p_ga) * c_ga, -(-n_gw // p_gw) * c_gw)
        if part_best is None or span < part_best.makespan:
            if cfg.trim:  # as few programs per kind as keep the same number of tiles on the busiest one
                p_ga = -(-n_ga // -(-n_ga // p_ga))
                p_gw = -(-n_gw // -(-n_gw // p_gw))
            part_best = Plan(n_ga_m, n_gw_m, n_ga, n_gw, True, p_ga, p_ga + p_gw, span, mean)
    if part_best is None:
        return best
    if cfg.schedule == "partitioned" or part_best.makespan < shared * (1 - _PARTITION_MARGIN):
        return part_best
    return best
