"""This worker host's GPU inventory: declared (TORCHYARD_FAKE_GPUS) or found with NVML.

No NVML (nvidia-ml-py not installed, no driver) or no GPUs means an empty inventory: a CPU-only
host, which runs only gpus: 0 runs.
"""

from __future__ import annotations

import importlib
import logging
import socket
from dataclasses import dataclass

from app.settings import Settings

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


def nvml_gpus() -> tuple[int, ...]:
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError:
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
