"""The hardware a run measures on: a stable fingerprint, and NVML telemetry sampled around each case.

Runs inside the worker (the process that owns the device). NVML (``pynvml`` from nvidia-ml-py) is optional:
every reading that fails is left out rather than guessed.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from problem.workload import CPU_LABEL, gpu_model
from storage.result import stable_hash

# The fields that identify the hardware and software stack (not the host name): the fingerprint's input.
_STABLE_FIELDS = (
    "label",
    "gpu_model",
    "gpu_name",
    "sm_count",
    "memory_bytes",
    "driver",
    "cuda",
    "torch",
    "triton",
    "python",
    "cpu",
)

_THROTTLE_NAMES = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml():
    """The pynvml module, initialised; None when NVML is unavailable."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


class Nvml:
    """NVML handle for the torch device; every method returns partial data instead of raising."""

    def __init__(self, device: Any = None) -> None:
        self.lib = _nvml()
        self.handle = None
        if self.lib is None or device is None:
            return
        self.handle = self._handle_for(device)

    def _handle_for(self, device: Any):
        import torch

        lib = self.lib
        props = torch.cuda.get_device_properties(device)
        uuid = str(getattr(props, "uuid", "") or "")
        if uuid:
            for candidate in (uuid, f"GPU-{uuid}"):
                try:
                    return lib.nvmlDeviceGetHandleByUUID(candidate)
                except Exception:
                    pass
        try:
            bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
            return lib.nvmlDeviceGetHandleByPciBusId(bus)
        except Exception:
            pass
        try:  # last resort: the only visible GPU is NVML's index 0 when CUDA_VISIBLE_DEVICES is unset
            if lib.nvmlDeviceGetCount() == 1 or not os.environ.get("CUDA_VISIBLE_DEVICES"):
                return lib.nvmlDeviceGetHandleByIndex(torch.device(device).index or 0)
        except Exception:
            pass
        return None

    def driver(self) -> str | None:
        if self.lib is None:
            return None
        try:
            v = self.lib.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        except Exception:
            return None

    def max_sm_clock_mhz(self) -> int | None:
        if self.handle is None:
            return None
        try:
            return int(self.lib.nvmlDeviceGetMaxClockInfo(self.handle, self.lib.NVML_CLOCK_SM))
        except Exception:
            return None

    def sample(self) -> dict[str, Any] | None:
        """Clocks, temperature, power and throttle reasons now; None without NVML."""
        if self.handle is None:
            return None
        lib, h = self.lib, self.handle
        out: dict[str, Any] = {}
        readings = {
            "sm_clock_mhz": lambda: lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_MEM),
            "temperature_c": lambda: lib.nvmlDeviceGetTemperature(h, lib.NVML_TEMPERATURE_GPU),
            "power_w": lambda: lib.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "utilization_pct": lambda: lib.nvmlDeviceGetUtilizationRates(h).gpu,
        }
        for key, read in readings.items():
            try:
                out[key] = read()
            except Exception:
                pass
        reasons = None
        for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            try:
                reasons = int(getattr(lib, fn)(h))
                break
            except Exception:
                continue
        if reasons is not None:
            out["throttle_reasons"] = reasons
            out["throttle"] = [name for bit, name in _THROTTLE_NAMES.items() if reasons & bit]
        return out or None


def fingerprint(device: Any, mode: str, nvml: Nvml | None = None) -> dict[str, Any]:
    """The result document's ``hardware`` object for a torch device ("cuda:N") or the CPU interpreter.

    Extra optional keys beside the schema's: ``compute_capability``, ``l2_bytes``, ``max_sm_clock_mhz``.
    """
    import torch
    import triton

    hw: dict[str, Any] = {
        "label": CPU_LABEL,
        "gpu_model": None,
        "gpu_name": None,
        "sm_count": None,
        "memory_bytes": None,
        "driver": None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "cpu": cpu_name(),
    }
    if mode == "gpu":
        props = torch.cuda.get_device_properties(device)
        nvml = nvml or Nvml(device)
        hw.update(
            label=props.name,
            gpu_model=gpu_model(props.name),
            gpu_name=props.name,
            sm_count=props.multi_processor_count,
            memory_bytes=props.total_memory,
            driver=nvml.driver(),
            compute_capability=f"{props.major}.{props.minor}",
            l2_bytes=props.L2_cache_size,
            max_sm_clock_mhz=nvml.max_sm_clock_mhz(),
        )
    stable = {k: hw.get(k) for k in _STABLE_FIELDS}
    stable["python"] = ".".join(platform.python_version_tuple()[:2])  # 3.11.2 and 3.11.7 measure alike
    hw["fingerprint"] = stable_hash(stable, length=64)
    return hw
