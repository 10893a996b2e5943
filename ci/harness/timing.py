"""The measurement protocol (named and hashed) and the timers that carry it out.

A protocol fixes everything that changes a figure: the timer, the warm-up and timed counts, the correctness
rounds, the L2 flush, input rotation, output zeroing and whether the host is let run ahead of the GPU. Its hash
(``storage.result.stable_hash`` of the definition) is stored with every figure; figures of different protocols
never share a series.

Timers (all take the same per-iteration preparation):

* ``cupti``: first-kernel-start to last-kernel-end of the call, from the profiler's CUPTI activity records
  (every stream's): the benchmark's rule and the primary figure wherever CUPTI works;
* ``cuda_events``: CUDA events recorded around the call, enqueued behind the L2 flush: the cross-check, and
  the fallback where the profiler cannot run.
* ``wall_clock``: ``time.perf_counter`` around the call (the CPU interpreter; no L2 flush).

Every iteration (warm-up too) gets its own inputs and zeroed outputs, all allocated before the loop so the
addresses are new each time and no preparation kernel runs inside the loop; the measuring worker's input sets
(``problem.reference.timing_sets``) also hold new values each time, so a call cannot reuse an earlier one's
results. The iterations whose outputs are checked again after the loop are drawn at random once it has run.
With ``host_ahead`` the GPU is first held by a sleep kernel long enough for the host to enqueue the flush and
the call, so host launch overhead is not in the figure (as with the benchmark's CUPTI spans). On the stream,
iteration i is then ``[sleep][flush][call's kernels...]``; the CUPTI timer attributes to iteration i every GPU
activity after the i-th flush kernel up to the next flush, less the next iteration's host-ahead sleep (the
marker names are learned once by profiling them alone): a sleep the call launches itself counts.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import random
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from problem.workload import CORRECTNESS_ROUNDS, TIMED_ITERS, WARMUP_ITERS
from storage.result import stable_hash, timing_stats

PROTOCOL_VERSION = 2  # bump when the measuring code changes what a figure means
TIMERS = ("cuda_events", "cupti", "wall_clock")
# The benchmark times the CUPTI span; it is the primary figure wherever CUPTI works, CUDA events the
# cross-check (and the fallback where the profiler cannot run).
GPU_TIMERS = ("cupti", "cuda_events")
DEFAULT_PRIMARY = "cupti"

# The files whose code makes a figure what it is: the harness. Their hash is part of every protocol, so a
# runner upgraded to another harness starts a new series instead of showing a step.
HARNESS_FILES = (
    "ci/harness/timing.py",
    "ci/harness/case_process.py",
    "ci/harness/measure.py",
    "ci/harness/hardware.py",
    "ci/harness/sandbox.py",
    "ci/harness/plan.py",
    "ci/harness/record.py",
    "ci/harness/replay.py",
    "problem/reference.py",
    "problem/correctness.py",
    "problem/workload.py",
    "storage/result.py",
)


@functools.cache
def harness_version() -> str:
    """A short hash of the harness's source (``HARNESS_FILES`` of this installation)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for rel in HARNESS_FILES:
        path = root / rel
        h.update(rel.encode())
        h.update(path.read_bytes() if path.exists() else b"-")
    return h.hexdigest()[:12]


# The CPU interpreter's reduced protocol (the kernel takes seconds per call there).
CPU_ROUNDS = 2
CPU_WARMUP = 1
CPU_ITERS = 5

# Host-ahead sleep: the first iteration's, and the floor; later ones cover twice the slowest enqueue seen.
_FIRST_SLEEP_US = 2000.0
_MIN_SLEEP_US = 100.0
_DEFAULT_CYCLES_PER_US = 2500.0  # used without NVML: above any current boost clock, so sleeps err long
_SET_MEMORY_FRACTION = 0.6  # rotated input sets may take this much of the free device memory
_PICK = random.SystemRandom()  # which timed iterations are kept: the OS's randomness, never a seeded RNG


