"""Experiments: create, edit, list and delete; the one writer of the experiments table
(docs/architecture.md). Functions flush; the caller commits."""

from __future__ import annotations

from typing import Any

from sqlalchemy import CursorResult, delete, exists, func, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.experiments.config.validate import validate_config
from app.experiments.models import Experiment
from app.experiments.schemas import BestChoice, ExperimentCreate, ExperimentOut, ExperimentPatch
from app.runs.files.disk import disk_by_experiment
from app.runs.models import Run
from app.users import ceilings


def create_experiment(session: Session, *, owner: User, data: ExperimentCreate) -> Experiment:
    config = validate_config(data.config, loc_prefix=("body", "config"), session=session)
    # A limit asked above the creator's ceilings is refused now; the defaults stay as they
    # are in the experiment (each run's are held to its launcher's ceilings).
    asked = data.config.get("resources") if isinstance(data.config, dict) else None
    ceilings.hold(session, owner, config, ("body", "config"), asked)
    experiment = Experiment(
        name=data.name, description=data.description, config=config, owner_id=owner.id
    )
    session.add(experiment)
    session.flush()
    return experiment


def add_experiment(
    session: Session, *, owner_id: int, name: str, config: dict[str, Any]
) -> Experiment:
    """The bare insert: create_experiment checks the config first; MLflow's experiments have
    none (app/mlflow/service.py)."""
    experiment = Experiment(name=name, description="", config=config, owner_id=owner_id)
    session.add(experiment)
    session.flush()
    return experiment


def delete_if_empty(session: Session, *, experiment_id: int) -> bool:
    """Delete the experiment unless a run of it is left (one started while its others were
    being deleted: app/runs/deletion.py); False when a run is left."""
    gone: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        delete(Experiment).where(
            Experiment.id == experiment_id,
            ~exists().where(Run.experiment_id == experiment_id),
        )
    )
    return bool(gone.rowcount) or session.get(Experiment, experiment_id) is None


def edit_experiment(
    session: Session, *, experiment: Experiment, patch: ExperimentPatch
) -> Experiment:
    """Set what the patch names (app.experiments.schemas.ExperimentPatch); ``best: null``
    clears the experiment's own best metric."""
    given = patch.model_fields_set
    if patch.name is not None:
        experiment.name = patch.name
    if patch.description is not None:
        experiment.description = patch.description
    if "best" in given:
        experiment.best_metric = patch.best.metric if patch.best else None
        experiment.best_mode = patch.best.mode if patch.best else None
    session.flush()
    return experiment


def best_choice(experiment: Experiment) -> BestChoice | None:
    """The experiment's own best metric, if its owner chose one."""
    if not experiment.best_metric:
        return None
    mode = "min" if experiment.best_mode == "min" else "max"
    return BestChoice(metric=experiment.best_metric, mode=mode)


def visible_experiments(session: Session, *, owner_id: int | None = None) -> list[Experiment]:
    """Every experiment on the box (every signed-in user reads them all), or one owner's."""
    stmt = select(Experiment).order_by(Experiment.id.desc())
    if owner_id is not None:
        stmt = stmt.where(Experiment.owner_id == owner_id)
    return list(session.scalars(stmt))


def search_experiments(
    session: Session,
    *,
    owner_id: int | None = None,
    query: str = "",
    offset: int = 0,
    limit: int = 20,
) -> tuple[list[Experiment], bool]:
    """One page of the experiments (of `owner_id`, or everyone's), newest first, whose name
    contains `query` (case-insensitive); and whether there are more after it."""
    stmt = select(Experiment).order_by(Experiment.id.desc())
    if owner_id is not None:
        stmt = stmt.where(Experiment.owner_id == owner_id)
    if query:
        escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        stmt = stmt.where(Experiment.name.ilike(f"%{escaped}%", escape="\\"))
    found = list(session.scalars(stmt.offset(offset).limit(limit + 1)))
    return found[:limit], len(found) > limit


def run_ids_by_experiment(
    session: Session, *, experiment_ids: list[int]
) -> dict[int, list[tuple[int, str]]]:
    """(run id, status) of each experiment's runs, newest first; one query, no configs loaded."""
    if not experiment_ids:
        return {}
    stmt = (
        select(Run.experiment_id, Run.id, Run.status)
        .where(Run.experiment_id.in_(experiment_ids))
        .order_by(Run.id.desc())
    )
    grouped: dict[int, list[tuple[int, str]]] = {}
    for experiment_id, run_id, status in session.execute(stmt):
        grouped.setdefault(experiment_id, []).append((run_id, status))
    return grouped


def to_out(session: Session, experiments: list[Experiment]) -> list[ExperimentOut]:
    """Decorate with owner names and run counts in two queries, not two per experiment."""
    ids = [e.id for e in experiments]
    counts = (
        dict(
            session.execute(
                select(Run.experiment_id, func.count())
                .where(Run.experiment_id.in_(ids))
                .group_by(Run.experiment_id)
            ).all()
        )
        if ids
        else {}
    )
    disks = disk_by_experiment(session, ids)
    owner_ids = {e.owner_id for e in experiments}
    names = (
        dict(session.execute(select(User.id, User.username).where(User.id.in_(owner_ids))).all())
        if owner_ids
        else {}
    )
    return [
        ExperimentOut(
            id=e.id,
            name=e.name,
            description=e.description,
            config=e.config,
            owner_id=e.owner_id,
            owner=names.get(e.owner_id, "?"),
            created_at=e.created_at,
            run_count=counts.get(e.id, 0),
            disk_bytes=disks.get(e.id, 0),
            best=best_choice(e),
        )
        for e in experiments
    ]
