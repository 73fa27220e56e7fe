from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.sse import EventSourceResponse, ServerSentEvent
from sqlalchemy.orm import Session

from app.auth.deps import CurrentUser
from app.db import SessionDep
from app.experiments import service
from app.experiments.models import Experiment
from app.experiments.schemas import (
    ExperimentCreate,
    ExperimentCreated,
    ExperimentOut,
    ExperimentPatch,
    MetricKeysOut,
)
from app.http_errors import error_responses
from app.metrics.key_search import MAX_LIMIT, search_keys
from app.ownership import OwnedExperiment, Writer
from app.runs import service as runs
from app.runs.files.out import run_outs
from app.runs.streams.page_events import Snapshot, StreamUser, experiment_digest, page_stream
from app.users.filters import OwnerQuery
from app.users.service import resolve_owner

router = APIRouter(prefix="/api/experiments", tags=["experiments"])
# A change to another user's experiment is 403, a missing one 404 (app/ownership.py).
OWNED = error_responses(403, 404)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ExperimentCreated,
    # 400: a body that is not even JSON text; 403: a viewer, or a cookie session without the
    # CSRF token
    responses=error_responses(400, 403),
)
def create_experiment(
    data: ExperimentCreate, session: SessionDep, user: Writer
) -> ExperimentCreated:
    """With `run`, the experiment's first run is queued in the same transaction: a refused run
    (a 422, a quota) leaves no experiment behind, and a request cut before its commit leaves
    neither."""
    experiment = service.create_experiment(session, owner=user, data=data)
    run = None
    if data.run is not None:
        run = runs.create_run(
            session,
            experiment=experiment,
            owner=user,
            overrides=data.run.overrides,
            priority=data.run.priority,
            loc=("body", "run"),
        )
    out = service.to_out(session, [experiment])[0]
    return ExperimentCreated(
        **out.model_dump(), run=run_outs(session, [run])[0] if run is not None else None
    )


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


@router.get("/{experiment_id}/keys", response_model=MetricKeysOut, responses=OWNED)
def experiment_keys(
    experiment: OwnedExperiment,
    session: SessionDep,
    q: Annotated[
        str, Query(max_length=255, pattern=r"^[^\x00]*$", description="part of a key's name")
    ] = "",
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
) -> MetricKeysOut:
    """The metric keys the experiment's runs logged whose name holds `q` (any case), by name:
    the search the page's chart and column pickers need (an experiment may hold 100,000 keys; a
    page holds its newest runs' first keys only). `more`: more keys match than `limit`."""
    found = search_keys(session, experiment_id=experiment.id, q=q, limit=limit)
    return MetricKeysOut(keys=found.keys, more=found.more)


@router.get(
    "/{experiment_id}/events",
    response_class=EventSourceResponse,
    responses=error_responses(401, 403, 404, 429, non_json_route=True),
)
async def experiment_events(
    request: Request, experiment: OwnedExperiment, user_id: StreamUser
) -> AsyncIterator[ServerSentEvent]:
    """The experiment page's live view: an `experiment` event with a digest of its runs (id,
    status, attempt, how far an active run's metrics got) and sweeps (id, status, trials), at
    once and whenever it changes; the page reads what changed through the API. `ping` while
    quiet. The stream ends once no run is active and no sweep runs (`live`: false), or with an
    `experiment` event of `{"deleted": true}`."""
    experiment_id = experiment.id

    def read(session: Session) -> Snapshot:
        if session.get(Experiment, experiment_id) is None:
            return Snapshot({"deleted": True}, final=True)
        return experiment_digest(session, experiment_id)

    async for event in page_stream(request, user_id, "experiment", read):
        yield event
