"""A sweep's trials with their runs, and what each one is to a sampler or pruner."""

from __future__ import annotations

import math

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.runs.models import Run, RunStatus
from app.sweeps.models import SweepTrial
from app.sweeps.sampling import Observed, State

ACTIVE = (RunStatus.queued, RunStatus.running)


def trials_of(session: Session, *, sweep_id: int) -> list[tuple[SweepTrial, Run | None]]:
    """Every trial in number order, with its run (None once the run was deleted)."""
    stmt = (
        select(SweepTrial, Run)
        .outerjoin(Run, Run.id == SweepTrial.run_id)
        .where(SweepTrial.sweep_id == sweep_id)
        .order_by(SweepTrial.number)
    )
    return [(t, r) for t, r in session.execute(stmt)]


def is_active(run: Run | None) -> bool:
    return run is not None and RunStatus(run.status) in ACTIVE


def observe(trial: SweepTrial, run: Run | None, curve: dict[int, float]) -> Observed:
    """A succeeded run with a finite last value is complete (its value: the metric's last
    point, the model it ended with); a cancelled one (stopped early, or by hand) was pruned,
    judged on its curve so far; a failed one, or one that never logged the metric, failed."""
    if run is None:
        return Observed(trial.params, State.FAIL, curve=curve)
    status = RunStatus(run.status)
    if status in ACTIVE:
        return Observed(trial.params, State.RUNNING, curve=curve)
    if status is RunStatus.cancelled:
        return Observed(trial.params, State.PRUNED, curve=curve)
    value = curve[max(curve)] if curve else None
    if status is RunStatus.succeeded and value is not None and math.isfinite(value):
        return Observed(trial.params, State.COMPLETE, value=value, curve=curve)
    return Observed(trial.params, State.FAIL, curve=curve)
