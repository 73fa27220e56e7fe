"""A notice on a running run whose GPUs stayed idle (docs/fleet.md "Efficiency"): every
running run holding GPUs, whoever owns it and whether or not its owner subscribed to the
GPU-idle alert (app.notifications.triggers), is checked on each round of the periodic checks.
Idle is read from the run's own GPU series (app.metrics.gpu_efficiency.idle_gpus):
utilisation below settings.gpu_idle_below_percent for settings.gpu_idle_minutes.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.gpus.models import GpuLease
from app.metrics.gpu_efficiency import idle_gpus
from app.runs.models import Run, RunStatus
from app.runs.state import notices
from app.settings import get_settings


def check_idle_runs(session: Session, *, now: datetime) -> int:
    """Note every running run idle past the threshold that has no such notice yet; how many."""
    settings = get_settings()
    seconds = settings.gpu_idle_minutes * settings.notify_minute_seconds
    runs = session.scalars(
        select(Run).where(
            Run.status == RunStatus.running,
            Run.id.in_(select(GpuLease.run_id)),
        )
    ).all()
    found = 0
    for run in runs:
        if (run.notices or {}).get("gpu_idle"):
            continue
        gpus = idle_gpus(
            session,
            run_id=run.id,
            below=settings.gpu_idle_below_percent,
            seconds=seconds,
            now=now.timestamp(),
        )
        if not gpus:
            continue
        # Read again under the row's lock: the forwarder writes the same notices column.
        locked = session.get(Run, run.id, with_for_update=True, populate_existing=True)
        if locked is not None:
            found += notices.gpu_idle(
                locked,
                gpus=gpus,
                minutes=settings.gpu_idle_minutes,
                below=settings.gpu_idle_below_percent,
                at=now,
            )
    return found
