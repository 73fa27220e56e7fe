"""A run's system series (sys/ keys: the job's CPU, memory and GPUs, sampled by the worker,
worker.system_metrics): where its seconds count from. The points themselves go in through
app.metrics.ingest.ingest_points."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.metrics.models import Metric, MetricKey
from app.runs.models import Run
from app.timeutil import as_utc


@dataclass(frozen=True)
class SeriesStart:
    """The Unix time of step 0 of the attempt's series, and the GPUs the run leases."""

    at: float
    gpu_indices: tuple[int, ...]


def series_start(session: Session, *, run_id: int, keys: Collection[str]) -> SeriesStart | None:
    """Step 0 is the attempt's `started_at`, moved back past the series (any of `keys`) of the
    run's earlier attempts (a requeue keeps them: app.runs.recovery), so the next attempt's
    seconds follow the last one's instead of landing on its steps (the first point of a step
    is kept). None when the run has no start (nothing to count seconds from). Read from the
    database, so a watch loop that starts again for the same attempt counts from the same
    step 0."""
    row = session.get(Run, run_id)
    if row is None or row.started_at is None:
        return None
    started = as_utc(row.started_at).timestamp()
    earlier = session.scalar(
        select(func.max(Metric.step))
        .join(MetricKey, Metric.key_id == MetricKey.id)
        .where(
            MetricKey.run_id == run_id,
            MetricKey.key.in_(list(keys)),
            Metric.wall_time < started,
        )
    )
    if earlier is not None:
        started -= earlier + 1
    indices = tuple(int(i) for i in (row.gpu_indices or "").split(",") if i.strip())
    return SeriesStart(at=started, gpu_indices=indices)
