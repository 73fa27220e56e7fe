"""A stand-in for pynvml at the NVML edge (settings.nvml_module = "tests.nvml_standin"): the
calls worker.gpus makes, over NVML_STANDIN_GPUS GPUs (default 8), each with fixed stats that
tell the GPUs apart, so a worker with a fake inventory records GPU series on a CPU box.

GPU i: utilization 10 * (i + 1) %, (i + 1) GiB used of 16 GiB, 50 + i W, no processes.
NVML_STANDIN_UTIL="0=0,1=70" sets GPUs' utilization instead (an idle GPU, a busy one).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

MIB = 1024 * 1024


def utilization(index: int) -> float:
    chosen = dict(
        part.split("=", 1) for part in os.environ.get("NVML_STANDIN_UTIL", "").split(",") if part
    )
    return float(chosen[str(index)]) if str(index) in chosen else 10.0 * (index + 1)


def memory_used(index: int) -> int:
    return (index + 1) * 1024 * MIB


def power_mw(index: int) -> int:
    return (50 + index) * 1000


def nvmlInit() -> None:  # noqa: N802 (pynvml's names)
    pass


def nvmlShutdown() -> None:  # noqa: N802
    pass


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return int(os.environ.get("NVML_STANDIN_GPUS", "8"))


def nvmlDeviceGetHandleByIndex(index: int) -> int:  # noqa: N802
    if not 0 <= index < nvmlDeviceGetCount():
        raise ValueError(f"no GPU {index}")
    return index


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(used=memory_used(handle), total=16 * 1024 * MIB)


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:  # noqa: N802
    return SimpleNamespace(gpu=utilization(handle), memory=0)


def nvmlDeviceGetPowerUsage(handle: int) -> int:  # noqa: N802
    return power_mw(handle)


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:  # noqa: N802
    return []


def nvmlDeviceGetMinorNumber(handle: int) -> int:  # noqa: N802
    return handle
