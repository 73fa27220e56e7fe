"""A run's GPU leases once it holds them: renewed with its heartbeat, released with its final
status. Kept apart from app.gpus.service (the scheduler's side) so app.runs.lifecycle can
release them in the transaction that ends the run without importing the scheduler."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from app.gpus.models import GpuLease
from app.timeutil import utcnow


def heartbeat_leases(session: Session, *, run_id: int, now: datetime | None = None) -> None:
    session.execute(
        update(GpuLease).where(GpuLease.run_id == run_id).values(heartbeat_at=now or utcnow())
    )


def release_leases(session: Session, *, run_id: int) -> None:
    session.execute(delete(GpuLease).where(GpuLease.run_id == run_id))
