from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from app.runs.state.notices import notice_lines
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
    # Deep-merged onto the parent run's config (seed included), then validated as a whole:
    # more epochs, another lr. When the checkpoint already reached the config's epochs (a
    # final.pt), `params.epochs` must be raised here or the resume is refused (422).
    overrides: dict[str, Any] = Field(
        default_factory=dict, examples=[{"params": {"epochs": 20, "lr": 0.01}}]
    )


TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/=+-]*$"
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_NAME_CHARS = 200
MAX_NOTES_CHARS = 20_000

Tag = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_TAG_CHARS, pattern=TAG_PATTERN),
]


class RunPatch(BaseModel):
    """What people may change on a run: absent fields stay; ``name``/``notes`` null or "" clear
    it; ``tags`` replaces the whole set (duplicates fold). Tags are short words of letters,
    digits and ``_ . : / = + -`` (no spaces: a tag filter and a URL stay unambiguous)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=MAX_NAME_CHARS, pattern=r"^[^\x00-\x1f\x7f]*$")
    tags: list[Tag] | None = Field(None, max_length=MAX_TAGS, examples=[["baseline", "lr=0.1"]])
    notes: str | None = Field(None, max_length=MAX_NOTES_CHARS, pattern=r"^[^\x00]*$")


class SummaryOut(BaseModel):
    # The value at the highest step (null when that point was NaN/inf), min and max of the
    # finite values (null when there were none), and that highest step.
    last: float | None
    min: float | None
    max: float | None
    step: int


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
    # "mlflow" for a run logged from outside through the MLflow API (no job); null for a job.
    origin: str | None = None
    # The config flattened to dotted keys (`params.lr`, `seed`, `resources.nproc`) and the
    # hparams the job reported through TensorBoard (`hparams.<name>`): app/runs/query/params.py.
    params: dict[str, Any] = Field(default_factory=dict)
    name: str | None = None
    tags: list[str] = Field(default_factory=list)
    notes: str | None = None
    # The sweep that launched the run; null for a run launched by hand.
    sweep_id: int | None = None
    # Every metric key the run logged (TensorBoard tags too): app/metrics/summary.py.
    summary: dict[str, SummaryOut] = Field(default_factory=dict)
    # In a list of runs (GET /api/runs): true when the run has more summaries than the list
    # carries (50, plus those `summary_keys=` names); GET /api/runs/{id} has them all.
    summary_cut: bool = False
    # What ingestion kept out of the run, as sentences: "3 lines skipped: <reason>", a limit
    # reached (metric keys, log bytes), an error that stopped ingestion (app/runs/state/notices.py).
    notices: list[str] = Field(default_factory=list)
    # Why the run's sweep stopped it early (also one of the notices); null when it did not.
    # The runs table marks these runs (app/static/experiment_runs.js).
    stopped_early: str | None = None
    # Bytes the run holds on disk: its folder as measured when it ended, until then its
    # checkpoints (app/runs/files/disk.py).
    disk_bytes: int = 0

    @field_validator("disk_bytes", mode="before")
    @classmethod
    def _not_measured_yet(cls, value: Any) -> Any:
        return 0 if value is None else value  # _outs fills in the checkpoints' sizes

    # What a running run does (app/runs/state/phase.py): "starting", "building environment" while
    # its packages are installed (pip's last line in env_build_line), "training"; null unless
    # running.
    phase: str | None = None
    env_build_started_at: UtcDateTime | None = None
    env_build_line: str | None = None
    # The build's time (reusing a built environment takes well under a second); null: none.
    env_build_seconds: float | None = None
    # When the job itself started: the duration counts from here, the build's time apart.
    training_started_at: UtcDateTime | None = None
    duration_seconds: float | None = None

    # Why a queued run waits, in the scheduler's words (the GPU page's "why it waits"), "no
    # worker is running: ..." when no worker host heartbeats; null unless the run is queued.
    queue_reason: str | None = None
    # When a queued run is expected to start (the scheduler replayed over the running runs'
    # expected ends: app/gpus/estimate.py), and what that rests on ("when run 4 ends (its
    # progress: step 40 of 100)", "no estimate: run 4 has no known length"); null unless the
    # run is queued; estimated_start null too when there is no estimate.
    estimated_start: UtcDateTime | None = None
    estimate_basis: str | None = None
    # The attempt's job in the outside scheduler that runs it (a Slurm job id: a worker with
    # TORCHYARD_WORKER_EXECUTOR=slurm); null for a job of torchyard's own workers.
    external_id: str | None = None

    @field_validator("notices", mode="before")
    @classmethod
    def _notice_lines(cls, value: Any) -> Any:
        return notice_lines(value) if value is None or isinstance(value, dict) else value


class RunListOut(BaseModel):
    runs: list[RunOut]
    # The cursor of the next page (pass it as `cursor`), null on the last page.
    next: str | None


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
