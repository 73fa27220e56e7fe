"""The GPUs this worker's jobs run on, from the moment a job is watched until it is confirmed
gone (its process tree waited for), whatever the database says meanwhile.

The database's leases say which run a GPU is the scheduler's to give; they can free a GPU
while a job still runs on it: a worker stalled past ``run_lost_seconds`` has its run requeued
(the leases go with it) while its job trains on. Only this host's worker can end that job, so
it is also the one that must not start another job on those GPUs first: its start shows them
to the scheduler as busy (a compute process torchyard holds no lease for, the same rule as a
job started by hand: app.gpus.fleet_view.external_gpus) until the old job is gone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_held: dict[tuple[int, int], tuple[tuple[int, ...], int]] = {}  # (run, attempt) -> GPUs, pid


@contextmanager
def holding(run_id: int, attempt: int, gpus: tuple[int, ...], pid: int) -> Iterator[None]:
    """`gpus` count as busy on this host while the block runs (the life of the job whose
    keeper is `pid`)."""
    with _lock:
        _held[(run_id, attempt)] = (gpus, pid)
    try:
        yield
    finally:
        with _lock:
            _held.pop((run_id, attempt), None)


def held() -> dict[int, int]:
    """GPU index -> the keeper pid of the job of this worker that runs on it."""
    with _lock:
        return {gpu: pid for gpus, pid in _held.values() for gpu in gpus}


def mark_busy(
    stats: list[dict[str, Any]] | None, inventory: tuple[int, ...]
) -> list[dict[str, Any]] | None:
    """NVML's stats of this host (None for a fake inventory) with every GPU a job of this
    worker still runs on shown running a process: busy for the scheduler unless that job's
    run holds its lease."""
    busy = {gpu: pid for gpu, pid in held().items() if gpu in inventory}
    if not busy:
        return stats
    by_index = {int(gpu["index"]): dict(gpu) for gpu in stats or ()}
    for gpu, pid in busy.items():
        entry = by_index.setdefault(gpu, {"index": gpu})
        entry["pids"] = sorted({*entry.get("pids", ()), pid})
    return [by_index[i] for i in sorted(by_index)]
