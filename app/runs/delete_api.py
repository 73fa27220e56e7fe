"""DELETE /api/runs/{id} and DELETE /api/experiments/{id} (app/runs/deletion.py).

204 with no body; the bytes of files freed are in the ``X-Freed-Bytes`` header, which the
pages and the CLI show. The owner or an admin only (the OwnedRun / OwnedExperiment checks
tell a write by the method)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status
from fastapi.responses import Response

from app.db import SessionDep
from app.http_errors import error_responses
from app.ownership import OwnedExperiment, OwnedRun
from app.runs import deletion, service

router = APIRouter(prefix="/api", tags=["runs"])
FREED_HEADER = "X-Freed-Bytes"
# 409: a run has not ended, or an active run resumes from one of its checkpoints.
DELETE_RESPONSES: dict[int | str, dict[str, Any]] = {
    **error_responses(403, 404, 409),
    204: {
        "description": "Deleted",
        "headers": {
            FREED_HEADER: {
                "description": "bytes of files freed (the run folders and the artifact store)",
                "schema": {"type": "integer"},
            }
        },
    },
}


def _freed(freed: int) -> Response:
    return Response(status_code=status.HTTP_204_NO_CONTENT, headers={FREED_HEADER: str(freed)})


@router.delete("/runs/{run_id}", status_code=status.HTTP_204_NO_CONTENT, responses=DELETE_RESPONSES)
def delete_run(run: OwnedRun, session: SessionDep) -> Response:
    """Delete an ended run: its points, logs, files and stored checkpoints."""
    deletion.refuse_if_busy(session, [run])
    run_id = run.id
    session.rollback()  # the deletion's own short transactions write from here on
    return _freed(deletion.delete_runs([run_id]))


@router.delete(
    "/experiments/{experiment_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=DELETE_RESPONSES,
    tags=["experiments"],
)
def delete_experiment(experiment: OwnedExperiment, session: SessionDep) -> Response:
    """Delete an experiment and every run of it (all must have ended)."""
    runs = service.runs_of_experiment(session, experiment_id=experiment.id)
    deletion.refuse_if_busy(session, runs)
    experiment_id, run_ids = experiment.id, [r.id for r in runs]
    session.rollback()
    return _freed(deletion.delete_experiment(experiment_id, run_ids))
