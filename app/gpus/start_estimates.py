"""Each queued run's estimated start from the database: the scheduler's view (the one `decide`
reads), the running runs' expected ends and the queued runs' lengths (app.gpus.lengths),
replayed by app.gpus.estimate. Read-only; asked by the run page, the API and `torchyard ls`."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.gpus import lengths
from app.gpus.estimate import Estimate, Fleet, simulate
from app.gpus.fleet_view import scheduler_view
from app.runs.models import Run


def estimated_starts(
    session: Session,
    *,
    run_ids: Collection[int],
    now: datetime,
    lease_ttl_seconds: float,
    starvation_seconds: float,
) -> dict[int, Estimate]:
    """The estimate of each queued run of `run_ids` (the others left out), from one replay of
    the whole queue: a run's start depends on every run ahead of it."""
    view = scheduler_view(session, now=now, lease_ttl_seconds=lease_ttl_seconds)
    wanted = set(run_ids) & {r.id for r in view.queue}
    if not wanted:
        return {}
    queued = list(session.scalars(select(Run).where(Run.id.in_([r.id for r in view.queue]))))
    estimates = simulate(
        view.queue,
        lengths.holders(session, now=now),
        lengths.queued_lengths(session, queued),
        Fleet(view.free, view.pools, view.capacity, view.served, view.outside, view.fair),
        now,
        starvation_seconds,
    )
    return {run_id: estimates[run_id] for run_id in wanted if run_id in estimates}
