"""The executor of this worker (worker.executor), by TORCHYARD_WORKER_EXECUTOR."""

from __future__ import annotations

from functools import lru_cache

from app.settings import get_settings
from worker.executor import Executor
from worker.executor_process import ProcessExecutor
from worker.slurm.executor import SlurmExecutor


@lru_cache
def current() -> Executor:
    if get_settings().worker_executor == "slurm":
        return SlurmExecutor()
    return ProcessExecutor()
