"""A protocol model of the Gluon kernel's ring (kernel/gluon_backward.py: ``_loader`` with ``_consumer``, the
cooperative schedule, or with ``_consumer_pp``, ping-pong; ``_lazy_init`` with ``lazy_init``).

Pure Python, no GPU. One loader and two consumer warpgroups run a program's tile list (tiles of 1-32 K-steps) over a
ring of 2-7 stages; the mbarriers have the hardware's phase-parity semantics (``try_wait.parity P`` succeeds once the
barrier's current phase has a parity other than P, so it cannot tell a fill from the one two fills back); TMA loads
and stores complete asynchronously, in any order. A random scheduler interleaves every atomic action (a process's
next step once its barrier lets it, a load's or a store's completion). The two schedules:

- **cooperative** (``_consumer``): both warpgroups run every tile, each its half of every K-step's MMAs; a warpgroup
  releases a stage once the MMA that read it has retired (``warpgroup_mma_wait(1)`` after the next step's MMA, or
  ``wait(0)`` after the tile's last), so a stage goes back to the loader after two arrivals; the epilogue goes into
  the warpgroup's own buffer once that buffer's previous TMA stores have read it (``tma.store_wait(0)``);
- **ping-pong** (``_consumer_pp``): the warpgroups run the program's tiles in turn, whole, each skipping the other's
  stages; a warpgroup waits for the other's previous main loop (``sync[2 - WG]``) before its own first stage, and
  arrives on its own turn barrier (``sync[1 + WG]``) after its last; a stage goes back after one arrival; the
  epilogue goes into the tile's last stage, held until its TMA stores have read it (``_release_held``).

A run fails on

- a **deadlock**: nothing can move and the program is not finished;
- a **stale read**: a consumer passes its ``ready`` wait while the stage holds another fill's data;
- an **overwrite**: the loader starts a TMA load into a stage a consumer still holds (before its release, or with
  its MMA in flight) or a TMA store still reads, or an epilogue is written where a TMA store still reads or the
  other warpgroup's MMA reads;
- an mbarrier **over-arrival** (more arrivals than the phase has pending: undefined on the hardware);
- a release count other than exactly once for every use of the ring by each warpgroup that ran it (both
  cooperative warpgroups, the tile's own in ping-pong);
- with ``init="lazy"`` (v24, ``GluonConfig.lazy_init``: the loader initialises each stage's mbarriers as it first
  fills the stage and arrives on a boot barrier once all are, the consumers wait for it first), a consumer
  **touching a stage's mbarrier before its init**.

The kernel's protocol (``fault=None``) must pass in both schedules with either init; each broken variant (a stage
released before its MMA retired, one arrival releasing a cooperative stage, an epilogue written or a held stage
released before the stores have read it, ping-pong without its turns or with two arrivals a stage, a held stage
never released, the lazy init's boot too early or missing its tail, a ring of one stage) must fail in some run, so
the model can fail. ``PYTHONPATH=. python tests/kernel/test_ring_model.py --runs 36000`` runs a larger sweep and prints
its counts.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import pytest

from kernel import gluon_backward as gb
from kernel.configs import bucket_for
from problem.workload import HIDDEN
from tests.support.plan_tiles import tiles_per_program

MODES = ("coop", "pingpong")
# the broken variants, per schedule: what the kernel must not do
FAULTS = {
    "coop": ("early_release", "one_consumer", "no_store_wait"),
    "pingpong": ("early_release", "no_turns", "two_consumers", "no_store_wait", "never_release_held"),
}


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
        self, tiles: list[int], stages: int, mode: str = "coop", init: str = "eager", fault: str | None = None
    ) -> None:
        assert mode in MODES and (fault is None or fault in FAULTS[mode]), (mode, fault)
        self.tiles, self.S, self.mode, self.init, self.fault = tiles, stages, mode, init, fault
        # eager: every stage's mbarriers initialised before the partitions start; lazy: by the loader at a stage's
        # first fill, the boot barrier after the last (or after the loop: a program of fewer steps than stages);
        # broken: lazy_early_boot (boot after the first stage's init), lazy_no_tail (no inits after the loop)
        self.inited: set[int] = set(range(stages)) if init == "eager" else set()
        self.boot = init == "eager"
        self.total = sum(tiles)
        self.ready = [MBarrier(1) for _ in range(stages)]
        # _consumers(PINGPONG): the arrivals that release a stage, both warpgroups' cooperative, the tile's own in
        # ping-pong
        consumers = 2 if mode == "coop" else 1
        if fault in ("one_consumer", "two_consumers"):
            consumers = 3 - consumers
        self.empty = [MBarrier(consumers) for _ in range(stages)]
        self.turn = [MBarrier(1), MBarrier(1)]  # ping-pong: sync[1 + w], warpgroup w's main loop passed
        self.tag: list[int | None] = [None] * stages  # the fill whose data a stage holds (None: being loaded)
        self.fills: list[tuple[int, int]] = []  # TMA loads in flight: (use, stage)
        # TMA stores that have not yet read their source: (warpgroup, stage), or (warpgroup, -1) for the cooperative
        # warpgroup's own epilogue buffer
        self.stores: list[tuple[int, int]] = []
        self.holding: list[dict[int, int]] = [{}, {}]  # per warpgroup: stage -> the use it holds there
        self.mma: list[list[int]] = [[], []]  # per warpgroup: stages read by MMAs in flight
        self.released: list[dict[int, int]] = [{}, {}]  # per warpgroup: use -> times released
        self.ran: list[set[int]] = [set(), set()]  # per warpgroup: the uses it ran MMAs on

    # -------------------------------------------------------------------------------------------- actions
    def _touch(self, w: int, s: int) -> None:
        if s not in self.inited:
            raise ProtocolError(f"warpgroup {w} touches stage {s}'s mbarriers before their init")

    def _release(self, w: int, use: int) -> None:
        s = use % self.S
        self._touch(w, s)
        if self.holding[w].get(s) == use:
            del self.holding[w][s]
        self.released[w][use] = self.released[w].get(use, 0) + 1
        self.empty[s].arrive(1)

    def _stores_done(self, w: int) -> Cond:
        """``tma.store_wait(0)``: every TMA store this warpgroup issued has read its source."""
        return lambda: all(sw != w for sw, _ in self.stores)

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

    def _main_loop(self, w: int, first: int, n: int) -> Proc:
        """One tile's K-steps (uses first .. first + n - 1): each waits for its fill, issues its MMA, lets the
        previous step's MMA retire (``warpgroup_mma_wait(1)``; ping-pong's two 64-row accumulators: ``wait(2)``,
        the previous step's pair) and releases that step's stage; after the last, ``wait(0)``."""
        for j in range(n):
            i, s = first + j, (first + j) % self.S
            self._touch(w, s)
            yield lambda s=s, i=i: self.ready[s].passed((i // self.S) & 1)
            if self.tag[s] != i:
                raise ProtocolError(f"stale read: warpgroup {w} reads use {i} in stage {s}, holding {self.tag[s]}")
            self.holding[w][s] = i
            self.ran[w].add(i)
            self.mma[w].append(s)  # warpgroup_mma(is_async=True)
            if self.fault == "early_release":  # broken: the stage handed back with its MMA still reading it
                self._release(w, i)
            yield ALWAYS
            self.mma[w] = self.mma[w][-1:]  # the previous step's MMA has retired
            if j > 0 and self.fault != "early_release":
                self._release(w, i - 1)
            yield ALWAYS
        self.mma[w] = []  # warpgroup_mma_wait(0)

    def consumer(self, w: int) -> Proc:
        """``_consumer``: warpgroup w's half of every tile, its epilogue in its own buffer."""
        yield lambda: self.boot  # lazy: the boot barrier before any stage's (eager: already passed)
        it = 0
        for n in self.tiles:
            yield from self._main_loop(w, it, n)
            it += n
            if self.fault != "early_release":
                self._release(w, it - 1)  # the tile's last stage, its MMA retired
            if self.fault != "no_store_wait":
                yield self._stores_done(w)  # the previous tile's stores have left the buffer
            if not self._stores_done(w)():
                raise ProtocolError(f"overwrite: warpgroup {w}'s epilogue buffer written while a TMA store reads it")
            self.stores.append((w, -1))  # epilogue written, TMA stores issued
            yield ALWAYS
        yield self._stores_done(w)  # the final tma.store_wait(0)

    def consumer_pp(self, w: int) -> Proc:
        """``_consumer_pp``: warpgroup w's tiles (every other one of the program), whole, in turn with the other's."""
        yield lambda: self.boot
        it = 0
        for nt, n in enumerate(self.tiles):
            if nt % 2 != w:  # the other warpgroup's tile: skip its stages
                it += n
                continue
            if nt > 0 and self.fault != "no_turns":  # the other warpgroup's previous main loop has passed
                yield lambda nt=nt: self.turn[1 - w].passed(((nt - 1) // 2) & 1)
            yield from self._main_loop(w, it, n)
            it += n
            self.turn[w].arrive(1)  # the other warpgroup's turn
            yield ALWAYS
            last, s = it - 1, (it - 1) % self.S
            # the epilogue in the tile's last stage, still held: not refilled, not read by the other's MMAs
            if self.tag[s] != last or s in self.mma[1 - w]:
                raise ProtocolError(f"overwrite: warpgroup {w}'s epilogue into stage {s}, refilled or read")
            self.stores.append((w, s))  # epilogue written, TMA stores issued
            yield ALWAYS
            if self.fault == "never_release_held" or self.fault == "early_release":
                continue
            if self.fault != "no_store_wait":
                yield self._stores_done(w)  # _release_held: the stores have read the stage
            self._release(w, last)
        yield self._stores_done(w)

    # -------------------------------------------------------------------------------------------- scheduler
    def run(self, rng: random.Random, max_actions: int = 200_000) -> int:
        """Interleave everything at random until the program ends; returns the actions taken."""
        consumer = self.consumer if self.mode == "coop" else self.consumer_pp
        procs: dict[str, Proc] = {"loader": self.loader(), "c0": consumer(0), "c1": consumer(1)}
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
                want = 1 if use in self.ran[w] else 0
                got = self.released[w].get(use, 0)
                if got != want:
                    raise ProtocolError(f"warpgroup {w} released use {use} {got} times (want {want})")
        uses = set(range(self.total))
        if self.ran[0] | self.ran[1] != uses or (self.mode == "coop" and self.ran[0] != self.ran[1]):
            raise ProtocolError("a use of the ring not run by the warpgroups it belongs to")
        return step


def random_tiles(rng: random.Random) -> list[int]:
    """A program's tile list: 1-6 tiles of 1-32 K-steps, short ones (1-3 steps) often."""
    return [rng.choice([1, 2, 3, rng.randint(1, 32)]) for _ in range(rng.randint(1, 6))]


def sweep(
    runs: int, mode: str, seed: int, init: str = "eager", fault: str | None = None, stages: tuple[int, int] = (2, 7)
) -> tuple[int, list[str]]:
    """``runs`` random programs (tile lists, ring depths in ``stages``, interleavings); returns (runs done, the
    failures' messages)."""
    rng = random.Random(seed)
    failures: list[str] = []
    for _ in range(runs):
        depth = rng.randint(*stages)
        tiles = random_tiles(rng)
        try:
            Ring(tiles, depth, mode, init, fault).run(rng)
        except ProtocolError as e:
            failures.append(f"{mode} stages={depth} tiles={tiles}: {e}")
    return runs, failures


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("init", ["eager", "lazy"])
@pytest.mark.parametrize("mode", MODES)
def test_the_kernels_ring_is_safe(mode: str, init: str) -> None:
    """Both schedules with either init, over random tile lists, ring depths of 2-7 and interleavings: no deadlock,
    no stale read, no overwrite, no over-arrival, every use released exactly once by each warpgroup that ran it, no
    mbarrier touched before its init."""
    done, failures = sweep(400, mode, seed=MODES.index(mode) + 10 * (init == "lazy"), init=init)
    assert done == 400 and not failures, failures[:5]


@pytest.mark.parametrize("mode", MODES)
def test_short_tiles_and_every_stage_count(mode: str) -> None:
    """Tiles of 1-3 steps (the M = 64-192 grad_weight tiles) beside 32-step ones, on every ring depth from 2 to 7:
    ping-pong's held stage and skipped stages, and programs of fewer steps than stages (the lazy init's tail)."""
    for stages in range(2, 8):
        for tiles in ([1], [1, 1], [1, 1, 1, 1], [2, 1, 2], [32, 1, 32], [1, 32, 2, 32], [3, 3, 3]):
            for seed in range(5):
                for init in ("eager", "lazy"):
                    Ring(tiles, stages, mode, init).run(random.Random(seed))


@pytest.mark.parametrize("bucket", sorted(gb.GLUON_TABLE))
def test_real_programs_tile_lists(bucket: int) -> None:
    """The tile lists of the table entry's programs (grad_attn tiles of HIDDEN / BK steps, grad_weight tiles of
    ceil(M / BK)) at M values of its bucket, on its ring: its depth, its schedule, its init."""
    cfg, _ = gb.GLUON_TABLE[bucket]
    mode, init = ("pingpong" if cfg.pingpong else "coop"), ("lazy" if cfg.lazy_init else "eager")
    ms = [m for m in range(cfg.ga_bm, bucket + 1, cfg.ga_bm) if bucket_for(m) == bucket]
    assert ms, bucket
    for m in sorted({ms[0], ms[len(ms) // 2], ms[-1]}):  # the bucket's smallest, middle and largest M
        plan = gb.plan_for(m, cfg, 132)
        ga_steps, gw_steps = HIDDEN // gb.BK, -(-m // gb.BK)
        if plan.ga_first:
            kinds = {tuple(len(ga) * [ga_steps] + len(gw) * [gw_steps]) for ga, gw in tiles_per_program(plan)}
        else:
            kinds = {tuple(len(gw) * [gw_steps] + len(ga) * [ga_steps]) for ga, gw in tiles_per_program(plan)}
        for tiles in sorted(kinds)[:6]:
            Ring(list(tiles), cfg.stages, mode, init).run(random.Random(m))


BROKEN = [(mode, fault) for mode in MODES for fault in FAULTS[mode]]


@pytest.mark.parametrize(("mode", "fault"), BROKEN)
def test_broken_variants_fail(mode: str, fault: str) -> None:
    """The model can fail: a stage released with its MMA in flight (the loader overwrites it), a cooperative stage
    released by one warpgroup's arrival (or over-arrived), an epilogue buffer rewritten or a held stage released
    before its TMA stores have read it, ping-pong without its turns (a warpgroup that skipped ahead takes a fill
    two back, of the same parity, for its own), ping-pong stages waiting for two arrivals or a held stage never
    released (deadlock)."""
    done, failures = sweep(300, mode, seed=11, fault=fault)
    assert failures, f"{mode} {fault}: {done} runs, none failed"
    want = {
        "early_release": "overwrite: load",
        "one_consumer": "overwrite: load",
        "no_store_wait": "buffer written while a TMA store reads" if mode == "coop" else "a TMA store still reads",
        "no_turns": "stale read",
        "two_consumers": "deadlock",
        "never_release_held": "deadlock",
    }[fault]
    assert any(want in f for f in failures), failures[:3]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("init", ["lazy_early_boot", "lazy_no_tail"])
def test_broken_lazy_inits_fail(init: str, mode: str) -> None:
    """The model can fail the lazy init: a boot barrier arrived on after the first stage's init only (a consumer
    reaches a later stage's mbarriers before their init), or no inits after the loop (a program of fewer steps than
    stages never boots its consumers: deadlock)."""
    done, failures = sweep(300, mode, seed=21, init=init)
    assert failures, f"{mode} {init}: {done} runs, none failed"
    want = "before their init" if init == "lazy_early_boot" else "deadlock"
    assert any(want in f for f in failures), failures[:3]


@pytest.mark.parametrize("mode", MODES)
def test_one_stage_deadlocks_a_tile_of_two_steps(mode: str) -> None:
    """A ring of one stage: a K-step's stage is handed back only after the next step's MMA is issued, which waits for
    that stage's next fill: deadlock in any tile of two steps or more (every grad_attn tile has HIDDEN / BK); tiles
    of one step still run."""
    for tiles in ([2], [1, 32], [HIDDEN // gb.BK]):
        with pytest.raises(ProtocolError, match="deadlock"):
            Ring(tiles, 1, mode).run(random.Random(0))
    Ring([1, 1, 1], 1, mode).run(random.Random(0))


def main() -> None:
    ap = argparse.ArgumentParser(description="the ring model's larger sweep")
    ap.add_argument("--runs", type=int, default=36000, help="programs in all, split over the schedules and inits")
    args = ap.parse_args()
    per = args.runs // 4
    for mode in MODES:
        for init in ("eager", "lazy"):
            done, failures = sweep(per, mode, seed=2026, init=init)
            print(f"{mode}, {init} init: {done} runs, {len(failures)} failures {failures[:3]}")
        for fault in FAULTS[mode]:
            d, f = sweep(max(per // 10, 100), mode, seed=5, fault=fault)
            print(f"broken {mode} {fault}: {d} runs, {len(f)} failed; first: {f[:1]}")
        for init in ("lazy_early_boot", "lazy_no_tail"):
            d, f = sweep(max(per // 10, 100), mode, seed=5, init=init)
            print(f"broken {mode} {init}: {d} runs, {len(f)} failed; first: {f[:1]}")


if __name__ == "__main__":
    main()
