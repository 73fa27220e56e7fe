"""The one interface a worker runs its pool's runs through (issue 40).

A worker serves one pool and runs that pool's runs with one executor, chosen by
TORCHYARD_WORKER_EXECUTOR (worker.executors.current): `process` starts each run as processes
on this host (worker.executor_process: today's path, worker.runner), `slurm` hands each run
attempt to a Slurm cluster as one batch job and tracks it (worker.slurm.executor). A Ray or
Kubernetes executor is one more module that implements `Executor`, and one more name in the
settings; nothing else of the worker changes (docs/clusters.md).

What every executor keeps, whatever runs the job:

- every status change of a run goes through app.runs.state.lifecycle (the claim, the start,
  the end, a requeue);
- the job is the same job runtime (worker.launcher.build_launch: torchrun, torchyard.job), and
  its spool (metrics, logs, system series) is forwarded by this worker from the run's folder
  (worker.watch, worker.supervision_steps.Forward), so a restarted worker resumes at the
  spool's mark: nothing lost, nothing doubled;
- a cancel reaches the job through the run's check-in (worker.heartbeat), within the
  forwarder's interval;
- `adopt` at the worker's start takes back every run of this worker that still has a job.
"""

from __future__ import annotations

import enum
from typing import Protocol

from app.runs.state.status import RunStatus


class NotRun(enum.Enum):
    """An executor's answer when it did not run the run to its end in this call."""

    WAITING = "waiting"  # the scheduler says not yet: the task asks again shortly
    GONE = "gone"  # not queued any more (another worker took it, cancelled, deleted)


class Executor(Protocol):
    """How a worker runs its pool's runs."""

    name: str

    def execute(self, run_id: int) -> RunStatus | NotRun:
        """Run (or hand over) the queued run the broker gave this worker: its final status
        when it ran to its end here, else why not (WAITING: the task asks again)."""

    def adopt(self) -> None:
        """At the worker's start, before any task: take back the jobs a previous worker of
        this pool left (they train on), so their runs heartbeat again before a reaper
        counts them lost."""
