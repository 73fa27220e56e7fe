"""Metric storage: series reads for the API and the live stream.

Every function takes the caller's session, flushes at most, and never commits. A point is
(key, step, value, wall_time) with an integer key id per run (metric_keys), unique per (key
id, step); a NULL value is a non-finite one. Ingest (the forwarder's bulk inserts) is in
app.metrics.ingest; ``ingest_points`` and ``Point`` stay importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.orm import Session, aliased

from app.metrics.downsample import MIN_MAX_POINTS, downsample_timed
from app.metrics.finite import json_values
from app.metrics.ingest import Point as Point
from app.metrics.ingest import ingest_points as ingest_points
from app.metrics.live_downsample import (
    downsample_live,
    keep_whole,
    known_longer_than,
    note_longer_than,
)
from app.metrics.live_read import NEW_POINTS_LIMIT as NEW_POINTS_LIMIT
from app.metrics.live_read import Series as Series
from app.metrics.live_read import key_window as key_window
from app.metrics.live_read import read_new_points as read_new_points
from app.metrics.models import Metric, MetricKey

# --- reads ------------------------------------------------------------------------------

# A whole series spanning more steps than this is viewed from its stored overview
# (app/metrics/overview/): 1,024 to 2,050 points (between a quarter and a half of the run
# page's 4,000; at least max_points / 2 for max_points up to 2,050), read as one row. The SQL
# downsample of such a series reads all its points (a fresh server's first view of a run of
# 20 keys x 1,000,000 steps took 30.7 s, ~1.4 s a series: issue 43); below this span it reads
# at most ~0.1 s a series, and gives every point max_points allows.
OVERVIEW_SPAN = 100_000


def list_keys(session: Session, *, run_id: int) -> list[str]:
    """The run's metric keys, sorted."""
    stmt = select(MetricKey.key).where(MetricKey.run_id == run_id).order_by(MetricKey.key)
    return list(session.scalars(stmt))


def count_points(session: Session, *, run_id: int, key: str | None = None) -> int:
    """Stored points of the run (of one key when given)."""
    stmt = (
        select(func.count())
        .select_from(Metric)
        .join(MetricKey, Metric.key_id == MetricKey.id)
        .where(MetricKey.run_id == run_id)
    )
    if key is not None:
        stmt = stmt.where(MetricKey.key == key)
    return session.execute(stmt).scalar_one()


def read_series(
    session: Session,
    *,
    run_id: int,
    keys: Sequence[str] | None = None,
    max_points: int | None = None,
    step_min: int | None = None,
    step_max: int | None = None,
    with_time: bool = False,
    generation: int | None = None,
    growing: bool = True,
) -> Series:
    """{key: {"step": [...], "value": [...]}} in step order; None values are non-finite.
    With with_time, each series also has "time": the points' wall times (Unix seconds).

    With max_points, a series with more points than that in [step_min, step_max] is reduced
    in SQL to per-bucket min and max points and its first and last points in the range (at
    most max_points, spikes and ends kept); shorter series come back whole. Unknown keys are
    left out. With a `generation` (the run's attempt: its points change only by being
    appended within one), a whole-range downsample asks the database only for the buckets
    that can still have changed (downsample_live); `growing` (the run is not finished) gives
    it power-of-two bucket widths, so between half and all of max_points points.
    """
    if max_points is not None and max_points < MIN_MAX_POINTS:
        raise ValueError(
            f"max_points must be at least {MIN_MAX_POINTS} (the two ends, one bucket's min and max)"
        )
    conn = session.connection()
    whole_range = step_min is None and step_max is None
    if max_points is not None and generation is not None and whole_range:
        return _read_live(
            conn,
            run_id=run_id,
            keys=keys,
            max_points=max_points,
            generation=generation,
            growing=growing,
            with_time=with_time,
        )
    in_range = [Metric.key_id == MetricKey.id]
    if step_min is not None:
        in_range.append(Metric.step >= step_min)
    if step_max is not None:
        in_range.append(Metric.step <= step_max)
    columns: list[Any] = [MetricKey.id, MetricKey.key]
    if max_points is not None:
        columns += [
            _step_past(in_range, max_points).scalar_subquery(),
            select(func.min(Metric.step)).where(*in_range).scalar_subquery(),
            select(func.max(Metric.step)).where(*in_range).scalar_subquery(),
        ]
    result: Series = {}
    for row in conn.execute(_keys_of(run_id, keys, columns)).all():
        key_id, key = row[0], row[1]
        if max_points is not None and row[2] is not None:
            steps, values, times = downsample_timed(
                conn, key_id=key_id, lo=row[3], hi=row[4], max_points=max_points
            )
        else:
            steps, values, times = _whole_series(
                conn, key_id=key_id, step_min=step_min, step_max=step_max, with_time=with_time
            )
        _add(result, key, steps, values, times, with_time)
    return result


