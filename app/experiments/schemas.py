from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.timeutil import UtcDateTime


class ExperimentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    description: str = Field("", max_length=10_000)
    # Validated against the recipe catalog by experiments.config (errors under body.config.*).
    config: dict[str, Any]


class ExperimentOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    description: str
    config: dict[str, Any]
    owner_id: int
    owner: str
    created_at: UtcDateTime
    run_count: int = 0
    # Bytes its runs hold on disk (app/runs/disk.py).
    disk_bytes: int = 0
