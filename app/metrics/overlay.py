"""The series of many runs for an overlay (GET /api/compare/metrics: compare, the experiment
page's curves), read from their overviews (app/metrics/overview/): one statement for every
run's series, no point read. That is the same work on a fresh server as on a warm one, where
the live downsample (app.metrics.service.read_runs_series) reads each series' buckets from
the points once per process (1-3 s for 100 runs x 2 keys x 10k points) before its cache
answers. A series without an overview (none is kept for it yet), and views of more than
MAX_VIEW_POINTS points, are read the live way.

The overviews are cut at once (app.metrics.overview.many: numpy over all of them, the same
answer as ``overview.view`` per series); 1,000 runs' series were cut one by one in Python, a
decode, a view and three lists each (issue 43)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.metrics.downsample import MIN_MAX_POINTS
from app.metrics.models import MetricKey, MetricOverview
from app.metrics.service import LiveRun, Series, read_runs_series


def read_overlay(
    session: Session,
    *,
    runs: Sequence[LiveRun],
    keys: Sequence[str],
    max_points: int,
    with_time: bool = False,
) -> dict[int, Series]:
    """{run id: {key: {"step", "value"[, "time"]}}} of the runs' `keys`, each series at most
    max_points points (whole when it has no more; else each bucket's min and max point and
    the series' ends, between half and all of max_points); a run without any of `keys` has
    {}, keys in key order."""
    if max_points < MIN_MAX_POINTS:
        raise ValueError(
            f"max_points must be at least {MIN_MAX_POINTS} (the two ends, one bucket's min and max)"
        )
    # numpy: not in an idle process (tests/test_job_imports.py)
    from app.metrics.overview import points as overview

    if max_points > overview.MAX_VIEW_POINTS or not runs or not keys:
        return read_runs_series(
            session, runs=runs, keys=keys, max_points=max_points, with_time=with_time
        )
    result: dict[int, Series] = {run.id: {} for run in runs}
    stmt = (
        select(MetricKey.run_id, MetricKey.key, MetricOverview.width, MetricOverview.data)
        .outerjoin(MetricOverview, MetricOverview.key_id == MetricKey.id)
        .where(MetricKey.run_id.in_(list(result)), MetricKey.key.in_(list(keys)))
        .order_by(MetricKey.run_id, MetricKey.key)
    )
    from app.metrics.overview import many

    live: dict[int, set[str]] = {}
    found: list[tuple[int, str]] = []
    stored: list[tuple[int, bytes]] = []
    for run_id, key, width, data in session.connection().execute(stmt):
        if data is None:
            live.setdefault(run_id, set()).add(key)
            continue
        found.append((run_id, key))
        stored.append((width, data))
    cut = many.views(stored, max_points, with_time=with_time)
    for (run_id, key), lists in zip(found, cut, strict=True):
        result[run_id][key] = lists
    if live:
        by_id = {run.id: run for run in runs}
        wanted = sorted(set().union(*live.values()))
        read = read_runs_series(
            session,
            runs=[by_id[run_id] for run_id in live],
            keys=wanted,
            max_points=max_points,
            with_time=with_time,
        )
        for run_id, missing in live.items():
            series = result[run_id]
            series.update({k: v for k, v in read[run_id].items() if k in missing})
            result[run_id] = dict(sorted(series.items()))
    return result
