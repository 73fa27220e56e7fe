"""The settings of a worker's pool and of how it runs its pool's runs (issue 40): a part of the
one settings class (app/settings.py inherits it), kept here so that each module stays small.

Every worker serves one pool. `process` workers (the default) start each run as processes on
their own host; a `slurm` worker runs on a Slurm submit host and hands its pool's runs to
Slurm, which schedules them on its cluster (worker/slurm/, docs/clusters.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings

# A pool's name: what `resources.pool` of a run names and what its queue is called after.
POOL_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
LOCAL_POOL = "local"
# The executor of a worker that starts its runs as processes on its own host (the default).
PROCESS_EXECUTOR = "process"


class PoolSettings(BaseSettings):
    # The pool this worker serves: it takes only the runs whose `resources.pool` names it.
    worker_pool: str = Field(default=LOCAL_POOL, pattern=POOL_NAME_PATTERN)
    # How this worker runs its pool's runs: "process" (jobs on this host), "slurm" (each run
    # attempt one Slurm job, submitted with sbatch from this host).
    worker_executor: Literal["process", "slurm"] = "process"
    # The Slurm partition every job of the pool goes to (required with the slurm executor).
    slurm_partition: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]{0,64}$")
    # Optional: the account and QOS the jobs are charged to (sbatch --account, --qos).
    slurm_account: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]{0,64}$")
    slurm_qos: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]{0,64}$")
    # The GRES name of the cluster's GPUs (a run of 2 GPUs asks --gres <name>:2).
    slurm_gres: str = Field(default="gpu", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    # sbatch options the operator adds to every job (shell words, e.g. "--exclusive"); a
    # member's run config can add none.
    slurm_extra_args: str = ""
    # A folder that this submit host and every compute node see at the same path: run folders,
    # code snapshots and environments of the pool's runs live there.
    slurm_shared_dir: Path | None = None
    # A Slurm worker that runs as root submits jobs that start as root on the cluster; in
    # the sandbox they drop to the run's uid (worker.slurm.boundary). A root worker that
    # cannot sandbox would run a member's code as root on every node: its runs are refused
    # (failed, saying why) unless this is set, for a private test cluster only
    # (docs/clusters.md).
    slurm_jobs_as_root: bool = False

    @model_validator(mode="after")
    def _slurm_needs_its_cluster(self) -> Self:
        if self.worker_executor != "slurm":
            return self
        missing = [
            name
            for name, value in (
                ("TORCHYARD_SLURM_PARTITION", self.slurm_partition),
                ("TORCHYARD_SLURM_SHARED_DIR", self.slurm_shared_dir),
            )
            if not value
        ]
        if missing:
            raise ValueError(f"TORCHYARD_WORKER_EXECUTOR=slurm needs {' and '.join(missing)}")
        if self.worker_pool == LOCAL_POOL:
            raise ValueError(
                "TORCHYARD_WORKER_EXECUTOR=slurm needs a pool of its own: set "
                "TORCHYARD_WORKER_POOL (the 'local' pool is the process workers')"
            )
        return self