@dataclass(frozen=True)
class Protocol:
    timer: str
    rounds: int  # correctness rounds
    warmup: int
    iters: int
    l2_flush: bool
    flush_l2_multiple: int = 2  # the flush buffer is this many times the L2 size
    rotate_inputs: bool = True
    zero_outputs: bool = True
    host_ahead: bool = True
    statistic: str = "median"
    harness: str = field(default_factory=harness_version)  # the harness version is part of the protocol

    def __post_init__(self) -> None:
        if self.timer not in TIMERS:
            raise ValueError(f"timer must be one of {TIMERS}, got {self.timer!r}")
        if self.rounds < 1 or self.iters < 1 or self.warmup < 0:
            raise ValueError("rounds and iters must be >= 1 and warmup >= 0")

    def definition(self) -> dict[str, Any]:
        d = asdict(self)
        d["version"] = PROTOCOL_VERSION
        return d

    @property
    def hash(self) -> str:
        return stable_hash(self.definition())

    @property
    def name(self) -> str:
        flush = f"l2x{self.flush_l2_multiple}" if self.l2_flush else "nol2flush"
        return f"{self.timer}-{flush}-w{self.warmup}-i{self.iters}-r{self.rounds}"

    def entry(self, l2_bytes: int | None) -> dict[str, Any]:
        """The result document's ``protocols[]`` object (schema keys first, then the optional ones)."""
        flush_bytes = int(self.flush_l2_multiple * l2_bytes) if (self.l2_flush and l2_bytes) else 0
        return {
            "name": self.name,
            "hash": self.hash,
            "timer": self.timer,
            "warmup": self.warmup,
            "iters": self.iters,
            "l2_flush": self.l2_flush,
            "flush_bytes": flush_bytes,
            "rotate_inputs": self.rotate_inputs,
            "statistic": self.statistic,
            "rounds": self.rounds,
            "zero_outputs": self.zero_outputs,
            "host_ahead": self.host_ahead,
            "flush_l2_multiple": self.flush_l2_multiple,
            "version": PROTOCOL_VERSION,
            "harness": self.harness,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Protocol:
        keys = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in keys})


def make_protocols(
    mode: str,
    *,
    rounds: int | None = None,
    warmup: int | None = None,
    iters: int | None = None,
    cupti: bool = True,
    primary: str = DEFAULT_PRIMARY,
) -> list[Protocol]:
    """The protocols of a run, the primary (the one series and scores use) first. ``cupti`` False (the
    profiler does not work here): CUDA events alone, primary whatever was asked."""

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    if mode == "cpu-interpreter":
        return [
            Protocol(
                "wall_clock",
                pick(rounds, CPU_ROUNDS),
                pick(warmup, CPU_WARMUP),
                pick(iters, CPU_ITERS),
                l2_flush=False,
                host_ahead=False,
            )
        ]
    if primary not in GPU_TIMERS:
        raise ValueError(f"primary timer must be one of {GPU_TIMERS}")
    if not cupti:
        primary = "cuda_events"
    timers = [primary] + ([t for t in GPU_TIMERS if t != primary] if cupti else [])
    return [
        Protocol(
            t, pick(rounds, CORRECTNESS_ROUNDS), pick(warmup, WARMUP_ITERS), pick(iters, TIMED_ITERS), l2_flush=True
        )
        for t in timers
    ]


# ------------------------------------------------------------------------------------------------ attribution
Activity = tuple[str, int, int]  # (name, start_ns, end_ns) of one GPU activity record


class AttributionError(RuntimeError):
    pass


def attribute_groups(
    activities: Sequence[Activity], flush_names: set[str], sleep_names: set[str], expected: int
) -> list[list[Activity]]:
    """Split GPU activities into iterations: each group is everything between one flush and the next, less
    the harness's own host-ahead sleep that directly precedes the next flush.

    Only flushes delimit: a sleep (or anything else) the measured call launches itself stays in its
    iteration, so no work can hide behind a kernel named like a marker; an extra flush-named kernel makes the
    count wrong. Activities before the first flush are ignored. Raises AttributionError when the number of
    groups is not ``expected`` or a group is empty.
    """
    groups: list[list[Activity]] = []
    open_group: list[Activity] | None = None
    for act in sorted(activities, key=lambda a: (a[1], a[2])):
        if act[0] in flush_names:
            if open_group is not None:
                groups.append(open_group)
            open_group = []
        elif open_group is not None:
            open_group.append(act)
    if open_group is not None:
        groups.append(open_group)
    for g in groups[:-1]:  # the next iteration's host-ahead sleep ends every group but the last
        if g and g[-1][0] in sleep_names:
            g.pop()
    if len(groups) != expected:
        raise AttributionError(f"CUPTI attribution: {len(groups)} flush-delimited groups, expected {expected}")
    for i, g in enumerate(groups):
        if not g:
            raise AttributionError(f"CUPTI attribution: no GPU activity recorded in iteration {i}")
    return groups


