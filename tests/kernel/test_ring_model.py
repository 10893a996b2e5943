"""A protocol model of the Gluon kernel's cooperative held-stage ring (kernel/gluon_backward.py: ``_loader`` and
``_consumer`` with ``EPI_HOLD``, the release of the held stage at the next tile's step ``HOLD_REL``).

Pure Python, no GPU. One loader and two consumer warpgroups run a program's tile list (tiles of 1-32 K-steps) over a
ring of 2-7 stages; the mbarriers have the hardware's phase-parity semantics (``try_wait.parity P`` succeeds once the
barrier's current phase has a parity other than P, so it cannot tell a fill from the one two fills back); TMA loads
and stores complete asynchronously, in any order. A random scheduler interleaves every atomic action (a process's
next step once its barrier lets it, a load's or a store's completion). A run fails on

- a **deadlock**: nothing can move and the program is not finished;
- a **stale read**: a consumer passes its ``ready`` wait while the stage holds another fill's data;
- an **overwrite**: the loader starts a TMA load into a stage a consumer still holds (before its release, or with its
  MMA in flight) or a TMA store still reads, or a warpgroup writes its epilogue into a stage the other's MMA reads;
- an mbarrier **over-arrival** (more arrivals than the phase has pending: undefined on the hardware);
- a release count other than exactly once for every use of the ring but the program's last (the stage of the last
  tile's epilogue is never handed back: the loader has nothing left to load; the kernel ends after its stores);
- with ``init="lazy"`` (v24, ``GluonConfig.lazy_init``: the loader initialises each stage's mbarriers as it first
  fills the stage and arrives on a boot barrier once all are, the consumers wait for it first), a consumer **touching
  a stage's mbarrier before its init**.

The kernel's schedule as written (``release="kernel"``) must pass for ``hold_release`` 1..min(3, stages - 1); the
broken variants (never released, released twice, released before the stores have read it, ``hold_release`` =
stages) must each fail in some run, so the model can fail. ``python tests/kernel/test_ring_model.py --runs 36000``
runs a larger sweep and prints its counts.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import pytest

from kernel import gluon_backward as gb
from tests.support.plan_tiles import tiles_per_program


class ProtocolError(AssertionError):
    """The model found the protocol broken (deadlock, stale read, overwrite, over-arrival, wrong release count)."""


@dataclass
class MBarrier:
    """An mbarrier: ``count`` arrivals complete a phase; ``phase`` counts the completed phases."""

    count: int
    phase: int = 0
    pending: int = field(init=False)

    def __post_init__(self) -> None:
        self.pending = self.count

    def arrive(self, n: int = 1) -> None:
        if n > self.pending:
            raise ProtocolError(f"over-arrival: {n} arrivals with {self.pending} pending")
        self.pending -= n
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def passed(self, parity: int) -> bool:
        """``mbarrier.try_wait.parity``: true once a phase of this parity has completed (current phase's differs)."""
        return (self.phase & 1) != parity


Cond = Callable[[], bool]
Proc = Generator[Cond, None, None]
ALWAYS: Cond = lambda: True


class Ring:
    """One program: the loader, two consumer warpgroups, the ring's barriers and the asynchronous TMA traffic."""

    def __init__(
        self, tiles: list[int], stages: int, hold_release: int, release: str = "kernel", init: str = "eager"
    ) -> None:
        self.tiles, self.S, self.R, self.release, self.init = tiles, stages, hold_release, release, init
        # eager: every stage's mbarriers initialised before the partitions start; lazy: by the loader at a stage's
        # first fill, the boot barrier after the last (or after the loop: a program of fewer steps than stages);
        # broken: lazy_early_boot (boot after the first stage's init), lazy_no_tail (no inits after the loop)
        self.inited: set[int] = set(range(stages)) if init == "eager" else set()
        self.boot = init == "eager"
        self.total = sum(tiles)
        self.ready = [MBarrier(1) for _ in range(stages)]
        self.empty = [MBarrier(2) for _ in range(stages)]
        self.sync0 = MBarrier(2)  # the warpgroups' rendezvous before the epilogue
        self.tag: list[int | None] = [None] * stages  # the fill whose data a stage holds (None: being loaded)
        self.fills: list[tuple[int, int]] = []  # TMA loads in flight: (use, stage)
        self.stores: list[tuple[int, int]] = []  # TMA stores that have not yet read their stage: (warpgroup, stage)
        self.holding: list[dict[int, int]] = [{}, {}]  # per warpgroup: stage -> the use it holds there
        self.mma: list[list[int]] = [[], []]  # per warpgroup: stages read by MMAs in flight
        self.released: list[dict[int, int]] = [{}, {}]  # per warpgroup: use -> times released
        self.last_use = self.total - 1

    # -------------------------------------------------------------------------------------------- actions
    def _touch(self, w: int, s: int) -> None:
        if s not in self.inited:
            raise ProtocolError(f"warpgroup {w} touches stage {s}'s mbarriers before their init")

    def _release(self, w: int, use: int) -> None:
        s = use % self.S
        self._touch(w, s)
        if s in self.mma[w]:
            raise ProtocolError(f"warpgroup {w} releases stage {s} (use {use}) with its MMA in flight")
        if self.holding[w].get(s) == use:
            del self.holding[w][s]
        self.released[w][use] = self.released[w].get(use, 0) + 1
        self.empty[s].arrive(1)

    def _lazy_init(self, s: int, i: int) -> None:
        self.inited.add(s)
        if i == self.S - 1 or (self.init == "lazy_early_boot" and i == 0):
            self.boot = True

    def loader(self) -> Proc:
        for i in range(self.total):
            s = i % self.S
            if self.init != "eager" and i < self.S:  # _lazy_init before the stage's first fill, an action of its own
                yield ALWAYS
                self._lazy_init(s, i)
            # every stage starts empty: the first wait is for parity 1, which a fresh barrier has passed (v24)
            yield lambda s=s, i=i: self.empty[s].passed(((i // self.S) & 1) ^ 1)
            for w in (0, 1):
                if s in self.holding[w] or s in self.mma[w]:
                    raise ProtocolError(f"overwrite: load of use {i} into stage {s} held by warpgroup {w}")
            if any(st == s for _, st in self.stores):
                raise ProtocolError(f"overwrite: load of use {i} into stage {s} a TMA store still reads")
            if any(st == s for _, st in self.fills):
                raise ProtocolError(f"overwrite: two loads in flight into stage {s}")
            self.tag[s] = None
            self.fills.append((i, s))
        if self.init == "lazy":  # a program of fewer steps than stages: the rest initialised, the boot barrier
            for i in range(self.total, self.S):
                self._lazy_init(i, i)

    def _releases_held_now(self, j: int, n: int) -> list[int]:
        """How many times (0, 1 or 2) the held stage is released after step j of a tile of n steps."""
        rel = min(self.R - 1, n - 1)  # the kernel: k == min(HOLD_REL - 1, steps - 1) * BK
        if self.release == "never":
            return []
        if self.release == "twice":
            return [1] * ((j == 0) + (j == min(1, n - 1)))  # v19's release and the later one, both
        return [1] if j == rel else []

    def consumer(self, w: int) -> Proc:
        it, held, nt = 0, -1, 0
        yield lambda: self.boot  # lazy: the boot barrier before any stage's (eager: already passed)
        for n in self.tiles:
            for j in range(n):
                i, s = it, it % self.S
                self._touch(w, s)
                yield lambda s=s, i=i: self.ready[s].passed((i // self.S) & 1)
                if self.tag[s] != i:
                    raise ProtocolError(f"stale read: warpgroup {w} reads use {i} in stage {s}, holding {self.tag[s]}")
                self.holding[w][s] = i
                self.mma[w].append(s)  # warpgroup_mma(is_async=True)
                self.mma[w] = self.mma[w][-1:]  # warpgroup_mma_wait(1): the previous step's MMA has retired
                if j > 0:
                    self._release(w, i - 1)
                for _ in self._releases_held_now(j, n):
                    if held >= 0:  # _release_held: nothing is held before the program's first tile
                        if self.release != "no_wait":  # tma.store_wait(0): this warpgroup's stores have read it
                            yield lambda w=w: all(sw != w for sw, _ in self.stores)
                        self._release(w, held)
                it += 1
                yield ALWAYS
            self.mma[w] = []  # warpgroup_mma_wait(0)
            self.sync0.arrive(1)
            yield lambda nt=nt: self.sync0.passed(nt & 1)
            last = it - 1
            if last % self.S in self.mma[1 - w]:
                raise ProtocolError(f"overwrite: warpgroup {w}'s epilogue into a stage the other's MMA reads")
            if self.tag[last % self.S] != last:
                raise ProtocolError(f"overwrite: warpgroup {w}'s epilogue stage {last % self.S} was refilled")
            self.stores.append((w, last % self.S))  # epilogue written, TMA stores issued
            held, nt = last, nt + 1
            yield ALWAYS
        yield lambda w=w: all(sw != w for sw, _ in self.stores)  # the final tma.store_wait(0)

    # -------------------------------------------------------------------------------------------- scheduler
    def run(self, rng: random.Random, max_actions: int = 200_000) -> int:
        """Interleave everything at random until the program ends; returns the actions taken."""
        procs: dict[str, Proc] = {"loader": self.loader(), "c0": self.consumer(0), "c1": self.consumer(1)}
        conds: dict[str, Cond] = {}
        for name, p in list(procs.items()):
            conds[name] = next(p)
        for step in range(max_actions):
            choices: list[tuple[str, int]] = [(n, 0) for n, c in conds.items() if c()]
            choices += [("fill", k) for k in range(len(self.fills))]
            choices += [("store", k) for k in range(len(self.stores))]
            if not choices:
                if conds:
                    raise ProtocolError(f"deadlock: {sorted(conds)} blocked after {step} actions")
                break
            kind, k = rng.choice(choices)
            if kind == "fill":
                use, s = self.fills.pop(k)
                self.tag[s] = use
                self.ready[s].arrive(1)
            elif kind == "store":
                self.stores.pop(k)
            else:
                try:
                    conds[kind] = next(procs[kind])
                except StopIteration:
                    del conds[kind]
        else:
            raise ProtocolError("no end after max_actions")
        for w in (0, 1):
            for use in range(self.total):
                want = 0 if use == self.last_use else 1
                got = self.released[w].get(use, 0)
                if got != want:
                    raise ProtocolError(f"warpgroup {w} released use {use} {got} times (want {want})")
        return step


def random_tiles(rng: random.Random) -> list[int]:
    """A program's tile list: 1-6 tiles of 1-32 K-steps, short ones (1-3 steps) often."""
    return [rng.choice([1, 2, 3, rng.randint(1, 32)]) for _ in range(rng.randint(1, 6))]


def sweep(
    runs: int, release: str, hold_releases: tuple[int, ...], seed: int, stages_of=None, init: str = "eager"
) -> tuple[int, list[str]]:
    """``runs`` random programs per hold_release; returns (runs done, the failures' messages)."""
    rng = random.Random(seed)
    failures: list[str] = []
    done = 0
    for r in hold_releases:
        for _ in range(runs):
            stages = stages_of(r, rng) if stages_of else rng.randint(max(2, r + 1), 7)
            tiles = random_tiles(rng)
            try:
                Ring(tiles, stages, r, release, init).run(rng)
            except ProtocolError as e:
                failures.append(f"R={r} stages={stages} tiles={tiles}: {e}")
            done += 1
    return done, failures


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("hold_release", [1, 2, 3])
def test_held_stage_release_is_safe(hold_release: int) -> None:
    """The kernel's release (v19's at step 1, v20's at step 2 or 3; a shorter tile's at its last step): no deadlock,
    no stale read, no overwrite, every use but the last released exactly once, over random interleavings."""
    done, failures = sweep(400, "kernel", (hold_release,), seed=hold_release)
    assert done == 400 and not failures, failures[:5]


def test_short_tiles_and_every_stage_count() -> None:
    """Tiles shorter than hold_release (1 and 2 steps, the M = 64 and 128 grad_weight tiles) in every ring depth
    that allows the release step."""
    for stages in range(2, 8):
        for r in range(1, min(3, stages - 1) + 1):
            for tiles in ([1], [1, 1], [1, 1, 1, 1], [2, 1, 2], [32, 1, 32], [1, 32, 2, 32], [3, 3, 3]):
                for seed in range(5):
                    Ring(tiles, stages, r).run(random.Random(seed))


def test_release_at_the_bound() -> None:
    """hold_release = stages - 1, the largest GluonConfig allows, still passes (hold_release = stages deadlocks:
    test_broken_variants_fail)."""
    done, failures = sweep(100, "kernel", (2, 3, 4, 5, 6), seed=3, stages_of=lambda r, rng: r + 1)
    assert done == 500 and not failures, failures[:5]


def test_real_programs_tile_lists() -> None:
    """The tile lists of the plan's programs (grad_attn tiles of 32 steps, grad_weight tiles of ceil(M / 64))."""
    for m in (64, 128, 256, 512, 1024, 2048):
        cfg = gb.GluonConfig(128 if m >= 512 else 64, 128, 128, 128, stages=7, epi_hold=True)
        plan = gb.plan_for(m, cfg, 132)
        lists = tiles_per_program(plan)
        gw_steps = -(-m // 64)
        if plan.ga_first:
            kinds = {tuple(len(ga) * [32] + len(gw) * [gw_steps]) for ga, gw in lists}
        else:
            kinds = {tuple(len(gw) * [gw_steps] + len(ga) * [32]) for ga, gw in lists}
        for tiles in sorted(kinds)[:6]:
            for r in (1, 2, 3):
                Ring(list(tiles), 7, r).run(random.Random(m + r))


@pytest.mark.parametrize(
    ("release", "hold_release"),
    [("never", 2), ("twice", 2), ("no_wait", 2), ("kernel_r_equals_stages", 0)],
)
def test_broken_variants_fail(release: str, hold_release: int) -> None:
    """The model can fail: a held stage never released (deadlock or a missing release), released twice
    (over-arrival or a stage reloaded under a reader), released before its stores have read it (overwrite), or
    released at the step ``stages`` (the loader waits for it first: deadlock)."""
    if release == "kernel_r_equals_stages":
        done, failures = sweep(200, "kernel", (2, 3), seed=7, stages_of=lambda r, rng: r)
    else:
        done, failures = sweep(300, release, (hold_release,), seed=11)
    assert failures, f"{release}: {done} runs, none failed"
    if release in ("never", "kernel_r_equals_stages"):
        assert any("deadlock" in f for f in failures), failures[:3]
    if release == "no_wait":
        assert any("TMA store still reads" in f for f in failures), failures[:3]


@pytest.mark.parametrize("hold_release", [1, 2, 3])
def test_lazy_init_is_safe(hold_release: int) -> None:
    """v24's lazy init (the loader initialises each stage's mbarriers at its first fill, the consumers wait for the
    boot barrier it arrives on after the last, or after its loop when the program has fewer steps than stages): no
    consumer touches an uninitialised mbarrier, no deadlock, and everything else as with the eager init."""
    done, failures = sweep(400, "kernel", (hold_release,), seed=100 + hold_release, init="lazy")
    assert not failures, f"{len(failures)} of {done}: {failures[:3]}"


@pytest.mark.parametrize("init", ["lazy_early_boot", "lazy_no_tail"])
def test_broken_lazy_inits_fail(init: str) -> None:
    """The model can fail the lazy init: a boot barrier arrived on after the first stage's init only (a consumer
    reaches a later stage's mbarriers before their init), or no inits after the loop (a program of fewer steps than
    stages never boots its consumers: deadlock)."""
    done, failures = sweep(300, "kernel", (1, 2), seed=21, init=init)
    assert failures, f"{init}: {done} runs, none failed"
    want = "before their init" if init == "lazy_early_boot" else "deadlock"
    assert any(want in f for f in failures), failures[:3]


def test_config_bounds_hold_release() -> None:
    """GluonConfig refuses what the model shows deadlocks (hold_release >= stages) and what would not apply
    (hold_release > 1 without a cooperative held stage)."""
    base = gb.GluonConfig(128, 128, 128, 128, stages=7, epi_hold=True)
    assert base.hold_release == 1
    gb.GluonConfig(128, 128, 128, 128, stages=7, epi_hold=True, hold_release=6)
    gb.GluonConfig(128, 128, 128, 128, stages=7, pingpong=True, pp_gw_only=True, hold_release=2)
    for bad in (
        dict(epi_hold=True, hold_release=7),
        dict(epi_hold=True, hold_release=0),
        dict(hold_release=2),  # no held stage
        dict(pingpong=True, hold_release=2),  # ping-pong releases at the end of its own epilogue
        dict(pingpong=True, epi_hold=True, hold_release=2),
    ):
        with pytest.raises(ValueError):
            gb.GluonConfig(128, 128, 128, 128, stages=7, **bad)


def main() -> None:
    ap = argparse.ArgumentParser(description="the ring model's larger sweep")
    ap.add_argument("--runs", type=int, default=36000, help="programs in all, split over hold_release 1..3")
    args = ap.parse_args()
    per = args.runs // 3
    done, failures = sweep(per, "kernel", (1, 2, 3), seed=2026)
    print(f"kernel release, hold_release 1..3: {done} runs, {len(failures)} failures {failures[:3]}")
    for release in ("never", "twice", "no_wait"):
        d, f = sweep(max(per // 10, 100), release, (2,), seed=5)
        print(f"broken {release}: {d} runs, {len(f)} failed; first: {f[:1]}")
    d, f = sweep(max(per // 10, 100), "kernel", (2, 3, 4, 5, 6), seed=5, stages_of=lambda r, rng: r + 1)
    print(f"kernel release, hold_release = stages - 1 (2..6): {d} runs, {len(f)} failures {f[:3]}")
    d, f = sweep(max(per // 10, 100), "kernel", (2, 3), seed=5, stages_of=lambda r, rng: r)
    print(f"broken hold_release = stages: {d} runs, {len(f)} failed; first: {f[:1]}")
    d, f = sweep(per, "kernel", (1, 2, 3), seed=2027, init="lazy")
    print(f"lazy init (v24), hold_release 1..3: {d} runs, {len(f)} failures {f[:3]}")
    for init in ("lazy_early_boot", "lazy_no_tail"):
        d, f = sweep(max(per // 10, 100), "kernel", (1, 2), seed=5, init=init)
        print(f"broken {init}: {d} runs, {len(f)} failed; first: {f[:1]}")


if __name__ == "__main__":
    main()
