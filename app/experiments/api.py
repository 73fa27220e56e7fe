from __future__ import annotations

from fastapi import APIRouter, status

from app.auth.deps import CurrentUser
from app.db import SessionDep
from app.experiments import service
from app.experiments.schemas import ExperimentCreate, ExperimentOut, ExperimentPatch
from app.http_errors import error_responses
from app.ownership import OwnedExperiment, Writer
from app.users.filters import OwnerQuery
from app.users.service import resolve_owner

router = APIRouter(prefix="/api/experiments", tags=["experiments"])
# A change to another user's experiment is 403, a missing one 404 (app/ownership.py).
OWNED = error_responses(403, 404)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentOut,
    # 400: a body that is not even JSON text; 403: a viewer, or a cookie session without the
    # CSRF token
    responses=error_responses(400, 403),
)
def create_experiment(data: ExperimentCreate, session: SessionDep, user: Writer) -> ExperimentOut:
    experiment = service.create_experiment(session, owner=user, data=data)
    return service.to_out(session, [experiment])[0]


@router.get("", response_model=list[ExperimentOut])
def list_experiments(
    session: SessionDep, user: CurrentUser, owner: OwnerQuery = None
) -> list[ExperimentOut]:
    """Every experiment on the box, newest first; `owner=me` (or a username) for one owner's."""
    owner_id = resolve_owner(session, user=user, owner=owner, loc="owner")
    return service.to_out(session, service.visible_experiments(session, owner_id=owner_id))


@router.get("/{experiment_id}", response_model=ExperimentOut, responses=OWNED)
def read_experiment(experiment: OwnedExperiment, session: SessionDep) -> ExperimentOut:
    return service.to_out(session, [experiment])[0]


@router.patch(
    "/{experiment_id}",
    response_model=ExperimentOut,
    responses=error_responses(400, 403, 404),  # 400: a body that is not even JSON text
)
def edit_experiment(
    experiment: OwnedExperiment, data: ExperimentPatch, session: SessionDep
) -> ExperimentOut:
    """Name, description and the experiment's own "best" metric (the owner's or an admin's);
    absent fields stay as they are, `best: null` clears the choice."""
    return service.to_out(
        session, [service.edit_experiment(session, experiment=experiment, patch=data)]
    )[0]