def span_us(group: Sequence[Activity]) -> float:
    """First start to last end of one iteration's activities, in microseconds."""
    return (max(a[2] for a in group) - min(a[1] for a in group)) / 1000.0


@contextlib.contextmanager
def _cuda_profile() -> Iterator[Any]:
    """A CUDA-activity-only profiler session (its cycle warning silenced: one cycle is all we use)."""
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            yield prof


class ActivityProfile:
    """``with ActivityProfile() as p: ...``, then ``p.activities()``: the GPU's activity records of the span (what
    the recorder compares with the launches it saw)."""

    def __enter__(self) -> ActivityProfile:
        self._cm = _cuda_profile()
        self._prof = self._cm.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cm.__exit__(*exc)

    def activities(self) -> list[Activity]:
        return _gpu_activities(self._prof)


def _gpu_activities(prof: Any) -> list[Activity]:
    """GPU activity records (kernels, memcpy, memset) of a finished torch.profiler session, in ns."""
    from torch.autograd import DeviceType

    out: list[Activity] = []
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is not None:
        for ev in results.events():
            if ev.device_type() == DeviceType.CUDA and ev.end_ns() > ev.start_ns():
                out.append((ev.name(), int(ev.start_ns()), int(ev.end_ns())))
        return out
    for ev in prof.events():  # public API fallback: microsecond floats
        if ev.device_type == DeviceType.CUDA and ev.time_range.end > ev.time_range.start:
            out.append((ev.name, int(ev.time_range.start * 1000), int(ev.time_range.end * 1000)))
    return out


# ------------------------------------------------------------------------------------------------ timers
@dataclass
class KeptIteration:
    """A timed iteration kept for checking after the loop: its number among the timed iterations (0-based,
    warm-up not counted) and the arguments it was called with."""

    index: int
    args: tuple
    kwargs: dict


@dataclass
class TimingRun:
    samples_us: list[float]  # the timed iterations only
    extra: dict[str, Any] = field(default_factory=dict)  # diagnostics stored beside the samples
    kept: list[KeptIteration] = field(default_factory=list)  # timed iterations drawn at random after the loop


