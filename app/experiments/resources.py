"""What a run asks of its host: GPUs and processes, and the limits its job is held to.

Part of the run config (app/experiments/config.py). The limits' defaults are the settings'
(``run_memory_gb``, ...): the stored config keeps the values a run got; worker/limits.py holds
the job to them (docs/security.md, "Limits per run").
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.settings import get_settings


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(0, ge=0, le=64, description="GPUs on one host")
    nproc: int = Field(1, ge=1, le=64, description="processes (DDP ranks) on that host")
    launcher: Literal["torchrun", "none"] = Field(
        "torchrun",
        description="torchrun: one process per rank (nproc of them); none: one plain process "
        "for code that starts its own ranks (Lightning's DDP spawn, accelerate, mp.spawn), "
        "with every leased GPU visible",
    )

    memory_gb: float = Field(
        default_factory=lambda: get_settings().run_memory_gb,
        gt=0,
        le=65536,
        description="memory of the whole job (every rank and process) in GiB; past it the "
        "run ends 'out of memory'",
    )
    cpus: float = Field(
        default_factory=lambda: get_settings().run_cpus,
        gt=0,
        le=4096,
        description="CPU time of the whole job, in CPUs (a quota: 0.5 is half of one)",
    )
    disk_gb: float = Field(
        default_factory=lambda: get_settings().run_disk_gb,
        gt=0,
        le=1_000_000,
        description="what the run's folder and its /tmp may hold, in GB; past it the run ends "
        "'disk full'",
    )
    max_processes: int = Field(
        default_factory=lambda: get_settings().run_max_processes,
        ge=16,
        le=4_194_304,
        description="processes and threads of the job at once; past it the run ends "
        "'too many processes'",
    )

    @model_validator(mode="after")
    def _one_process_without_a_launcher(self) -> Resources:
        if self.launcher == "none" and self.nproc != 1:
            raise ValueError(
                'launcher "none" starts one process, which starts its own ranks: '
                f"nproc must be 1 (got {self.nproc})"
            )
        return self