def _read_live(
    conn: Connection,
    *,
    run_id: int,
    keys: Sequence[str] | None,
    max_points: int,
    generation: int,
    growing: bool,
    with_time: bool,
) -> Series:
    """read_series of whole series of one generation: first and last steps in one statement;
    whether a series holds more than max_points points is decided by its step span when it
    is short (steps are unique), by what an earlier read found out, and only else by a probe
    (which walks max_points index entries: half of a warm read's time on PostgreSQL)."""
    result: Series = {}
    for _run_id, key_id, key, lo, hi, origin in conn.execute(_spans([run_id], keys)).all():
        steps, values, times = _live_series(
            conn,
            key_id=key_id,
            lo=lo,
            hi=hi,
            origin=origin,
            max_points=max_points,
            generation=generation,
            growing=growing,
        )
        _add(result, key, steps, values, times, with_time)
    return result


@dataclass(frozen=True)
class LiveRun:
    """A run whose whole series `read_runs_series` reads: its attempt (the generation of its
    points) and whether it still grows (not finished)."""

    id: int
    generation: int
    growing: bool


def read_runs_series(
    session: Session,
    *,
    runs: Sequence[LiveRun],
    keys: Sequence[str],
    max_points: int,
    with_time: bool = False,
) -> dict[int, Series]:
    """read_series(run_id=..., keys=keys, max_points=max_points, generation=..., growing=...)
    of many runs, with every run's series found, first and last steps, in one statement (a
    statement per run was most of a warm 100-run overlay's time). {run id: series}, a run
    without any of `keys` has {}."""
    if max_points < MIN_MAX_POINTS:
        raise ValueError(
            f"max_points must be at least {MIN_MAX_POINTS} (the two ends, one bucket's min and max)"
        )
    conn = session.connection()
    by_id = {run.id: run for run in runs}
    result: dict[int, Series] = {run.id: {} for run in runs}
    if not by_id or not keys:
        return result
    for run_id, key_id, key, lo, hi, origin in conn.execute(_spans(list(by_id), keys)).all():
        run = by_id[run_id]
        steps, values, times = _live_series(
            conn,
            key_id=key_id,
            lo=lo,
            hi=hi,
            origin=origin,
            max_points=max_points,
            generation=run.generation,
            growing=run.growing,
        )
        _add(result[run_id], key, steps, values, times, with_time)
    return result


def _spans(run_ids: list[int], keys: Sequence[str] | None) -> Any:
    """(run id, key id, key, first step, last step, the first point's wall time) of the runs'
    keys (all, or `keys`): primary-key lookups only."""
    in_range = [Metric.key_id == MetricKey.id]
    first = aliased(Metric)
    stmt = select(
        MetricKey.run_id,
        MetricKey.id,
        MetricKey.key,
        select(func.min(Metric.step)).where(*in_range).scalar_subquery(),
        select(func.max(Metric.step)).where(*in_range).scalar_subquery(),
        select(Metric.wall_time)
        .where(
            *in_range,
            Metric.step
            == select(func.min(first.step))
            .where(first.key_id == MetricKey.id)
            .correlate(MetricKey)
            .scalar_subquery(),
        )
        .scalar_subquery(),
    ).where(MetricKey.run_id.in_(run_ids))
    if keys is not None:
        stmt = stmt.where(MetricKey.key.in_(list(keys)))
    return stmt.order_by(MetricKey.run_id, MetricKey.key)


