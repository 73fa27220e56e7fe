from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.runs.schemas import RunCreate, RunOut
from app.timeutil import UtcDateTime


class ExperimentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    description: str = Field("", max_length=10_000)
    # Validated against the recipe catalog by experiments.config (errors under body.config.*).
    config: dict[str, Any]
    # The experiment's first run, queued in the same transaction: a submission (`torchyard
    # submit`) either commits with its run or not at all. Two requests (the experiment, then
    # its run) left an experiment without a run when the second was cut or refused (issue 39).
    run: RunCreate | None = None


class BestChoice(BaseModel):
    """The experiment's own "best" metric: a metric key its runs log, and whether larger
    (``max``) or smaller (``min``) is better. Shown in the experiments list's best column
    before the newest sweep's metric and the config's checkpoints.metric."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(
        min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]*$", examples=["val/loss"]
    )
    mode: Literal["max", "min"] = "max"


class ExperimentPatch(BaseModel):
    """What the owner (or an admin) may change on an experiment: absent (or null) name and
    description stay; ``best`` sets the experiment's own best metric, ``best: null`` clears it.
    The config is not editable: its runs were launched from it (clone the experiment instead)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200)
    description: str | None = Field(None, max_length=10_000)
    best: BestChoice | None = Field(None, examples=[{"metric": "val/loss", "mode": "min"}])


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
    # Bytes its runs hold on disk (app/runs/files/disk.py).
    disk_bytes: int = 0
    # The experiment's own best metric (null: none chosen; see ExperimentPatch).
    best: BestChoice | None = None


class ExperimentCreated(ExperimentOut):
    """POST /api/experiments' answer: the experiment, and its first run when the body asked
    for one (null otherwise)."""

    run: RunOut | None = None


class MetricKeysOut(BaseModel):
    """GET /api/experiments/{id}/keys: the keys found (by name) and whether more match."""

    keys: list[str]
    more: bool
