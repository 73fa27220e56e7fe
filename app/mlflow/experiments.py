"""MLflow's experiment writes beyond create: tags, soft delete and restore, rename; and the
experiment as MLflow shows it (its tags and lifecycle stage read in bulk). The one writer of
mlflow_experiment_tags and mlflow_deleted_experiments (app/mlflow/models.py). Functions take
the caller's session and flush, never commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, delete, exists, select
from sqlalchemy.orm import Session

from app.experiments import service as experiments_service
from app.experiments.models import Experiment
from app.experiments.schemas import ExperimentPatch
from app.mlflow.errors import RESOURCE_ALREADY_EXISTS, MlflowError, invalid
from app.mlflow.models import MlflowDeletedExperiment, MlflowExperimentTag
from app.mlflow.reads import experiment_json

# MLflow's ViewType, as a name or its proto number
ACTIVE_ONLY, DELETED_ONLY, ALL = "ACTIVE_ONLY", "DELETED_ONLY", "ALL"
_VIEW_NUMBERS = {1: ACTIVE_ONLY, 2: DELETED_ONLY, 3: ALL}
DEFAULT_EXPERIMENT = "Default"
MAX_TAG_KEY = 250
MAX_TAG_VALUE = 5000


def view_type(value: str | int | None) -> str:
    if value is None or value == "":
        return ACTIVE_ONLY
    name = _VIEW_NUMBERS.get(value, "") if isinstance(value, int) else value.upper()
    if name not in (ACTIVE_ONLY, DELETED_ONLY, ALL):
        raise invalid(f"Invalid value {value!r} for parameter 'view_type' supplied")
    return name


def _is_deleted() -> ColumnElement[bool]:
    return exists().where(MlflowDeletedExperiment.experiment_id == Experiment.id)


def view_filter(view: str) -> ColumnElement[bool] | None:
    """The experiments a search of this view type finds (None: all of them)."""
    if view == ACTIVE_ONLY:
        return ~_is_deleted()
    if view == DELETED_ONLY:
        return _is_deleted()
    return None


def experiments_json(session: Session, experiments: Sequence[Experiment]) -> list[dict[str, Any]]:
    ids = [e.id for e in experiments]
    tags: dict[int, list[dict[str, str]]] = {i: [] for i in ids}
    deleted: set[int] = set()
    if ids:
        for row in session.execute(
            select(MlflowExperimentTag)
            .where(MlflowExperimentTag.experiment_id.in_(ids))
            .order_by(MlflowExperimentTag.key)
        ).scalars():
            tags[row.experiment_id].append({"key": row.key, "value": row.value})
        deleted = set(
            session.scalars(
                select(MlflowDeletedExperiment.experiment_id).where(
                    MlflowDeletedExperiment.experiment_id.in_(ids)
                )
            )
        )
    return [experiment_json(e, tags[e.id], deleted=e.id in deleted) for e in experiments]


def unmade_default() -> dict[str, Any]:
    """MLflow's Default experiment ("0") before anyone logged into it: what a fresh MLflow
    server shows, so ``get_experiment("0")`` and ``get_experiment_by_name("Default")`` find it
    (a read writes nothing; the first run logged into it makes it: app.mlflow.service)."""
    return {
        "experiment_id": "0",
        "name": DEFAULT_EXPERIMENT,
        "artifact_location": "mlflow-artifacts:/0",
        "lifecycle_stage": "active",
        "tags": [],
    }


def is_deleted(session: Session, experiment_id: int) -> bool:
    return session.get(MlflowDeletedExperiment, experiment_id) is not None


def set_tag(session: Session, experiment: Experiment, key: str, value: str) -> None:
    if not key or len(key) > MAX_TAG_KEY:
        raise invalid(f"Invalid value {key[:300]!r} for parameter 'key' supplied")
    if len(value) > MAX_TAG_VALUE:
        raise invalid(
            f"'value' exceeds the maximum length of {MAX_TAG_VALUE} characters "
            f"(tag {key!r} of experiment {experiment.id})"
        )
    row = session.get(MlflowExperimentTag, (experiment.id, key))
    if row is None:
        session.add(MlflowExperimentTag(experiment_id=experiment.id, key=key, value=value))
    else:
        row.value = value
    session.flush()


def delete_tag(session: Session, experiment: Experiment, key: str) -> bool:
    """False when the experiment has no such tag."""
    gone = session.execute(
        delete(MlflowExperimentTag).where(
            MlflowExperimentTag.experiment_id == experiment.id, MlflowExperimentTag.key == key
        )
    )
    return bool(getattr(gone, "rowcount", 0))


def mark_deleted(session: Session, experiment: Experiment) -> None:
    if not is_deleted(session, experiment.id):
        session.add(MlflowDeletedExperiment(experiment_id=experiment.id))
        session.flush()


def restore(session: Session, experiment: Experiment) -> None:
    session.execute(
        delete(MlflowDeletedExperiment).where(
            MlflowDeletedExperiment.experiment_id == experiment.id
        )
    )


def rename(session: Session, experiment: Experiment, new_name: str) -> None:
    name = new_name.strip()
    if not name or len(name) > 200:
        raise invalid("Invalid value for parameter 'new_name': 1-200 characters")
    taken = session.scalar(
        select(Experiment.id).where(Experiment.name == name, Experiment.id != experiment.id)
    )
    if taken is not None:
        raise MlflowError(RESOURCE_ALREADY_EXISTS, f"Experiment '{name}' already exists.")
    experiments_service.edit_experiment(
        session, experiment=experiment, patch=ExperimentPatch(name=name)
    )