def _live_series(
    conn: Connection,
    *,
    key_id: int,
    lo: int | None,
    hi: int | None,
    origin: float | None,
    max_points: int,
    generation: int,
    growing: bool,
) -> tuple[list[int], list[float | None], list[float]]:
    """One whole series of a generation, downsampled when longer than max_points. `origin`
    (its first point's wall time) tells it from an older series with the same key id."""
    if lo is None or hi is None or origin is None:
        return [], [], []
    series: dict[str, Any] = {
        "key_id": key_id, "lo": lo, "generation": generation, "origin": origin
    }  # fmt: skip
    if hi - lo + 1 > OVERVIEW_SPAN:
        found = _overview_view(conn, key_id=key_id, max_points=max_points)
        if found is not None:
            return found
    longer = hi - lo + 1 > max_points and (
        known_longer_than(conn, **series, count=max_points)
        or _probe_longer_than(conn, **series, count=max_points)
    )
    if longer:
        return downsample_live(
            conn,
            key_id=key_id,
            lo=lo,
            hi=hi,
            max_points=max_points,
            generation=generation,
            origin=origin,
            growing=growing,
        )
    steps, values, times = _whole_series(
        conn, key_id=key_id, step_min=None, step_max=None, with_time=True
    )
    keep_whole(conn, **series, steps=steps, values=values, times=times)
    return steps, values, times


def _overview_view(
    conn: Connection, *, key_id: int, max_points: int
) -> tuple[list[int], list[float | None], list[float]] | None:
    """The series' view from its stored overview (None: it has none yet): each bucket's min
    and max point and the two ends, as the SQL downsample keeps them, so no spike is lost."""
    # numpy: not in an idle process (tests/test_job_imports.py)
    from app.metrics.overview import points as overview
    from app.metrics.overview.stored import read_overviews

    found = read_overviews(conn, [key_id]).get(key_id)
    if found is None:
        return None
    width, points = found
    return overview.view(width, points, max_points).lists()


def _probe_longer_than(
    conn: Connection, *, key_id: int, lo: int, generation: int, origin: float, count: int
) -> bool:
    found = conn.execute(_step_past([Metric.key_id == key_id], count)).scalar() is not None
    if found:
        note_longer_than(
            conn, key_id=key_id, lo=lo, generation=generation, origin=origin, count=count
        )
    return found


def _step_past(where: list[Any], count: int) -> Any:
    """The (count + 1)-th step, which exists only when the series must be downsampled: a
    bounded index scan, where count(*) would walk the whole series."""
    return select(Metric.step).where(*where).order_by(Metric.step).offset(count).limit(1)


def _keys_of(run_id: int, keys: Sequence[str] | None, columns: list[Any]) -> Any:
    stmt = select(*columns).where(MetricKey.run_id == run_id).order_by(MetricKey.key)
    if keys is not None:
        stmt = stmt.where(MetricKey.key.in_(list(keys)))
    return stmt


def _add(
    result: Series,
    key: str,
    steps: list[int],
    values: list[float | None],
    times: list[float],
    with_time: bool,
) -> None:
    result[key] = {"step": steps, "value": json_values(values)}
    if with_time:
        result[key]["time"] = times


def _whole_series(
    conn: Connection,
    *,
    key_id: int,
    step_min: int | None,
    step_max: int | None,
    with_time: bool = False,
) -> tuple[list[int], list[float | None], list[float]]:
    """One series straight from the driver: building SQLAlchemy rows doubles a long read.
    The times are only read with with_time (else the list is empty)."""
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    columns = "step, value, wall_time" if with_time else "step, value"
    sql = f"SELECT {columns} FROM metrics WHERE key_id = {mark}"
    params: list[int] = [key_id]
    if step_min is not None:
        sql += f" AND step >= {mark}"
        params.append(step_min)
    if step_max is not None:
        sql += f" AND step <= {mark}"
        params.append(step_max)
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql + " ORDER BY step", params)
        rows = cursor.fetchall()
    finally:
        cursor.close()
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows] if with_time else []
