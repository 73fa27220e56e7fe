"""The `process` executor (worker.executor): each run as processes on this host, its GPUs
leased by torchyard's scheduler (worker.runner), a previous worker's jobs re-adopted from
their records (worker.adoption)."""

from __future__ import annotations

from app.runs.state.status import RunStatus
from worker.adoption import adopt_jobs
from worker.executor import NotRun
from worker.runner import execute_run, inventory


class ProcessExecutor:
    name = "process"

    def execute(self, run_id: int) -> RunStatus | NotRun:
        return execute_run(run_id)

    def adopt(self) -> None:
        adopt_jobs(inventory().host)
