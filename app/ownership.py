"""The one place that decides who may see and act on an experiment or a run.

Every route that takes an id depends on `get_owned_experiment` / `get_owned_run`, so the
404/403 rules are not pasted into handlers.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from app.auth.deps import CurrentUser
from app.auth.models import User
from app.db import MAX_ID, SessionDep
from app.errors import forbidden, not_found
from app.experiments.models import Experiment
from app.runs.models import Run


def _check_owner(user: User, owner_id: int, what: str) -> None:
    if not user.is_admin and owner_id != user.id:
        raise forbidden(f"this {what} belongs to another user")


def get_owned_experiment(experiment_id: int, session: SessionDep, user: CurrentUser) -> Experiment:
    experiment = session.get(Experiment, experiment_id) if 0 < experiment_id <= MAX_ID else None
    if experiment is None:
        raise not_found("experiment", experiment_id)
    _check_owner(user, experiment.owner_id, "experiment")
    return experiment


def get_owned_run(run_id: int, session: SessionDep, user: CurrentUser) -> Run:
    run = session.get(Run, run_id) if 0 < run_id <= MAX_ID else None
    if run is None:
        raise not_found("run", run_id)
    _check_owner(user, run.owner_id, "run")
    return run


OwnedExperiment = Annotated[Experiment, Depends(get_owned_experiment)]
OwnedRun = Annotated[Run, Depends(get_owned_run)]
