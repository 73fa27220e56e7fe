"""The sweep contract (design.md, "Sweeps"): what POST /api/sweeps takes and GET answers.

Pydantic checks each field's shape; app.sweeps.spec checks what needs the experiment (config
paths, the metric) and the relations between fields (min < max), each error under its field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.db import MAX_ID
from app.experiments.config.model import MAX_SEED
from app.runs.schemas import RunOut
from app.timeutil import UtcDateTime

Scalar = bool | int | float | Annotated[str, Field(max_length=1000)]
ConfigPath = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.-]+$")]


class ParameterSpec(BaseModel):
    """Either `values` (a list: grid points, or the choices of a random/TPE draw) or a
    `distribution` over [min, max]."""

    model_config = ConfigDict(extra="forbid")

    values: list[Scalar] | None = Field(None, min_length=1, max_length=1000)
    distribution: Literal["uniform", "log_uniform", "int_uniform"] | None = None
    min: float | None = None
    max: float | None = None


class MetricSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255, pattern=r"^[^\x00]*$")
    goal: Literal["maximize", "minimize"]


class EarlyStopSpec(BaseModel):
    """median: a trial stops when its best value so far is worse than the median of the
    finished trials' values at the same step (Optuna's MedianPruner), once `min_trials`
    trials have finished and after `warmup_steps`. asha: asynchronous successive halving
    (Optuna's SuccessiveHalvingPruner): at rungs min_steps * reduction_factor^k, only the top
    1/reduction_factor of the trials that reached the rung go on."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["median", "asha"]
    min_trials: int = Field(3, ge=1, le=1000, description="median: finished trials first")
    warmup_steps: int = Field(0, ge=0, description="median: no stop before this step")
    min_steps: int = Field(1, ge=1, description="asha: the first rung's step")
    reduction_factor: int = Field(3, ge=2, le=100, description="asha: keep the top 1/this")


class SweepCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experiment_id: int = Field(ge=1, le=MAX_ID)
    method: Literal["grid", "random", "tpe"]
    metric: MetricSpec
    parameters: dict[ConfigPath, ParameterSpec] = Field(min_length=1, max_length=64)
    max_runs: int = Field(ge=1, description="at most this many trials (a grid: its points)")
    max_concurrent: int = Field(1, ge=1, le=1000, description="trials queued or running at once")
    early_stop: EarlyStopSpec | None = None
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="the samplers' seed")


class SweepCreated(BaseModel):
    id: int
    status: str


class BestOut(BaseModel):
    run_id: int
    value: float
    params: dict[str, Any]


class TrialOut(BaseModel):
    number: int
    run_id: int | None  # None: its run was deleted
    status: str  # the run's status ("deleted" when it is gone)
    params: dict[str, Any]
    value: float | None  # the metric's last value, once the run logged it
    steps: int | None  # the metric's highest step
    stopped_early: str | None  # why the sweep stopped it, if it did


class SweepBrief(BaseModel):
    id: int
    experiment_id: int
    owner_id: int
    status: str
    method: str
    metric: MetricSpec
    parameters: dict[str, Any]
    max_runs: int
    planned_runs: int  # max_runs, or a smaller grid's number of points
    max_concurrent: int
    early_stop: dict[str, Any] | None
    seed: int
    created_at: UtcDateTime
    finished_at: UtcDateTime | None
    counts: dict[str, int]  # trials by their run's status
    best: BestOut | None


class SweepOut(SweepBrief):
    trials: list[TrialOut]
    runs: list[RunOut]  # the trials' runs, as GET /api/runs shows them
