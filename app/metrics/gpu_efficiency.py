"""A run's GPU efficiency: mean and p95 utilisation and peak memory over its leased GPUs,
from its system series (sys/gpu<i>/util and mem_mb, every node's: worker.system_metrics).

The figures are stored as three series of the run's own (SUMMARY_KEYS), so they land where
the runs table's summaries live (metric_keys' last value): the table shows, sorts
(``summary.sys/run/gpu_util_mean.last``) and filters (``sys/run/gpu_util_p95<20``) them as it
does any metric, with no column of their own. Under ``sys/`` so a job cannot log them itself
(the spool refuses sys/ keys: worker.spool_lines). Each refresh writes one point at a step past
the last one, so the latest figure is the summary's ``last``; the worker refreshes them while
the run trains (every gpu_summary_seconds) and app.runs.state.ended once more at its end.

p95 is the nearest-rank percentile of every utilisation sample of the run's GPUs (all GPUs
pooled); the mean the mean of the same samples; the peak memory the highest mem_mb sample of
any one GPU (its summary's max: no scan).

Idle: a GPU of a running run whose utilisation series has stayed below
settings.gpu_idle_below_percent for a stretch (``idle_gpus``): read from the stored series,
so it holds across process restarts and works for a fake inventory with NVML's stand-in.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.metrics.ingest import Point, ingest_points
from app.metrics.models import Metric, MetricKey
from app.settings import get_settings

UTIL_MEAN = "sys/run/gpu_util_mean"
UTIL_P95 = "sys/run/gpu_util_p95"
MEM_PEAK = "sys/run/gpu_mem_peak_mb"
SUMMARY_KEYS = (UTIL_MEAN, UTIL_P95, MEM_PEAK)
UTIL = re.compile(r"^sys/(?:node\d+/)?gpu\d+/util$")
MEM = re.compile(r"^sys/(?:node\d+/)?gpu\d+/mem_mb$")


def gpu_keys(session: Session, run_id: int) -> dict[str, tuple[int, int | None]]:
    """{key: (key id, last step)} of the run's per-GPU util and mem_mb series."""
    rows = session.execute(
        select(MetricKey.key, MetricKey.id, MetricKey.last_step).where(
            MetricKey.run_id == run_id, MetricKey.key.like("sys/%gpu%")
        )
    ).all()
    return {k: (i, s) for k, i, s in rows if UTIL.match(k) or MEM.match(k)}


def percentile(session: Session, key_ids: Sequence[int], share: float) -> float | None:
    """The nearest-rank ``share`` percentile of the stored values of ``key_ids``."""
    values = Metric.value.is_not(None)
    n = session.scalar(select(func.count()).where(Metric.key_id.in_(key_ids), values)) or 0
    if not n:
        return None
    rank = max(1, math.ceil(share * n))
    return session.scalar(
        select(Metric.value)
        .where(Metric.key_id.in_(key_ids), values)
        .order_by(Metric.value)
        .offset(rank - 1)
        .limit(1)
    )


def figures(session: Session, run_id: int) -> dict[str, float]:
    """The run's {UTIL_MEAN, UTIL_P95, MEM_PEAK} now; empty without GPU series."""
    keys = gpu_keys(session, run_id)
    util = [i for k, (i, _) in keys.items() if UTIL.match(k)]
    mem = [i for k, (i, _) in keys.items() if MEM.match(k)]
    found: dict[str, float] = {}
    if util:
        mean = session.scalar(select(func.avg(Metric.value)).where(Metric.key_id.in_(util)))
        p95 = percentile(session, util, 0.95)
        if mean is not None and p95 is not None:
            found[UTIL_MEAN], found[UTIL_P95] = round(float(mean), 2), float(p95)
    if mem:
        peak = session.scalar(select(func.max(MetricKey.max_value)).where(MetricKey.id.in_(mem)))
        if peak is not None:
            found[MEM_PEAK] = float(peak)
    return found


def refresh(session: Session, *, run_id: int) -> int:
    """Store the run's figures now, one point per key at a step past both its GPU series'
    newest and the figures' own last (so each refresh is the summary's last); how many were
    stored (0 without GPU series)."""
    found = figures(session, run_id)
    if not found:
        return 0
    steps = [s for _, s in gpu_keys(session, run_id).values() if s is not None]
    own = session.scalar(
        select(func.max(MetricKey.last_step)).where(
            MetricKey.run_id == run_id, MetricKey.key.in_(SUMMARY_KEYS)
        )
    )
    step = max([*steps, -1 if own is None else own + 1])
    now = time.time()
    points: list[Point] = [(key, step, value, now) for key, value in sorted(found.items())]
    return ingest_points(session, run_id=run_id, points=points)


def fresh_seconds() -> float:
    """How old a run's newest GPU sample may be for its GPU to be judged from it at all."""
    settings = get_settings()
    return max(settings.lease_ttl_seconds, 3 * settings.system_metrics_interval_seconds)


def idle_gpus(
    session: Session, *, run_id: int, below: float, seconds: float, now: float
) -> list[str]:
    """The run's GPUs (their util keys' GPU part, ``gpu0``, ``node1/gpu0``) whose samples
    have all been below ``below`` for at least ``seconds`` up to now, the newest of them no
    older than ``fresh_seconds()`` (a GPU no longer sampled is not said idle)."""
    fresh = fresh_seconds()
    idle = []
    for key, (key_id, _) in sorted(gpu_keys(session, run_id).items()):
        if not UTIL.match(key):
            continue
        of_key = Metric.key_id == key_id
        newest = session.execute(
            select(Metric.wall_time, Metric.value).where(of_key).order_by(Metric.step.desc())
        ).first()
        if newest is None or now - newest[0] > fresh or newest[1] is None or newest[1] >= below:
            continue
        last_busy = select(func.max(Metric.wall_time)).where(of_key, Metric.value >= below)
        busy = session.scalar(last_busy)
        start = session.scalar(
            select(func.min(Metric.wall_time)).where(
                of_key, *(() if busy is None else (Metric.wall_time > busy,))
            )
        )
        if start is not None and newest[0] - start >= seconds and now - start >= seconds:
            idle.append(key.removeprefix("sys/").removesuffix("/util"))
    return idle
