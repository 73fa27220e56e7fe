"""GPU-hours per user: each run's running time times its GPUs, clipped to a period."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.gpus.schemas import UserUsageOut
from app.runs.models import Run
from app.timeutil import as_utc


def gpu_usage(
    session: Session,
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    owner_id: int | None = None,
) -> list[UserUsageOut]:
    """GPU-hours per user over [since, until): each run's running time clipped to the period
    (a run still running counts until now) times its number of GPUs. Every user who ran
    something in the period (the team sees each other's usage), or only `owner_id`'s row
    (there even when it is zero)."""
    query = (
        select(Run.owner_id, Run.started_at, Run.finished_at, Run.gpu_indices)
        .where(Run.started_at.is_not(None), Run.started_at < until)
        .where(or_(Run.finished_at.is_(None), Run.finished_at > since))
    )
    if owner_id is not None:
        query = query.where(Run.owner_id == owner_id)
    totals: dict[int, list[float]] = {}  # owner -> [gpu_seconds, runs, gpu_runs]
    for owner_id, started_at, finished_at, gpu_indices in session.execute(query):
        if started_at is None:  # excluded by the query; for the type checker
            continue
        start = max(as_utc(started_at), since)
        end = min(as_utc(finished_at) if finished_at else now, until)
        if end < start:
            continue
        gpus = len([i for i in (gpu_indices or "").split(",") if i])
        row = totals.setdefault(owner_id, [0.0, 0, 0])
        row[0] += (end - start).total_seconds() * gpus
        row[1] += 1
        row[2] += 1 if gpus else 0
    if owner_id is not None:
        totals.setdefault(owner_id, [0.0, 0, 0])
    names = dict(session.execute(select(User.id, User.username).where(User.id.in_(totals))).all())
    rows = [
        UserUsageOut(
            user_id=uid,
            username=names.get(uid, "?"),
            gpu_hours=round(seconds / 3600, 4),
            runs=int(runs),
            gpu_runs=int(gpu_runs),
        )
        for uid, (seconds, runs, gpu_runs) in totals.items()
    ]
    return sorted(rows, key=lambda r: (-r.gpu_hours, r.username))
