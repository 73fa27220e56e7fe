"""The sessions API's bodies."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.experiments.config.model import DIGEST_PATTERN, MAX_SESSION_HOURS
from app.runs.schemas import RunOut


class SessionCreate(BaseModel):
    """A new session: what the scheduler leases for it and for how long."""

    model_config = ConfigDict(extra="forbid", strict=True)

    gpus: int = Field(1, ge=0, le=64, description="GPUs the session holds")
    hours: float = Field(4, gt=0, le=MAX_SESSION_HOURS, description="its time limit in hours")
    requirements: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list,
        max_length=200,
        description="packages for its environment, as a run's environment.requirements",
    )
    code: str | None = Field(
        None,
        pattern=DIGEST_PATTERN,
        description="a code snapshot (POST /api/code): its files are the session's work folder",
    )
    priority: int = Field(0, ge=-1000, le=1000, description="its place in the queue, as a run's")
    experiment_id: int | None = Field(
        None, ge=1, description="the experiment it belongs to (omit: your own 'sessions' one)"
    )


class SessionExtend(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    hours: float = Field(gt=0, le=MAX_SESSION_HOURS, description="hours added to its limit")


class SessionOut(BaseModel):
    """The session's run and where its JupyterLab is (once it runs)."""

    run: RunOut
    url: str
    ends_at: str | None = None
