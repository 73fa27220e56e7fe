"""The live stream's reads: a window of a run's keys, and the points past a client's position.

Split from app.metrics.service (which re-exports these) so that the stream's bounded reads live
in one place: every viewer runs them several times a second, and their cost must follow what
they return, not the run's size or its backlog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from app.metrics.finite import json_values
from app.metrics.models import MetricKey

Series = dict[str, dict[str, list[Any]]]

NEW_POINTS_LIMIT = 20_000
_NO_STEP = -(2**63)  # below any step: every point of a key the client has not seen


def key_window(
    session: Session, *, run_id: int, start: str | None, inclusive: bool, max_keys: int
) -> list[str]:
    """Up to `max_keys` of the run's keys in key order from `start` (all from the first when
    None): the live stream reads a run with many keys a window at a time, so one poll's work
    is bounded however many keys a job logged (an index range on (run_id, key))."""
    stmt = select(MetricKey.key).where(MetricKey.run_id == run_id)
    if start is not None:
        stmt = stmt.where(MetricKey.key >= start if inclusive else MetricKey.key > start)
    return list(session.scalars(stmt.order_by(MetricKey.key).limit(max_keys)))


def read_new_points(
    session: Session,
    *,
    run_id: int,
    after: Mapping[str, int],
    limit: int = NEW_POINTS_LIMIT,
    keys: tuple[str, str] | None = None,
) -> Series:
    """Points past each key's last seen step, for the live stream.

    {key: {"step", "value", "time"}} holds, per key, the points with step > after[key] (every
    point for a key not in `after`), in step order; keys with nothing new are left out. At most
    `limit` points in all, key by key in key order: a client catching up on a long run gets it
    in bounded chunks. `keys` (first, last) limits the read to that key range (a window from
    `key_window`).

    The work follows `limit`, not the backlog. A viewer that is behind (its keys' new steps,
    from each key's summary `last_step`, may hold more than `limit` points) reads each key as an
    index range with its own LIMIT (a UNION ALL, a few hundred keys a statement) and stops once
    `limit` points are in. The one statement over the join with a per-key CASE bound, which a
    viewer that keeps up still uses (cheapest when there is little to read), let PostgreSQL
    read every new point of every key and sort them all to keep `limit`: 0.5-1 s a poll behind
    by 500k points, so a viewer that fell behind a flooding run fell further behind with every
    poll (bench/flood.py; docs/performance.md). The summary only picks the way: a stale
    `last_step` makes a poll slower, never wrong.
    """
    stmt = select(MetricKey.id, MetricKey.key, MetricKey.last_step).where(
        MetricKey.run_id == run_id
    )
    if keys is not None:
        stmt = stmt.where(MetricKey.key >= keys[0], MetricKey.key <= keys[-1])
    rows = session.execute(stmt.order_by(MetricKey.key)).all()
    if not rows:
        return {}
    if _new_steps(rows, after) <= limit:
        return _read_joined(session, run_id=run_id, after=after, limit=limit, keys=keys)
    key_ids = [(r.id, r.key) for r in rows]
    result: Series = {}
    left = limit
    conn = session.connection()
    for start in range(0, len(key_ids), _KEYS_PER_READ):
        chunk = key_ids[start : start + _KEYS_PER_READ]
        sql, params = _per_key_sql(conn, chunk, after, left)
        points = _driver_rows(conn, sql, params)
        # Each key's part comes out whole and in step order (a non-parallel UNION ALL reads its
        # parts one after the other); grouped by key id, then named in the window's key order.
        by_id: dict[int, list[Any]] = {}
        for point in points:
            by_id.setdefault(point[0], []).append(point)
        for key_id, key in chunk:
            if key_id in by_id:
                result[key] = _series(by_id[key_id])
        left -= len(points)
        if left <= 0:
            break
    return result


def _new_steps(rows: Sequence[Any], after: Mapping[str, int]) -> float:
    """An upper bound of the new points (steps are unique per key): each key's steps past the
    client's; unbounded for a key the client has not seen yet (its first step is unknown)."""
    total = 0.0
    for row in rows:
        if row.last_step is None:
            continue  # no point stored yet, as far as the summary knows
        if row.key not in after:
            return float("inf")
        total += max(0, row.last_step - after[row.key])
    return total


def _series(points: Sequence[Any]) -> dict[str, list[Any]]:
    return {
        "step": [p[1] for p in points],
        "value": json_values([p[2] for p in points]),
        "time": [p[3] for p in points],
    }


def _read_joined(
    session: Session,
    *,
    run_id: int,
    after: Mapping[str, int],
    limit: int,
    keys: tuple[str, str] | None,
) -> Series:
    """read_new_points in one statement (every live viewer runs this several times a second;
    a query per key cost a round trip and a statement's Python overhead each)."""
    conn = session.connection()
    mark = _mark(conn)
    params: list[Any] = [run_id]
    if after:
        whens = " ".join(f"WHEN {mark} THEN {mark}" for _ in after)
        bound = f"CASE k.key {whens} ELSE {mark} END"
        for key, step in after.items():
            params += [key, step]
    else:
        bound = mark
    params.append(_NO_STEP)
    sql = (
        "SELECT k.key, m.step, m.value, m.wall_time FROM metric_keys k"
        f" JOIN metrics m ON m.key_id = k.id WHERE k.run_id = {mark} AND m.step > {bound}"
    )
    if keys is not None:
        sql += f" AND k.key >= {mark} AND k.key <= {mark}"
        params += [keys[0], keys[-1]]
    sql += f" ORDER BY k.key, m.step LIMIT {mark}"
    params.append(limit)
    rows = _driver_rows(conn, sql, params)
    return {key: _series(list(group)) for key, group in groupby(rows, itemgetter(0))}


# Keys one statement of read_new_points reads (SQLite allows 500 terms in a compound SELECT).
_KEYS_PER_READ = 250


def _per_key_sql(
    conn: Connection, key_ids: Sequence[Any], after: Mapping[str, int], limit: int
) -> tuple[str, list[Any]]:
    """Up to `limit` new points of these keys, key by key: each key's part reads its index range
    past its last seen step in step order and stops at `limit` (a subquery, since SQLite takes
    no LIMIT on a compound's own terms); the outer LIMIT stops the whole at `limit` points."""
    mark = _mark(conn)
    part = (
        "SELECT * FROM (SELECT key_id, step, value, wall_time FROM metrics"
        f" WHERE key_id = {mark} AND step > {mark} ORDER BY step LIMIT {mark}) AS p{{}}"
    )
    parts = " UNION ALL ".join(part.format(i) for i in range(len(key_ids)))
    params: list[Any] = []
    for key_id, key in key_ids:
        params += [key_id, after.get(key, _NO_STEP), limit]
    return f"SELECT * FROM ({parts}) AS u LIMIT {mark}", [*params, limit]


def _mark(conn: Connection) -> str:
    return "?" if conn.dialect.paramstyle == "qmark" else "%s"


def _driver_rows(conn: Connection, sql: str, params: list[Any]) -> list[Any]:
    """Rows straight from the driver: building SQLAlchemy rows was half a poll's time when a
    viewer catches up (20,000 points a poll; every viewer polls several times a second)."""
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql, params)
        return list(cursor.fetchall())
    finally:
        cursor.close()
