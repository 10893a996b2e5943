"""What a runner needs to coexist with others, on one machine or many: its GPU model, leases, the spool.

The job runner (``ci.service.runner.JobRunner``) calls these; each works on both backends (file and lake).

- ``detect_gpu_model(slot)``: the model a runner measures on ("H200", "B200", ...; "cpu-interpreter" without a
  GPU); on a lake, a job is (commit, GPU model) and a runner only takes its own model's jobs.
- ``hold(db, job)``: the job's lease while it is processed: a thread renews the heartbeat
  (``storage.jobs.hold``); a runner killed mid-job stops renewing it, and another runner recovers the job once
  the lease has run out (or at once, on the same host, when the owner's process is gone).
- storing a result is ``storage.spool.store``: spool it (durably, on local disk), ingest it, link it to its job,
  remove the spool file; a document that fails validation is a rejected run. If the ingest fails (lock, disk
  full, catalog unreachable) it raises and the file stays.
- ``flush_spool(db)``: ingest what earlier attempts left in the spool (never raises); the runner calls it when
  it starts and before each job.
- ``Compaction``: ``solci compact`` every N jobs from a job runner (``solci worker --compact-every``), on a lake only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from problem.workload import gpu_model
from storage import spool
from storage.jobs import CPU_MODEL, hold  # noqa: F401  (re-exported for the runner)
from storage.lake import compact


def detect_gpu_model(slot: str = "gpu0") -> str:
    """The model of the GPU of ``slot`` (gpuN: device N) through NVML, named as ``problem.workload`` names
    models; its NVML name when the workload does not know it; ``cpu-interpreter`` without a GPU."""
    env = os.environ.get("SOLCI_GPU_MODEL")
    if env:
        return env
    try:
        import pynvml  # lazy: an optional dependency, loaded only where a GPU model is to be detected

        pynvml.nvmlInit()
    except Exception:
        return CPU_MODEL
    try:
        index = int(slot[3:]) if slot.startswith("gpu") and slot[3:].isdigit() else 0
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return CPU_MODEL
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(min(index, count - 1)))
        name = name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return CPU_MODEL
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return gpu_model(name) or name


def flush_spool(db: Any, echo: Callable[[str], None] | None = None) -> Any:
    """Ingest the results earlier attempts left in this host's spool (a FlushReport); never raises."""
    try:
        return spool.flush(db, echo=echo)
    except Exception as exc:  # the runner goes on; the files stay
        if echo:
            echo(f"spool: flush failed: {exc.__class__.__name__}: {exc}")
        return spool.FlushReport(error=str(exc))


@dataclass
class Compaction:
    """Compact a lake every ``every`` finished jobs (0: never); what ``solci worker --compact-every N`` does."""

    every: int = 0
    done: int = 0

    def after_job(self, db: Any, echo: Callable[[str], None] | None = None) -> dict | None:
        if self.every <= 0 or getattr(db, "backend", "file") != "lake":
            return None
        self.done += 1
        if self.done % self.every:
            return None
        try:
            result = compact(db)
        except Exception as exc:  # compaction is housekeeping: a failure never stops the runner
            if echo:
                echo(f"compaction failed: {exc.__class__.__name__}: {exc}")
            return None
        if echo:
            echo(f"compacted the lake: {result}")
        return result
