"""POST/GET /api/sweeps, GET /api/sweeps/{id} (and its event stream), POST
/api/sweeps/{id}/cancel. Everyone reads;
the experiment's owner or an admin starts and cancels (app/ownership.py); viewers never write."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, status
from fastapi.sse import EventSourceResponse, ServerSentEvent
from sqlalchemy.orm import Session

from app.auth.deps import SAFE_METHODS, CurrentUser
from app.db import MAX_ID, SessionDep
from app.errors import NotFound
from app.gpus.estimate import steady_mark
from app.http_errors import error_responses
from app.ownership import Writer, check_write, find_experiment
from app.runs.streams.page_events import Snapshot, StreamUser, page_stream
from app.sweeps import service
from app.sweeps.models import Sweep, SweepStatus
from app.sweeps.out import sweep_briefs, sweep_out
from app.sweeps.schemas import SweepBrief, SweepCreate, SweepCreated, SweepOut
from app.timeutil import utcnow

router = APIRouter(prefix="/api/sweeps", tags=["sweeps"])
OWNED = error_responses(403, 404)


def get_owned_sweep(
    sweep_id: int, request: Request, session: SessionDep, user: CurrentUser
) -> Sweep:
    """The sweep, 404 when there is none; a write is its owner's or an admin's (403)."""
    sweep = session.get(Sweep, sweep_id) if 0 < sweep_id <= MAX_ID else None
    if sweep is None:
        raise NotFound.of("sweep", sweep_id)
    if request.method not in SAFE_METHODS:
        check_write(user, sweep.owner_id, "sweep")
    return sweep


OwnedSweep = Annotated[Sweep, Depends(get_owned_sweep)]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SweepCreated,
    # 403: a viewer, another user's experiment, or a cookie session without the CSRF token;
    # 404: no such experiment
    responses=error_responses(400, 403, 404),
)
def create_sweep(data: SweepCreate, session: SessionDep, user: Writer) -> SweepCreated:
    """Validate the spec against the experiment and launch the first trials (up to
    max_concurrent); the rest follow as trials end."""
    experiment = find_experiment(data.experiment_id, session, user, write=True)
    sweep = service.create_sweep(session, experiment=experiment, owner=user, data=data)
    return SweepCreated(id=sweep.id, status=str(sweep.status))


@router.get("", response_model=list[SweepBrief])
def list_sweeps(
    session: SessionDep,
    _user: CurrentUser,
    experiment_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
) -> list[SweepBrief]:
    """Every sweep on the box (or one experiment's), newest first, with progress and best."""
    return sweep_briefs(session, service.sweeps_of(session, experiment_id=experiment_id))


@router.get("/{sweep_id}", response_model=SweepOut, responses=OWNED)
def read_sweep(sweep: OwnedSweep, session: SessionDep) -> SweepOut:
    return sweep_out(session, sweep)


@router.get(
    "/{sweep_id}/events",
    response_class=EventSourceResponse,
    responses=error_responses(401, 403, 404, 429, non_json_route=True),
)
async def sweep_events(
    request: Request, sweep: OwnedSweep, user_id: StreamUser
) -> AsyncIterator[ServerSentEvent]:
    """The sweep page's live view: a `sweep` event with the sweep as GET /api/sweeps/{id}
    answers it, at once and whenever it changes; the stream ends after the sweep has ended
    (its last event says so) or was deleted (`{"status": "deleted"}`). `ping` while quiet."""
    sweep_id = sweep.id

    def read(session: Session) -> Snapshot:
        found = session.get(Sweep, sweep_id)
        if found is None:
            return Snapshot({"id": sweep_id, "status": "deleted"}, final=True)
        out = sweep_out(session, found)
        data = out.model_dump(mode="json")
        # A queued run's estimate moves with the clock: compared by its steady mark, so the
        # stream sends a sweep again when something in it changed, not at every poll.
        now = utcnow()
        marks = {
            r.id: steady_mark(r.estimated_start, r.estimate_basis, now)
            for r in out.runs
            if r.estimate_basis is not None
        }
        same = {
            **data,
            "runs": [
                {**run, "estimated_start": marks.get(run["id"])} for run in data.get("runs", [])
            ],
        }
        return Snapshot(data, final=SweepStatus(found.status).finished, same=same)

    async for event in page_stream(request, user_id, "sweep", read):
        yield event


@router.post(
    "/{sweep_id}/cancel", response_model=SweepOut, responses=error_responses(403, 404, 409)
)
def cancel_sweep(sweep: OwnedSweep, session: SessionDep) -> SweepOut:
    """No more trials: queued ones are cancelled now, running ones stopped by their workers."""
    service.cancel_sweep(session, sweep=sweep)
    return sweep_out(session, sweep)
