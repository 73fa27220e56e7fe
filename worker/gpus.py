"""This worker host's GPU inventory: declared (TORCHYARD_FAKE_GPUS) or found with NVML.

No NVML (nvidia-ml-py not installed, no driver) or no GPUs means an empty inventory: a CPU-only
host, which runs only gpus: 0 runs.

With NVML, every heartbeat and every scheduling question also carries each GPU's stats
(memory, utilization, compute process ids): a GPU running processes torchyard has not leased is
busy (external) and is not handed out (app.gpus.fleet_view.external_gpus).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import socket
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from app.settings import Settings, get_settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inventory:
    host: str
    gpus: tuple[int, ...]
    source: str  # "fake", "nvml" or "none"


def parse_fake_gpus(value: str) -> tuple[int, ...]:
    """ "0,1,3" -> (0, 1, 3); indices must be distinct non-negative integers."""
    indices = [int(part) for part in value.replace(" ", "").split(",") if part]
    if any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise ValueError(f"TORCHYARD_FAKE_GPUS must list distinct GPU indices, not {value!r}")
    return tuple(sorted(indices))


def _pynvml() -> ModuleType | None:
    """pynvml, or the stand-in that settings.nvml_module names, a module or a .py file (the
    one place NVML is imported, so a stand-in replaces every NVML call of the worker); None
    when missing."""
    name = get_settings().nvml_module
    try:
        if not name.endswith(".py"):
            return importlib.import_module(name)
        if name not in _STANDINS:
            spec = importlib.util.spec_from_file_location("torchyard_nvml_standin", name)
            if spec is None or spec.loader is None:
                return None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _STANDINS[name] = module
        return _STANDINS[name]
    except (ImportError, OSError):
        return None


_STANDINS: dict[str, ModuleType] = {}


def nvml_gpus() -> tuple[int, ...]:
    pynvml = _pynvml()
    if pynvml is None:
        return ()
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver, no device: a CPU-only host
        log.info("NVML unavailable (%s): no GPUs on this host", exc)
        return ()
    try:
        return tuple(range(int(pynvml.nvmlDeviceGetCount())))
    finally:
        pynvml.nvmlShutdown()


def host_name(settings: Settings) -> str:
    return settings.worker_host or socket.gethostname()


def detect(settings: Settings) -> Inventory:
    host = host_name(settings)
    if settings.fake_gpus.strip():
        return Inventory(host, parse_fake_gpus(settings.fake_gpus), "fake")
    gpus = nvml_gpus()
    return Inventory(host, gpus, "nvml" if gpus else "none")


def read_gpu_stats(nvml: Any = None) -> list[dict[str, Any]] | None:
    """Each GPU's memory (bytes), utilization (%), power draw (W) and compute process ids, as
    NVML reports them now; None when NVML is not there. `nvml`: the pynvml module (default)
    or a stand-in."""
    pynvml = nvml if nvml is not None else _pynvml()
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        log.debug("NVML unavailable (%s): no GPU stats", exc)
        return None
    try:
        stats = []
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            stat: dict[str, Any] = {"index": index}
            try:
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                stat.update(memory_used=int(memory.used), memory_total=int(memory.total))
            except Exception:  # not supported on this device
                pass
            try:
                stat["utilization"] = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception:
                pass
            try:  # milliwatts
                stat["power_w"] = float(pynvml.nvmlDeviceGetPowerUsage(handle)) / 1000
            except Exception:
                pass
            # A process NVML cannot list makes the GPU look free: list failures as unknown.
            try:
                processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                stat["pids"] = sorted(int(p.pid) for p in processes)
            except Exception:
                stat["pids"] = []
            stats.append(stat)
        return stats
    except Exception as exc:
        log.warning("reading GPU stats failed (%s)", exc)
        return None
    finally:
        pynvml.nvmlShutdown()


def device_minors(indices: tuple[int, ...], nvml: Any = None) -> tuple[int, ...] | None:
    """The /dev/nvidia<minor> numbers of these NVML indices (a sandboxed run gets only its
    leased cards' device nodes); None when NVML cannot say."""
    pynvml = nvml if nvml is not None else _pynvml()
    if pynvml is None or not indices:
        return () if pynvml is not None else None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return tuple(
            int(pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i)))
            for i in indices
        )
    except Exception as exc:
        log.warning("NVML gave no device minor numbers (%s): every card's node is bound", exc)
        return None
    finally:
        pynvml.nvmlShutdown()


def gpu_stats(inventory: Inventory, nvml: Any = None) -> list[dict[str, Any]] | None:
    """The stats of a NVML inventory; None for a fake or empty one (nothing to measure)."""
    return read_gpu_stats(nvml) if inventory.source == "nvml" else None
