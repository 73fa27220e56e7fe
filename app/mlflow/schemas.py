"""MLflow's request messages (service.proto) as pydantic models, and torchyard's rows as
MLflow's JSON.

The client sends proto3 JSON: int64 fields may arrive as strings, doubles as "NaN" or
"Infinity", unknown fields are ignored (a newer client sends more than we read). MLflow ids are
strings; ours are the integers, written in decimal (``"12"``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import field_error
from app.metrics.ingest import Point
from app.mlflow.errors import invalid, parameter_message
from app.runs.models import RunStatus
from app.timeutil import as_utc


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")


_M = TypeVar("_M", bound=Message)


class KeyValue(Message):
    key: str
    value: str = ""


class MetricIn(Message):
    key: str
    value: float
    timestamp: int = 0
    step: int = 0

    def point(self) -> Point:
        """As ingest takes it: (key, step, value, wall time in seconds)."""
        return _in_range(self.key, self.step, self.value, self.timestamp)


_INT64 = 2**63


def _in_range(key: str, step: int, value: float, timestamp: int) -> Point:
    if not (-_INT64 <= step < _INT64 and -_INT64 <= timestamp < _INT64):
        raise invalid(f"metric {key[:250]!r}: step and timestamp must be 64-bit integers")
    return key, step, value, timestamp / 1000


def metric_points(items: list[Any]) -> list[Point]:
    """A log-batch's metrics as ingest points, checked as MetricIn checks them, in one pass.

    Why not MetricIn per metric: a model per metric was most of a batch's validation time
    (issue 29). The shape every client sends (a string key, a number, integer step and
    timestamp) is taken as it is; anything else (a string "NaN", a step as a string, a missing
    field) goes through MetricIn, which converts or refuses it with pydantic's words."""
    points: list[Point] = []
    append = points.append
    for i, item in enumerate(items):
        if type(item) is dict:
            key, value = item.get("key"), item.get("value")
            step, timestamp = item.get("step", 0), item.get("timestamp", 0)
            if (
                type(key) is str
                and (type(value) is float or type(value) is int)
                and type(step) is int
                and type(timestamp) is int
            ):
                append(_in_range(key, step, value, timestamp))
                continue
        try:
            append(MetricIn.model_validate(item).point())
        except ValidationError as exc:
            error = exc.errors()[0]
            raise invalid(
                parameter_message({**error, "loc": ("metrics", i, *error["loc"])})
            ) from None
    return points


def validated(model: type[_M], body: Any) -> _M:
    """A request body checked as FastAPI checks a body parameter of type `model`, for a route
    that validates after its own checks (log-batch: who asks first), with FastAPI's error."""
    if body is None:
        raise RequestValidationError([field_error(["body"], "Field required", kind="missing")])
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None


class CreateExperiment(Message):
    name: str = ""
    artifact_location: str | None = None
    tags: list[KeyValue] = Field(default_factory=list)


class ExperimentRef(Message):
    experiment_id: str


class UpdateExperiment(ExperimentRef):
    new_name: str


class SetExperimentTag(ExperimentRef):
    key: str
    value: str = ""


class DeleteExperimentTag(ExperimentRef):
    key: str


class SearchExperiments(Message):
    max_results: int = 1000
    page_token: str | None = None
    filter: str | None = None
    order_by: list[str] = Field(default_factory=list)
    view_type: str | int | None = None


class RunRef(Message):
    run_id: str = ""
    run_uuid: str = ""

    @property
    def ref(self) -> str:
        return self.run_id or self.run_uuid


class CreateRun(Message):
    experiment_id: str = "0"
    user_id: str | None = None
    run_name: str | None = None
    start_time: int | None = None
    tags: list[KeyValue] = Field(default_factory=list)


class UpdateRun(RunRef):
    status: str | int | None = None
    end_time: int | None = None
    run_name: str | None = None


class LogBatch(RunRef):
    # checked by metric_points, after the batch's size (MetricIn per metric was the cost)
    metrics: list[Any] = Field(default_factory=list)
    params: list[KeyValue] = Field(default_factory=list)
    tags: list[KeyValue] = Field(default_factory=list)


class LogMetric(RunRef, MetricIn):
    pass


class LogParam(RunRef, KeyValue):
    pass


class SetTag(RunRef, KeyValue):
    pass


class DeleteTag(RunRef):
    key: str


class LogInputs(RunRef):
    datasets: list[dict[str, Any]] = Field(default_factory=list)


class SearchRuns(Message):
    experiment_ids: list[str] = Field(default_factory=list)
    filter: str | None = None
    run_view_type: str | int | None = None
    max_results: int = 1000
    order_by: list[str] = Field(default_factory=list)
    page_token: str | None = None


# --- torchyard -> MLflow ------------------------------------------------------------------

TO_MLFLOW = {
    RunStatus.queued: "SCHEDULED",
    RunStatus.running: "RUNNING",
    RunStatus.succeeded: "FINISHED",
    RunStatus.failed: "FAILED",
    RunStatus.cancelled: "KILLED",
}
FROM_MLFLOW = {v: k for k, v in TO_MLFLOW.items()}
# proto enum numbers, for a client that sends the number
_STATUS_NUMBERS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}


def status_of(value: str | int) -> RunStatus:
    name = _STATUS_NUMBERS.get(value, "") if isinstance(value, int) else value.upper()
    if name not in FROM_MLFLOW:
        raise invalid(f"unknown run status {value!r}: one of {', '.join(FROM_MLFLOW)}")
    return FROM_MLFLOW[name]


def millis(moment: datetime | None) -> int | None:
    return None if moment is None else int(as_utc(moment).timestamp() * 1000)


def from_millis(ms: int | None) -> datetime | None:
    return None if not ms else datetime.fromtimestamp(ms / 1000, UTC)


def number_json(value: float | None) -> float | str:
    """A stored value as proto3 JSON: NULL (a NaN or infinity logged) comes back as NaN."""
    if value is None or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def parse_id(value: str, what: str) -> int:
    if not value.isdigit() or len(value) > 10 or int(value) > 2**31 - 1:
        raise invalid(f"{what} must be a torchyard {what.split()[0]} id (digits), not {value!r}")
    return int(value)


def artifact_uri(experiment_id: int, run_id: int) -> str:
    """Where the client puts the run's artifacts: our artifact routes (app/mlflow/artifacts.py),
    which keep them as the run's files."""
    return f"mlflow-artifacts:/{experiment_id}/{run_id}/artifacts"
