"""What follows a run's final status (app.runs.state.lifecycle calls it in the same
transaction): its owner's notification, a sweep's next trial, its final GPU efficiency."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import after_commit
from app.metrics import gpu_efficiency
from app.notifications.triggers import best_effort, run_ended
from app.runs.models import Run, RunStatus


def run_ended_with(
    session: Session, run_id: int, status: RunStatus, *, guess: bool = False
) -> None:
    """After a run's final status: its owner's message into the outbox (sent after the commit;
    a guess's held, a correction's in its place); a sweep's trial advances its sweep; its GPU
    efficiency figures made final (app.metrics.gpu_efficiency: never at the end's cost)."""
    run_ended(session, run_id=run_id, status=status, guess=guess)
    with best_effort("GPU efficiency", run_id), session.begin_nested():
        gpu_efficiency.refresh(session, run_id=run_id)
    sweep_id = session.scalar(select(Run.sweep_id).where(Run.id == run_id))
    if sweep_id is not None:
        from app.broker import send_sweep_advance  # a trial ended: the sweep's next one

        after_commit(session, lambda: send_sweep_advance(sweep_id))
