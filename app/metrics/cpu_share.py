"""What share of a CPU a running job got over the last minutes, and whether it starved (issue
39: a DDP job got 2 s of CPU in 8.5 minutes behind unrelated processes, and nothing said so).

Read from the run's ``sys/cpu_percent`` series (each node's, ``sys/node<k>/cpu_percent``), which
the worker samples from the job's cgroup CPU time (worker.system_metrics): the mean over the
window's points, 100 being one whole CPU. The run page and the GPU page say it; below
STARVED_PERCENT the job is called starved: a training job that barely runs at all is waiting
for the CPU (its host's other work, or its installation's CPU weight: settings.job_cpu_weight),
not for its GPU or its data, which keep a Python loop busy.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app.metrics.models import Metric, MetricKey
from torchyard.contract import SYSTEM_KEY_PREFIX

WINDOW_SECONDS = 300.0
# A job that got less than this much of one CPU over the window is said to starve.
STARVED_PERCENT = 5.0
# Fewer points than this in the window say nothing yet (the first seconds of a job).
MIN_POINTS = 2

CPU_KEY = f"{SYSTEM_KEY_PREFIX}cpu_percent"


@dataclass(frozen=True)
class CpuShare:
    percent: float  # of one CPU, the mean over the window (the lowest node's on multi-node)
    seconds: float  # the window the points cover
    starved: bool

    @property
    def text(self) -> str:
        minutes = round(self.seconds / 60)
        window = f"{self.seconds:.0f} seconds" if minutes < 2 else f"{minutes} minutes"
        said = f"this job got {self.percent:.1f}% of a CPU in the last {window}"
        if self.starved:
            return f"Starved: {said} (the host's other work takes the CPU)"
        return f"CPU: {said}"


def cpu_shares(
    session: Session, run_ids: Iterable[int], *, now: float | None = None
) -> dict[int, CpuShare]:
    """Each running run's CPU share over the last WINDOW_SECONDS, by run id; a run without
    enough points in the window is left out."""
    ids = list(run_ids)
    if not ids:
        return {}
    since = (time.time() if now is None else now) - WINDOW_SECONDS
    node_key = f"{SYSTEM_KEY_PREFIX}node%/cpu_percent"
    rows = session.execute(
        select(
            MetricKey.run_id,
            MetricKey.key,
            func.avg(Metric.value),
            func.count(),
            func.min(Metric.wall_time),
            func.max(Metric.wall_time),
        )
        .join(Metric, Metric.key_id == MetricKey.id)
        .where(
            MetricKey.run_id.in_(ids),
            or_(MetricKey.key == CPU_KEY, MetricKey.key.like(node_key)),
            Metric.wall_time >= since,
            Metric.value.is_not(None),
        )
        .group_by(MetricKey.run_id, MetricKey.key)
    )
    found: dict[int, CpuShare] = {}
    for run_id, _key, mean, count, first, last in rows:
        if count < MIN_POINTS or mean is None:
            continue
        share = CpuShare(
            percent=float(mean),
            seconds=float(last - first),
            starved=float(mean) < STARVED_PERCENT,
        )
        if run_id not in found or share.percent < found[run_id].percent:
            found[run_id] = share
    return found