class Timer:
    """Runs protocols on one device; holds the flush buffer and the learned marker kernel names."""

    def __init__(self, device: Any, l2_bytes: int | None = None, max_sm_clock_mhz: int | None = None) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        self.l2_bytes = l2_bytes or 0
        self.cycles_per_us = float(max_sm_clock_mhz or _DEFAULT_CYCLES_PER_US)
        self._flush_bufs: dict[int, Any] = {}
        self._markers: tuple[set[str], set[str]] | None = None

    # -- pieces of an iteration
    def _flush_buf(self, protocol: Protocol) -> Any | None:
        if not (protocol.l2_flush and self.is_cuda and self.l2_bytes):
            return None
        nbytes = int(protocol.flush_l2_multiple * self.l2_bytes)
        if nbytes not in self._flush_bufs:
            self._flush_bufs[nbytes] = self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)
        return self._flush_bufs[nbytes]

    def _sleep(self, us: float) -> None:
        self.torch.cuda._sleep(int(us * self.cycles_per_us))

    def _check_memory(self, set_bytes: int, n: int) -> None:
        if not self.is_cuda:
            return
        free, _ = self.torch.cuda.mem_get_info(self.device)
        need = set_bytes * n
        if need > _SET_MEMORY_FRACTION * free:
            raise MemoryError(
                f"{n} rotated input/output sets need {need / 2**30:.1f} GiB; only {free / 2**30:.1f} GiB free"
            )

    def _enqueue(
        self, protocol: Protocol, fn: Callable, sets: list[tuple[tuple, dict]], events: list | None
    ) -> list[float]:
        """Enqueue every iteration (no synchronisation inside); returns host enqueue times (us)."""
        buf = self._flush_buf(protocol)
        ahead = protocol.host_ahead and self.is_cuda
        sleep_us = _FIRST_SLEEP_US
        host: list[float] = []
        for i, (args, kwargs) in enumerate(sets):
            t0 = time.perf_counter()
            if ahead:
                self._sleep(sleep_us)
            if buf is not None:
                buf.fill_(0x5A)
            if events is not None:
                events[i][0].record()
            fn(*args, **kwargs)
            if events is not None:
                events[i][1].record()
            dt = (time.perf_counter() - t0) * 1e6
            host.append(dt)
            sleep_us = max(_MIN_SLEEP_US, 2.0 * max(host))
        return host

    def _markers_for(self, protocol: Protocol) -> tuple[set[str], set[str]]:
        """Names of the sleep and flush kernels, learned by profiling them alone once."""
        if self._markers is None:
            buf = self._flush_buf(protocol)
            if buf is None:
                raise AttributionError("the CUPTI timer needs the L2 flush (its kernels delimit iterations)")
            self.torch.cuda.synchronize(self.device)
            with _cuda_profile() as prof:
                self._sleep(_MIN_SLEEP_US)
                self.torch.cuda.synchronize(self.device)
                buf.fill_(0x5A)
                self.torch.cuda.synchronize(self.device)
            acts = sorted(_gpu_activities(prof), key=lambda a: a[1])
            if len(acts) < 2:
                raise AttributionError(f"CUPTI: profiling the sleep and flush kernels gave {len(acts)} records")
            self._markers = ({acts[0][0]}, {a[0] for a in acts[1:]})
        return self._markers

    def cupti_works(self) -> bool:
        """Whether the profiler's CUPTI activity records can be read here (else CUDA events are primary)."""
        if not self.is_cuda or not self.l2_bytes:
            return False
        try:
            self._markers_for(Protocol("cupti", 1, 0, 1, l2_flush=True))
        except Exception:
            return False
        return True

    # -- the protocol
    def run(
        self, protocol: Protocol, fn: Callable, make_set: Callable[[], tuple[tuple, dict]], *, keep: int = 0
    ) -> TimingRun:
        """Time ``fn(*args, **kwargs)`` under the protocol; ``make_set`` gives one iteration's fresh inputs.
        ``keep``: return ``keep`` timed iterations (all of them when there are no more), drawn at random once the
        loop has run, with their arguments (their outputs are checked again)."""
        torch = self.torch
        n = protocol.warmup + protocol.iters
        first = make_set()
        set_bytes = sum(t.numel() * t.element_size() for t in _tensors(first))
        self._check_memory(set_bytes, n)
        sets = [first] + [make_set() for _ in range(n - 1)]
        extra: dict[str, Any] = {}
        if protocol.timer == "wall_clock":
            samples = []
            for args, kwargs in sets:
                if self.is_cuda:
                    torch.cuda.synchronize(self.device)
                t0 = time.perf_counter()
                fn(*args, **kwargs)
                if self.is_cuda:
                    torch.cuda.synchronize(self.device)
                samples.append((time.perf_counter() - t0) * 1e6)
        elif not self.is_cuda:
            raise RuntimeError(f"timer {protocol.timer} needs a CUDA device")
        elif protocol.timer == "cuda_events":
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
            torch.cuda.synchronize(self.device)
            host = self._enqueue(protocol, fn, sets, events)
            torch.cuda.synchronize(self.device)
            samples = [s.elapsed_time(e) * 1000.0 for s, e in events]
            extra["host_enqueue_us"] = statistics.median(host[protocol.warmup :])
        else:  # cupti
            sleep_names, flush_names = self._markers_for(protocol)
            torch.cuda.synchronize(self.device)
            with _cuda_profile() as prof:
                host = self._enqueue(protocol, fn, sets, None)
                torch.cuda.synchronize(self.device)
            groups = attribute_groups(_gpu_activities(prof), flush_names, sleep_names, n)
            samples = [span_us(g) for g in groups]
            extra["host_enqueue_us"] = statistics.median(host[protocol.warmup :])
            extra["activities_per_iter"] = statistics.median(len(g) for g in groups[protocol.warmup :])
            extra["activity_names"] = sorted({a[0][:160] for g in groups for a in g})[:8]
        if len({a.data_ptr() for s in sets for a in _tensors(s[0])}) != sum(len(_tensors(s[0])) for s in sets):
            raise RuntimeError("timing: two iterations shared an input address (every iteration needs fresh inputs)")
        timed = range(protocol.iters)
        picked = sorted(timed if keep >= protocol.iters else _PICK.sample(timed, keep)) if keep > 0 else []
        kept = [KeptIteration(i, *sets[protocol.warmup + i]) for i in picked]
        del sets
        return TimingRun([float(s) for s in samples[protocol.warmup :]], extra, kept)


def _tensors(obj: Any) -> list[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def timing_entry(impl: str, protocol: Protocol, run: TimingRun) -> dict[str, Any]:
    """The result document's ``timings[]`` object."""
    return {
        "impl": impl,
        "protocol": protocol.hash,
        "samples_us": run.samples_us,
        **timing_stats(run.samples_us),
        **run.extra,
    }
