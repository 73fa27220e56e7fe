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


def util_figures(session: Session, key_ids: Sequence[int]) -> tuple[float, float] | None:
    """(mean, nearest-rank p95) of the stored values of ``key_ids``; None without any. One
    grouped scan: NVML's utilisation is a whole percent, so the groups are at most 101 and no
    sort of the samples themselves is needed."""
    stmt = (
        select(Metric.value, func.count())
        .where(Metric.key_id.in_(key_ids), Metric.value.is_not(None))
        .group_by(Metric.value)
        .order_by(Metric.value)
    )
    groups = [(float(v), int(c)) for v, c in session.execute(stmt) if v is not None]
    n = sum(count for _, count in groups)
    if not n:
        return None
    mean = sum(value * count for value, count in groups) / n
    rank, seen = max(1, math.ceil(0.95 * n)), 0
    for value, count in groups:
        seen += count
        if seen >= rank:
            return mean, value
    return mean, groups[-1][0]  # not reached: the counts add up to n


def figures(session: Session, run_id: int) -> dict[str, float]:
    """The run's {UTIL_MEAN, UTIL_P95, MEM_PEAK} now; empty without GPU series."""
    keys = gpu_keys(session, run_id)
    util = [i for k, (i, _) in keys.items() if UTIL.match(k)]
    mem = [i for k, (i, _) in keys.items() if MEM.match(k)]
    found: dict[str, float] = {}
    both = util_figures(session, util) if util else None
    if both is not None:
        found[UTIL_MEAN], found[UTIL_P95] = round(both[0], 2), both[1]
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
    """The run's GPUs (their util keys' GPU part, ``gpu0``, ``node1/gpu0``) whose samples of
    the last ``seconds`` (steps are seconds: the primary key's range, never the whole series)
    are all below ``below``, with a sample at or before that stretch's start (sampled that
    long), the newest no older than ``fresh_seconds()`` (a GPU no longer sampled is not said
    idle)."""
    fresh = fresh_seconds()
    idle = []
    for key, (key_id, last) in sorted(gpu_keys(session, run_id).items()):
        if not UTIL.match(key) or last is None:
            continue
        of_key = Metric.key_id == key_id
        newest = session.execute(
            select(Metric.wall_time, Metric.value).where(of_key, Metric.step == last)
        ).first()
        if newest is None or now - newest[0] > fresh or newest[1] is None or newest[1] >= below:
            continue
        lo = last - int(math.ceil(seconds))
        busy = session.scalar(
            select(func.count()).where(of_key, Metric.step >= lo, Metric.value >= below)
        )
        covered = session.scalar(select(func.count()).where(of_key, Metric.step <= lo))
        if not busy and covered:
            idle.append(key.removeprefix("sys/").removesuffix("/util"))
    return idle
