from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.runs.notices import notice_lines
from app.timeutil import UtcDateTime


class RunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Deep-merged onto the experiment's config, then validated as a whole.
    overrides: dict[str, Any] = Field(default_factory=dict)
    # Higher starts first; within a priority, runs start in submit order.
    priority: int = Field(0, ge=-1000, le=1000)


class RunResume(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checkpoint: str = Field(min_length=1, max_length=255, examples=["epoch-0003.pt"])


class RunOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    experiment_id: int
    owner_id: int
    status: str
    config: dict[str, Any]
    seed: int
    created_at: UtcDateTime
    started_at: UtcDateTime | None
    finished_at: UtcDateTime | None
    exit_code: int | None
    error: str | None
    worker_host: str | None
    cancel_requested: bool
    resume_from: str | None
    priority: int
    gpu_indices: str | None
    # 1 for the first try; counts up each time a lost or shut-down worker's run is requeued.
    attempt: int
    heartbeat_at: UtcDateTime | None
    # The config flattened to dotted keys (`params.lr`, `seed`, `resources.nproc`) and the
    # hparams the job reported through TensorBoard (`hparams.<name>`): app/runs/params.py.
    params: dict[str, Any] = Field(default_factory=dict)
    # What ingestion kept out of the run, as sentences: "3 lines skipped: <reason>", a limit
    # reached (metric keys, log bytes), an error that stopped ingestion (app/runs/notices.py).
    notices: list[str] = Field(default_factory=list)
    # Why a queued run waits, in the scheduler's words (the GPU page's "why it waits"); set by
    # GET /api/runs/{id} only, and only while the run is queued.
    queue_reason: str | None = None

    @field_validator("notices", mode="before")
    @classmethod
    def _notice_lines(cls, value: Any) -> Any:
        return notice_lines(value) if value is None or isinstance(value, dict) else value


class CheckpointOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    epoch: int
    step: int
    size_bytes: int
    created_at: UtcDateTime


class RunFileOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    path: str
    size_bytes: int
    modified_at: UtcDateTime
    # *.pt, *.pth, *.ckpt, or inside a checkpoint-*/ folder
    checkpoint: bool


class SeriesOut(BaseModel):
    step: list[int]
    value: list[float | None]
    # Wall time (Unix seconds) of each point, only when asked for with `with_time=true`.
    time: list[float] | None = None


class MetricsOut(BaseModel):
    series: dict[str, SeriesOut]


class RunImageOut(BaseModel):
    id: int
    step: int
    wall_time: float
    width: int
    height: int
    size_bytes: int


class RunImagesOut(BaseModel):
    # tag -> its images kept, steps ascending (the last is the newest)
    tags: dict[str, list[RunImageOut]]
