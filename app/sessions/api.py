"""POST /api/sessions: a session started like a run (same queue, limits and leases); it is
stopped like one (POST /api/runs/{id}/cancel) and read like one (GET /api/runs/{id})."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from app.db import SessionDep
from app.http_errors import error_responses
from app.ownership import Writer
from app.runs.files.out import run_outs
from app.runs.models import Run
from app.sessions import service
from app.sessions.schemas import SessionCreate, SessionOut

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
