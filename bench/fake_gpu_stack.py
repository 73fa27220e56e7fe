"""A bench's stack with fake GPUs: a real server and one real worker on the Redis broker, a
SQLite database of its own in a temporary data dir, the worker's inventory `gpus` fake
indices (TORCHYARD_FAKE_GPUS). The scheduling benches (scheduling_latency, start_estimate)
measure the scheduler and the worker, so they build the same stack here, once."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from app.timeutil import as_utc

PASSWORD = "bench-password"


@dataclass(frozen=True)
class GpuStack:
    api: httpx.Client  # the admin's
    data_dir: Path


@contextmanager
def fake_gpu_stack(name: str, *, gpus: str, redis: str, concurrency: int = 2) -> Iterator[GpuStack]:
    """The stack for bench `name` (its data dir's prefix and worker host); the Redis broker's
    queue purged first (running_stack does)."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"torchyard-bench-{name}-"))
    os.environ.update(
        TORCHYARD_DATA_DIR=str(data_dir),
        TORCHYARD_ADMIN_PASSWORD=PASSWORD,
        TORCHYARD_DATABASE_URL=f"sqlite:///{data_dir / 'torchyard.db'}",
        TORCHYARD_BROKER_URL=redis,
    )
    from app.prestart import prestart
    from tests.stack import running_stack

    prestart()
    env = dict(
        os.environ,
        TORCHYARD_FAKE_GPUS=gpus,
        TORCHYARD_WORKER_HOST=f"bench-{name}-host",
        PYTHONUNBUFFERED="1",
    )
    with running_stack(
        env, data_dir / "logs", admin_password=PASSWORD, concurrency=concurrency
    ) as stack:
        yield GpuStack(stack.admin_client(), data_dir)


def tiny_mlp_experiment(api: httpx.Client, name: str, *, steps: int, sleep: float) -> int:
    """An experiment of one-GPU tiny_mlp runs of a known length: 1 epoch of `steps` steps,
    `sleep` s each (the steps give its total, and its progress as it logs them)."""
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": steps, "step_sleep": sleep},
        "resources": {"gpus": 1, "nproc": 1},
    }
    r = api.post("/api/experiments", json={"name": name, "config": config})
    r.raise_for_status()
    return int(r.json()["id"])


def unix(iso: str) -> float:
    """An API time as seconds since the epoch."""
    return as_utc(datetime.fromisoformat(iso)).timestamp()
