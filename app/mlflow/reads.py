"""Runs and experiments as MLflow shows them, read in bulk: a page of 1,000 runs costs one
query each for params and tags, metrics (their last points) and experiments, never one per run.

Where MLflow's pieces live in torchyard: params and tags are the run's ``run_params`` rows
(``params.<name>`` and ``tags.<name>``, app/runs/query/params.py; a job's config params appear too,
``params.`` taken off); ``mlflow.runName`` is the run's name and ``mlflow.note.content`` its
notes; metrics are the run's series, the last point of each (app/metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

import orjson
from sqlalchemy import Text, and_, cast, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.experiments.models import Experiment
from app.metrics.models import Metric, MetricKey
from app.mlflow.schemas import TO_MLFLOW, artifact_uri, millis, number_json
from app.runs.models import RunParam

PARAM_PREFIX = "params."
TAG_PREFIX = "tags."
RUN_NAME_TAG = "mlflow.runName"
NOTE_TAG = "mlflow.note.content"
USER_TAG = "mlflow.user"


def experiment_json(
    experiment: Experiment, tags: list[dict[str, str]] | None = None, *, deleted: bool = False
) -> dict[str, Any]:
    """An experiment as MLflow shows it; its MLflow tags and lifecycle stage are kept by
    app.mlflow.experiments (experiments_json reads them in bulk)."""
    created = millis(experiment.created_at)
    shown = list(tags or [])
    if experiment.description and not any(t["key"] == NOTE_TAG for t in shown):
        shown.append({"key": NOTE_TAG, "value": experiment.description})
    return {
        "experiment_id": str(experiment.id),
        "name": experiment.name,
        "artifact_location": f"mlflow-artifacts:/{experiment.id}",
        "lifecycle_stage": "deleted" if deleted else "active",
        "creation_time": created,
        "last_update_time": created,
        "tags": shown,
    }


class RunFields(Protocol):
    """What MLflow's view of a run reads: a Run, or a row of search.RUN_COLUMNS (a search
    reads those columns alone, not whole ORM rows)."""

    @property
    def id(self) -> int: ...
    @property
    def experiment_id(self) -> int: ...
    @property
    def owner_id(self) -> int: ...
    @property
    def status(self) -> Any: ...
    @property
    def name(self) -> str | None: ...
    @property
    def notes(self) -> str | None: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...


def run_info(run: RunFields, user_name: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "run_id": str(run.id),
        "run_uuid": str(run.id),
        "run_name": run.name or f"run-{run.id}",
        "experiment_id": str(run.experiment_id),
        "user_id": user_name,
        "status": TO_MLFLOW[run.status],
        "start_time": millis(run.started_at or run.created_at),
        "artifact_uri": artifact_uri(run.experiment_id, run.id),
        "lifecycle_stage": "active",
    }
    if run.finished_at is not None:
        info["end_time"] = millis(run.finished_at)
    return info


def _params_and_tags(
    session: Session, ids: list[int]
) -> tuple[dict[int, list[dict[str, str]]], dict[int, list[dict[str, str]]]]:
    params: dict[int, list[dict[str, str]]] = {i: [] for i in ids}
    tags: dict[int, list[dict[str, str]]] = {i: [] for i in ids}
    # The JSON value as its text, decoded here with orjson: SQLAlchemy's JSON type (json.loads
    # per row) was a fifth of a 1,000-run search page.
    stmt = (
        select(RunParam.run_id, RunParam.key, cast(RunParam.value, Text), RunParam.source)
        .where(RunParam.run_id.in_(ids))
        .order_by(RunParam.run_id, RunParam.key)
    )
    for run_id, key, raw, source in session.execute(stmt):
        value = None if raw is None else orjson.loads(raw)
        text = value if isinstance(value, str) else ("" if value is None else _text(value))
        if key.startswith(TAG_PREFIX) and source == "mlflow":
            tags[run_id].append({"key": key[len(TAG_PREFIX) :], "value": text})
        else:
            name = key[len(PARAM_PREFIX) :] if key.startswith(PARAM_PREFIX) else key
            params[run_id].append({"key": name, "value": text})
    return params, tags


def _text(value: Any) -> str:
    """A config value as MLflow's param string: what ``str()`` gives in Python, as MLflow's
    own loggers write it (``0.1``, ``True``, ``[1, 2]``)."""
    return str(value)


def _metrics(session: Session, ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    stmt = (
        select(MetricKey.run_id, MetricKey.key, MetricKey.last_value, MetricKey.last_step)
        .add_columns(Metric.wall_time)
        .join(Metric, and_(Metric.key_id == MetricKey.id, Metric.step == MetricKey.last_step))
        .where(MetricKey.run_id.in_(ids), MetricKey.last_step.is_not(None))
        .order_by(MetricKey.run_id, MetricKey.key)
    )
    for run_id, key, value, step, wall in session.execute(stmt):
        found[run_id].append(
            {
                "key": key,
                "value": number_json(value),
                "timestamp": round(wall * 1000),
                "step": step,
            }
        )
    return found


def runs_json(session: Session, runs: Sequence[RunFields]) -> list[dict[str, Any]]:
    ids = [r.id for r in runs]
    if not ids:
        return []
    params, tags = _params_and_tags(session, ids)
    metrics = _metrics(session, ids)
    owners = {r.owner_id for r in runs}
    names = dict(session.execute(select(User.id, User.username).where(User.id.in_(owners))).all())
    out = []
    for run in runs:
        run_tags = list(tags[run.id])
        run_tags.append({"key": RUN_NAME_TAG, "value": run.name or f"run-{run.id}"})
        # MLflow's user_id is the run's mlflow.user tag (the client sends the login name of
        # whoever ran the script); a run without one shows its torchyard owner's name
        user = next((t["value"] for t in run_tags if t["key"] == USER_TAG), None)
        if user is None:
            user = names.get(run.owner_id, "")
            run_tags.append({"key": USER_TAG, "value": user})
        if run.notes:
            run_tags.append({"key": NOTE_TAG, "value": run.notes})
        out.append(
            {
                "info": run_info(run, user),
                "data": {"metrics": metrics[run.id], "params": params[run.id], "tags": run_tags},
                "inputs": {},
            }
        )
    return out
