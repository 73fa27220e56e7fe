"""Spike-preserving downsampling of one series, done inside the database.

Reading 500k rows into Python costs ~0.5 s, so the database does the bucketing: the step range
[lo, hi] is cut into buckets of `width` steps and each bucket yields the point with its smallest
and the point with its largest value, at their real steps. A single-step spike is the max (or
min) of its bucket, so it always survives. NULL (non-finite) values lose against any finite
value; a bucket holding only NULLs yields a NULL point, so the chart keeps the gap. The view's
first and last points (the series' ends, or the range's) are always in it too (`with_ends`):
a bucket's extremes are rarely at its edges, and a chart then started late and ended early
(a 2,000-point view of 1M points covered steps 41 to 999,634). Two of max_points are kept for
them, so a view is still at most max_points points.

Each dialect gets the shape that measured fastest on it (500k points, 1,000 buckets):
- SQLite: a recursive CTE lists the buckets; per bucket, two correlated subqueries use SQLite's
  documented bare-column rule (`SELECT min(value), step` gives the step of the min row), each
  an index range scan on the (key_id, step) primary key; a bucket of NULLs only (where the
  bare column is an arbitrary row's) gets its first step, as on PostgreSQL. No sort and no
  temp b-tree, unlike a GROUP BY on the bucket expression (~2x slower).
- PostgreSQL: per bucket (generate_series + LATERAL), min(value) and max(value) in one index
  range scan, then the first step holding each, found by a scan that stops at the match.
  ~1.5 passes over the rows, with a plan that stays on the primary key even before ANALYZE.
  Measured slower: `min(ARRAY[value, step])` (building an array per row costs more than the
  scan; and without statistics the planner sorts all rows to disk for the GROUP BY), top-1
  ORDER BY value LIMIT 1 per bucket (two full passes), DISTINCT ON and window functions
  (sort every row).
"""

from __future__ import annotations

import re

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
            coalesce(
                (SELECT step FROM (
                    SELECT min(value) AS lo_value, step FROM metrics
                    WHERE key_id = :key_id AND step >= b0 AND step < b0 + :width AND step <= :hi
                ) WHERE lo_value IS NOT NULL),
                -- Only NULLs: the bare column would be an arbitrary row's; take the first.
                (SELECT min(step) FROM metrics
                 WHERE key_id = :key_id AND step >= b0 AND step < b0 + :width AND step <= :hi)
            ) AS lo_step,
            (SELECT step FROM (
                SELECT max(value) AS hi_value, step FROM metrics
                WHERE key_id = :key_id AND step >= b0 AND step < b0 + :width AND step <= :hi
            ) WHERE hi_value IS NOT NULL) AS hi_step
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


# The smallest view: the two ends, and one bucket's min and max.
MIN_MAX_POINTS = 4

Points = tuple[list[int], list[float | None], list[float]]


def bucket_width(lo: int, hi: int, max_points: int) -> int:
    """Steps per bucket so that ceil(span / width) buckets x 2 points + the 2 ends <=
    max_points."""
    buckets = max((max_points - 2) // 2, 1)
    return max(-(-(hi - lo + 1) // buckets), 1)


def downsample_timed(conn: Connection, *, key_id: int, lo: int, hi: int, max_points: int) -> Points:
    """Per-bucket min and max points of one series between steps lo and hi (both present),
    and those two, with each kept point's wall time (the run page's time axis)."""
    width = bucket_width(lo, hi, max_points)
    return with_ends(
        conn,
        key_id=key_id,
        lo=lo,
        hi=hi,
        points=bucket_extremes(conn, key_id=key_id, start=lo, hi=hi, width=width),
    )


def with_ends(conn: Connection, *, key_id: int, lo: int, hi: int, points: Points) -> Points:
    """`points` (bucket extremes between lo and hi, in step order) with the points at lo and
    hi added when they are not there yet: one primary-key lookup of at most two rows, and only
    then. The live cache keeps a view with its ends only together with the last step it was
    made for (app/metrics/live_downsample.py): the series' end moves on as it grows."""
    steps, values, times = points
    wanted = [s for s, held in ((lo, steps[:1]), (hi, steps[-1:])) if held != [s]]
    if not wanted:
        return points
    ends = {
        step: (value, wall_time)
        for step, value, wall_time in conn.execute(
            _ENDS, {"key_id": key_id, "lo": wanted[0], "hi": wanted[-1]}
        )
    }
    steps, values, times = list(steps), list(values), list(times)
    if lo in ends and (not steps or steps[0] != lo):
        steps.insert(0, lo)
        values.insert(0, ends[lo][0])
        times.insert(0, ends[lo][1])
    if hi in ends and (not steps or steps[-1] != hi):
        steps.append(hi)
        values.append(ends[hi][0])
        times.append(ends[hi][1])
    return steps, values, times


# The two ends (or one: lo == hi), by the (key_id, step) primary key.
_ENDS = text(
    "SELECT step, value, wall_time FROM metrics"
    " WHERE key_id = :key_id AND (step = :lo OR step = :hi)"
)


def bucket_extremes(conn: Connection, *, key_id: int, start: int, hi: int, width: int) -> Points:
    """The buckets' extremes, straight from the driver: SQLAlchemy's rows cost about as much
    as the SQL for a 300-point view (the overlay reads 200 of them)."""
    params = {"key_id": key_id, "start": start, "hi": hi, "width": width}
    # On PostgreSQL, 1,000 lateral loops trip JIT (~100 ms of compiling): make_engine turns
    # JIT off for every connection.
    sql = _POSTGRES_SQL if conn.dialect.name == "postgresql" else _SQLITE.text
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    finally:
        cursor.close()
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


# The same statement in the driver's own placeholders (psycopg: %(name)s; sqlite3 takes :name).
_POSTGRES_SQL = re.sub(r"(?<!:):(\w+)", r"%(\1)s", _POSTGRES.text)
