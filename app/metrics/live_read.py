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

from sqlalchemy import case, literal, select, union_all
from sqlalchemy.orm import Session

from app.metrics.models import Metric, MetricKey

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
    for start in range(0, len(key_ids), _KEYS_PER_READ):
        chunk = key_ids[start : start + _KEYS_PER_READ]
        points = session.connection().execute(_per_key_stmt(chunk, after, left)).all()
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
        "value": [p[2] for p in points],
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
    last_seen: Any = (
        case(dict(after), value=MetricKey.key, else_=literal(_NO_STEP))
        if after
        else literal(_NO_STEP)
    )
    stmt = (
        select(MetricKey.key, Metric.step, Metric.value, Metric.wall_time)
        .join(Metric, Metric.key_id == MetricKey.id)
        .where(MetricKey.run_id == run_id, Metric.step > last_seen)
        .order_by(MetricKey.key, Metric.step)
        .limit(limit)
    )
    if keys is not None:
        stmt = stmt.where(MetricKey.key >= keys[0], MetricKey.key <= keys[-1])
    return {
        key: _series(list(group))
        for key, group in groupby(session.connection().execute(stmt), itemgetter(0))
    }


# Keys one statement of read_new_points reads (SQLite allows 500 terms in a compound SELECT).
_KEYS_PER_READ = 250


def _per_key_stmt(key_ids: Sequence[Any], after: Mapping[str, int], limit: int) -> Any:
    """Up to `limit` new points of these keys, key by key: each key's part reads its index range
    past its last seen step in step order and stops at `limit` (a subquery, since SQLite takes
    no LIMIT on a compound's own terms); the outer LIMIT stops the whole at `limit` points."""
    parts = []
    for key_id, key in key_ids:
        part = (
            select(Metric.key_id, Metric.step, Metric.value, Metric.wall_time)
            .where(Metric.key_id == key_id, Metric.step > after.get(key, _NO_STEP))
            .order_by(Metric.step)
            .limit(limit)
            .subquery()
        )
        parts.append(select(part))
    union = union_all(*parts).subquery()
    return select(union).limit(limit)
