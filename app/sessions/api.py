"""POST /api/sessions: a session started like a run (same queue, limits and leases); it is
stopped like one (POST /api/runs/{id}/cancel) and read like one (GET /api/runs/{id})."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from app.db import SessionDep
from app.http_errors import error_responses
from app.ownership import OwnedRun, Writer
from app.runs.files.out import run_outs
from app.runs.models import Run
from app.sessions import service
from app.sessions.schemas import SessionCreate, SessionExtend, SessionOut

router = APIRouter(prefix="/api", tags=["sessions"])


def session_out(session: SessionDep, run: Run, request: Request) -> SessionOut:
    ends = service.ends_at(run)
    return SessionOut(
        run=run_outs(session, [run])[0],
        url=str(request.base_url).rstrip("/") + f"/sessions/{run.id}/lab/",
        ends_at=ends.isoformat() if ends else None,
    )


@router.post(
    "/sessions",
    status_code=status.HTTP_201_CREATED,
    response_model=SessionOut,
    responses=error_responses(400, 403, 404),
)
def start_session(
    data: SessionCreate, session: SessionDep, user: Writer, request: Request
) -> SessionOut:
    """A JupyterLab session on `gpus` leased GPUs for at most `hours`; `url` opens it once it
    runs (its owner and admins only)."""
    run = service.start(session, owner=user, data=data)
    return session_out(session, run, request)


@router.post(
    "/sessions/{run_id}/extend",
    response_model=SessionOut,
    responses=error_responses(
        400, 403, 404, 409
    ),  # 400: not even JSON text; 409: not running, or a run waits for GPUs
)
def extend_session(
    run: OwnedRun, data: SessionExtend, session: SessionDep, request: Request
) -> SessionOut:
    """`hours` more for a running session, while no run waits for GPUs."""
    return session_out(session, service.extend(session, run=run, more_hours=data.hours), request)
