"""A run's reproducibility record (``runs.environment``), written here only; the API serves it
as it is (GET /api/runs/{id}/environment).

It has two halves. The worker's (host, GPUs, the workspace's or the client's git state:
worker.provenance) is stored when the job is launched; the job's (versions, packages,
determinism flags: torchyard.runtime.environment) is folded in when its environment.json
appears. The worker's half wins a key both have: the job is untrusted and must not rewrite
where it ran or from which commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.runs.models import Run


def store(session: Session, *, run_id: int, record: Mapping[str, Any]) -> None:
    """Set the record to ``record`` (the worker's half, at launch)."""
    session.execute(update(Run).where(Run.id == run_id).values(environment=dict(record)))


def merge_job_half(session: Session, *, run_id: int, job: Mapping[str, Any]) -> None:
    """Fold the job's half in under the worker's (which wins a key both have)."""
    run = session.get(Run, run_id)
    if run is None:
        return
    store(session, run_id=run_id, record={**job, **(run.environment or {})})
