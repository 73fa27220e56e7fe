"""Per-user GPU figures over a window, for the Fleet page, its API and ``torchyard fleet``.

GPU-hours are each run's running time clipped to the window times its GPUs (as the GPU
page's usage: app.gpus.usage). Utilisation comes from the runs' own GPU series
(sys/gpu<i>/util, every node's: worker.system_metrics), the samples whose wall time falls in
the window: one grouped query over the window's runs. Idle GPU-hours are a run's GPU-hours
times the share of its samples below settings.gpu_idle_below_percent: the time its GPUs were
held and idle. Runs waiting: each user's queued runs now. One row per user who held GPUs in
the window or has runs waiting, or only ``owner_id``'s (there even when all zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.fleet.schemas import FleetUserOut
from app.metrics.models import Metric, MetricKey
from app.runs.models import Run, RunStatus
from app.timeutil import as_utc

UTIL_KEYS = "sys/%gpu%/util"  # sys/gpu<i>/util and sys/node<k>/gpu<i>/util


@dataclass
class _Totals:
    gpu_seconds: float = 0.0
    idle_seconds: float = 0.0
    samples: int = 0
    util_sum: float = 0.0
    gpu_runs: int = 0
    waiting: int = 0


def _gpu_seconds(
    session: Session, *, since: datetime, until: datetime, now: datetime, owner_id: int | None
) -> dict[int, tuple[int, float]]:
    """{run id: (owner, GPU-seconds in the window)} of the runs that held GPUs in it."""
    query = select(Run.id, Run.owner_id, Run.started_at, Run.finished_at, Run.gpu_indices).where(
        Run.started_at.is_not(None),
        Run.started_at < until,
        or_(Run.finished_at.is_(None), Run.finished_at > since),
        Run.gpu_indices.is_not(None),
        Run.gpu_indices != "",
    )
    if owner_id is not None:
        query = query.where(Run.owner_id == owner_id)
    found: dict[int, tuple[int, float]] = {}
    for run_id, owner, started, finished, indices in session.execute(query):
        if started is None:
            continue
        start = max(as_utc(started), since)
        end = min(as_utc(finished) if finished else now, until)
        gpus = len([i for i in (indices or "").split(",") if i.strip()])
        if end > start and gpus:
            found[run_id] = (owner, (end - start).total_seconds() * gpus)
    return found


def _samples(
    session: Session, run_ids: list[int], *, since: datetime, until: datetime, below: float
) -> dict[int, tuple[int, float, int]]:
    """{run id: (samples, their sum, samples below ``below``)} of the GPU series in the window."""
    value = Metric.value
    stmt = (
        select(
            MetricKey.run_id,
            func.count(value),
            func.sum(value),
            func.sum(case((value < below, 1), else_=0)),
        )
        .join(Metric, Metric.key_id == MetricKey.id)
        .where(
            MetricKey.run_id.in_(run_ids),
            MetricKey.key.like(UTIL_KEYS),
            ~MetricKey.key.like("sys/run/%"),
            Metric.wall_time >= since.timestamp(),
            Metric.wall_time < until.timestamp(),
            value.is_not(None),
        )
        .group_by(MetricKey.run_id)
    )
    return {r: (int(n), float(s or 0.0), int(idle or 0)) for r, n, s, idle in session.execute(stmt)}


def fleet(
    session: Session,
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    below: float,
    owner_id: int | None = None,
) -> list[FleetUserOut]:
    """The window's rows, most GPU-hours first (then by name)."""
    held = _gpu_seconds(session, since=since, until=until, now=now, owner_id=owner_id)
    samples = _samples(session, list(held), since=since, until=until, below=below)
    totals: dict[int, _Totals] = {}
    for run_id, (owner, seconds) in held.items():
        row = totals.setdefault(owner, _Totals())
        n, total, idle = samples.get(run_id, (0, 0.0, 0))
        row.gpu_seconds += seconds
        row.gpu_runs += 1
        row.samples += n
        row.util_sum += total
        row.idle_seconds += seconds * idle / n if n else 0.0
    waiting = select(Run.owner_id, func.count()).where(Run.status == RunStatus.queued)
    if owner_id is not None:
        waiting = waiting.where(Run.owner_id == owner_id)
    for owner, count in session.execute(waiting.group_by(Run.owner_id)):
        totals.setdefault(owner, _Totals()).waiting = int(count)
    if owner_id is not None:
        totals.setdefault(owner_id, _Totals())
    names = dict(session.execute(select(User.id, User.username).where(User.id.in_(totals))).all())
    rows = [
        FleetUserOut(
            user_id=uid,
            username=names.get(uid, "?"),
            gpu_hours=round(t.gpu_seconds / 3600, 4),
            idle_gpu_hours=round(t.idle_seconds / 3600, 4),
            util_mean=round(t.util_sum / t.samples, 2) if t.samples else None,
            gpu_runs=t.gpu_runs,
            runs_waiting=t.waiting,
        )
        for uid, t in totals.items()
    ]
    return sorted(rows, key=lambda r: (-r.gpu_hours, r.username))
