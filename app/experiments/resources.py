"""What a run asks of its hosts: how many, GPUs and processes on each, and the limits its job
is held to.

Part of the run config (app/experiments/config/model.py). The limits' defaults are the settings'
(``run_memory_gb``, ...): the stored config keeps the values a run got; worker/limits.py holds
the job to them (docs/security.md, "Limits per run").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.settings import get_settings
from app.settings_pools import LOCAL_POOL, POOL_NAME_PATTERN


def _setting(name: str) -> Callable[[], Any]:
    """The default of a limit: the worker's setting of that name, read when a config is
    validated (so the stored config keeps the value the run got)."""
    return lambda: getattr(get_settings(), name)


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nodes: int = Field(
        1,
        ge=1,
        le=64,
        description="hosts the run spans (multi-node DDP: nproc processes and gpus GPUs on "
        "each, all leased together; docs/multi-node.md)",
    )
    gpus: int = Field(0, ge=0, le=64, description="GPUs on each host")
    nproc: int = Field(1, ge=1, le=64, description="processes (DDP ranks) on each host")
    launcher: Literal["torchrun", "none"] = Field(
        "torchrun",
        description="torchrun: one process per rank (nproc of them); none: one plain process "
        "for code that starts its own ranks (Lightning's DDP spawn, accelerate, mp.spawn), "
        "with every leased GPU visible",
    )

    pool: str = Field(
        LOCAL_POOL,
        description="the pool whose workers run it (TORCHYARD_WORKER_POOL of a worker): "
        "'local' is the team's own process workers; a Slurm pool hands it to its cluster",
    )

    memory_gb: float = Field(
        default_factory=_setting("run_memory_gb"),
        gt=0,
        le=65536,
        description="memory of the whole job on each host (every rank and process) in GiB; "
        "past it the run ends 'out of memory'",
    )
    cpus: float = Field(
        default_factory=_setting("run_cpus"),
        gt=0,
        le=4096,
        description="CPU time of the whole job on each host, in CPUs (a quota: 0.5 is half of one)",
    )
    disk_gb: float = Field(
        default_factory=_setting("run_disk_gb"),
        gt=0,
        le=1_000_000,
        description="what the run's folder and its /tmp may hold, in GB; past it the run ends "
        "'disk full'",
    )
    max_processes: int = Field(
        default_factory=_setting("run_max_processes"),
        ge=16,
        le=4_194_304,
        description="processes and threads of the job at once; past it the run ends "
        "'too many processes'",
    )

    time_limit_minutes: int | None = Field(
        None,
        ge=1,
        le=525_600,
        description="the run's wall-clock limit in minutes (omit: none of its own); on a Slurm "
        "pool its job's sbatch --time, past which Slurm ends it and the run fails saying "
        "'Slurm time limit'; the local pool does not apply it yet",
    )

    @field_validator("pool")
    @classmethod
    def _pool_name(cls, pool: str) -> str:
        if not re.fullmatch(POOL_NAME_PATTERN, pool):
            raise ValueError(
                f"{pool!r} is no pool name: lowercase letters, digits, '-' and '_', up to 32, "
                "starting with a letter or a digit (a worker's TORCHYARD_WORKER_POOL)"
            )
        return pool

    @model_validator(mode="after")
    def _launcher_fits(self) -> Resources:
        """launcher "none" is one process on one host: it starts its own ranks, so it can
        neither have several per host nor span hosts (the other hosts would start none)."""
        if self.launcher != "none":
            return self
        wrong = [
            f"{name} must be 1 (got {value})"
            for name, value in (("nproc", self.nproc), ("nodes", self.nodes))
            if value != 1
        ]
        if wrong:
            raise ValueError(
                'launcher "none" starts one process, which starts its own ranks: '
                + "; ".join(wrong)
            )
        return self
