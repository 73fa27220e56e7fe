"""Spike-preserving downsampling of one series, done inside the database.

Reading 500k rows into Python costs ~0.5 s, so the database does the bucketing: the step range
[lo, hi] is cut into buckets of `width` steps and each bucket yields the point with its smallest
and the point with its largest value, at their real steps. A single-step spike is the max (or
min) of its bucket, so it always survives. NULL (non-finite) values lose against any finite
value; a bucket holding only NULLs yields a NULL point, so the chart keeps the gap.

Each dialect gets the shape that measured fastest on it (500k points, 1,000 buckets):
- SQLite: a recursive CTE lists the buckets; per bucket, two correlated subqueries use SQLite's
  documented bare-column rule (`SELECT min(value), step` gives the step of the min row), each
  an index range scan on the (key_id, step) primary key. No sort and no temp b-tree, unlike a
  GROUP BY on the bucket expression (~2x slower).
- PostgreSQL: per bucket (generate_series + LATERAL), min(value) and max(value) in one index
  range scan, then the first step holding each, found by a scan that stops at the match.
  ~1.5 passes over the rows, with a plan that stays on the primary key even before ANALYZE.
  Measured slower: `min(ARRAY[value, step])` (building an array per row costs more than the
  scan; and without statistics the planner sorts all rows to disk for the GROUP BY), top-1
  ORDER BY value LIMIT 1 per bucket (two full passes), DISTINCT ON and window functions
  (sort every row).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import Connection, text

# Buckets [b0, b0 + width) from start (lo, or a later bucket's start) while b0 <= hi; the last
# one is clipped to hi.
_SQLITE = text(
    """
    WITH RECURSIVE buckets(b0) AS (
        SELECT :start
        UNION ALL
        SELECT b0 + :width FROM buckets WHERE b0 + :width <= :hi
    ),
    extremes AS MATERIALIZED (
        SELECT
            (SELECT step FROM (
                SELECT min(value), step FROM metrics
                WHERE key_id = :key_id AND step >= b0 AND step < b0 + :width AND step <= :hi
            )) AS lo_step,
            (SELECT step FROM (
                SELECT max(value), step FROM metrics
                WHERE key_id = :key_id AND step >= b0 AND step < b0 + :width AND step <= :hi
            )) AS hi_step
        FROM buckets
    )
    SELECT step, value, wall_time FROM metrics
    WHERE key_id = :key_id
      AND step IN (SELECT lo_step FROM extremes UNION SELECT hi_step FROM extremes)
    ORDER BY step
    """
)

_PG_BUCKET = "key_id = :key_id AND step >= b0 AND step < b0 + :width AND step <= :hi"
_POSTGRES = text(
    f"""
    SELECT x.step, x.value, x.wall_time
    FROM generate_series(CAST(:start AS BIGINT), CAST(:hi AS BIGINT), CAST(:width AS BIGINT)) AS b0
    CROSS JOIN LATERAL (
        SELECT min(value) AS lo_value, max(value) AS hi_value FROM metrics WHERE {_PG_BUCKET}
    ) AS extremes
    CROSS JOIN LATERAL (
        (SELECT step, value, wall_time FROM metrics
         WHERE {_PG_BUCKET} AND value IS NOT DISTINCT FROM extremes.lo_value
         ORDER BY step LIMIT 1)
        UNION
        (SELECT step, value, wall_time FROM metrics
         WHERE {_PG_BUCKET} AND value = extremes.hi_value
         ORDER BY step LIMIT 1)
    ) AS x
    ORDER BY x.step
    """
)


def bucket_width(lo: int, hi: int, max_points: int) -> int:
    """Steps per bucket so that ceil(span / width) buckets x 2 points <= max_points."""
    buckets = max(max_points // 2, 1)
    return max(-(-(hi - lo + 1) // buckets), 1)


def downsample(
    conn: Connection, *, key_id: int, lo: int, hi: int, max_points: int
) -> tuple[list[int], list[float | None]]:
    """Per-bucket min and max points of one series between steps lo and hi (both present)."""
    steps, values, _times = downsample_timed(
        conn, key_id=key_id, lo=lo, hi=hi, max_points=max_points
    )
    return steps, values


def downsample_timed(
    conn: Connection, *, key_id: int, lo: int, hi: int, max_points: int
) -> tuple[list[int], list[float | None], list[float]]:
    """`downsample`, plus each kept point's wall time (the run page's time axis)."""
    return _buckets(conn, key_id=key_id, start=lo, hi=hi, width=bucket_width(lo, hi, max_points))


def _buckets(
    conn: Connection, *, key_id: int, start: int, hi: int, width: int
) -> tuple[list[int], list[float | None], list[float]]:
    params = {"key_id": key_id, "start": start, "hi": hi, "width": width}
    # On PostgreSQL, 1,000 lateral loops trip JIT (~100 ms of compiling): make_engine turns
    # JIT off for every connection.
    postgres = conn.dialect.name == "postgresql"
    steps: list[int] = []
    values: list[float | None] = []
    times: list[float] = []
    for step, value, wall_time in conn.execute(_POSTGRES if postgres else _SQLITE, params):
        steps.append(step)
        values.append(value)
        times.append(wall_time)
    return steps, values, times


# --- live series: only the buckets that can still change -------------------------------------
#
# A live run's page (and every viewer's) asks for the same downsampled series again and again
# while points are appended at its end. The bucket width stays the same while the series
# grows (`live_width` keeps it for ~10% of growth), and every bucket but the last is then
# final: its min and max cannot change. So the final buckets' points are kept
# per (database, key, first step, width, generation) and only the buckets from the last one
# on are asked from the database. `generation` changes whenever a run's points may change
# other than by appending (a requeued attempt drops the points past its checkpoint).


@dataclass
class _Final:
    until: int  # buckets starting before this step are final
    steps: list[int]
    values: list[float | None]
    times: list[float]


_FINAL: OrderedDict[tuple[str, int, int, int, int], _Final] = OrderedDict()
_FINAL_LOCK = threading.Lock()
MAX_CACHED_SERIES = 64  # each holds at most max_points points


def live_width(lo: int, hi: int, max_points: int) -> int:
    """The exact width rounded up to the next rung of a ladder 10% apart: the width (and with
    it every cached bucket) then changes only each time the series grows by ~10%, not each
    time it grows by a bucket count of steps, for at least ~90% of max_points points."""
    exact = bucket_width(lo, hi, max_points)
    width = 1
    while width < exact:
        width = max(width + 1, int(width * 1.1))
    return width


def downsample_live(
    conn: Connection, *, key_id: int, lo: int, hi: int, max_points: int, generation: int
) -> tuple[list[int], list[float | None], list[float]]:
    """Like `downsample_timed` (with `live_width` buckets), asking the database only for the
    buckets that may have changed since the last call."""
    width = live_width(lo, hi, max_points)
    last = lo + ((hi - lo) // width) * width  # the last bucket's start: it may still grow
    cache_key = (str(conn.engine.url), key_id, lo, width, generation)
    with _FINAL_LOCK:
        final = _FINAL.get(cache_key)
        if final is not None:
            _FINAL.move_to_end(cache_key)
    start = final.until if final is not None and final.until <= last else lo
    steps, values, times = _buckets(conn, key_id=key_id, start=start, hi=hi, width=width)
    if start > lo and final is not None:
        steps = final.steps + steps
        values = final.values + values
        times = final.times + times
    cut = bisect.bisect_left(steps, last)
    with _FINAL_LOCK:
        _FINAL[cache_key] = _Final(last, steps[:cut], values[:cut], times[:cut])
        _FINAL.move_to_end(cache_key)
        while len(_FINAL) > MAX_CACHED_SERIES:
            _FINAL.popitem(last=False)
    return steps, values, times


def clear_live_cache() -> None:
    with _FINAL_LOCK:
        _FINAL.clear()
