"""The overviews in metric_overviews: kept at ingest after each batch (``update_overviews``),
dropped with a requeued run's points (``drop_overviews``), built from stored points (the
migration that added them), and read (app.metrics.overlay). The rules are
app.metrics.overview.points'; a batch of many keys goes through app.metrics.overview.batch.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import numpy as np
from sqlalchemy import Connection, delete, select
from sqlalchemy.orm import Session

from app.metrics.models import MetricKey, MetricOverview
from app.metrics.overview.batch import Batch, Row, extend_kept
from app.metrics.overview.points import Points, appended, decode, encode, extend, fit, merge

_CHUNK = 500  # key ids per IN (...)
_ROW = np.dtype([("key", "<i8"), ("step", "<i8"), ("value", "<f8"), ("time", "<f8")])


def update_overviews(
    session: Session, *, key_ids: Collection[int], batch: Batch | None, lo: int, hi: int
) -> None:
    """Merge a batch into its keys' overviews. `batch`: the batch's rows, when every one was
    stored; None when some were not, and then the points stored between steps lo and hi
    are read back instead."""
    if not key_ids:
        return
    conn = session.connection()
    kept = _load(conn, key_ids, lock=True)
    fresh = [k for k in key_ids if k not in kept]
    raw: dict[int, tuple[int, bytes]] = {}
    if batch is None:
        new = _by_key(_stored_rows(conn, [k for k in key_ids if k in kept], lo, hi))
    else:
        raw = extend_kept(kept, batch)  # the normal case: every key's points appended
        new = {k: batch.points(i) for i, k in enumerate(batch.ids) if k not in raw}
    written: dict[int, tuple[int, Points]] = {}
    for key_id, (width, data) in kept.items():
        points = new.get(key_id)
        if points is None:
            continue
        spliced = appended(data, points) if width == 1 else None
        if spliced is not None:
            raw[key_id] = (1, spliced)
            continue
        stored = decode(data)
        if len(stored) and points.steps[0] > stored.steps[-1]:
            written[key_id] = extend(width, stored, points)
        else:
            written[key_id] = fit(merge(stored, points), width)
    if batch is not None and fresh:  # a key's first points are this batch: no read back
        first = _without_points(conn, fresh)
        written.update({k: fit(new[k], 1) for k in first if k in new})
        fresh = [k for k in fresh if k not in first]
    written.update(_built(conn, fresh))
    raw.update({k: (w, encode(p)) for k, (w, p) in written.items()})
    _write(conn, raw)


def _without_points(conn: Connection, key_ids: list[int]) -> set[int]:
    """The keys that had no point before this batch: their summary's last step is still
    NULL (ingest updates the summaries after the overviews)."""
    found: set[int] = set()
    for i in range(0, len(key_ids), _CHUNK):
        stmt = select(MetricKey.id).where(
            MetricKey.id.in_(key_ids[i : i + _CHUNK]), MetricKey.last_step.is_(None)
        )
        found.update(conn.execute(stmt).scalars())
    return found


def drop_overviews(session: Session, *, key_ids: Collection[int]) -> None:
    """Forget the overviews of these keys, after some of their points were deleted (a
    requeued attempt's past its checkpoint): an overview cannot lose a point. The next batch
    of each key builds its overview again from all its points, in the ingest that writes
    them (not here: a requeue would read every point of the run with the write lock held);
    until then the overlay reads those series the live way."""
    conn = session.connection()
    ids = list(key_ids)
    for i in range(0, len(ids), _CHUNK):
        conn.execute(delete(MetricOverview).where(MetricOverview.key_id.in_(ids[i : i + _CHUNK])))


def build_overviews(conn: Connection, *, key_ids: list[int]) -> None:
    """Build and store the overviews of these keys from their points (the migration that
    added overviews, for the series stored before)."""
    _write(conn, {k: (w, encode(p)) for k, (w, p) in _built(conn, key_ids).items()})


def _built(conn: Connection, key_ids: list[int]) -> dict[int, tuple[int, Points]]:
    """Overviews of these keys from all their stored points (keys without points: none)."""
    if not key_ids:
        return {}
    return {
        key_id: fit(points, 1)
        for key_id, points in _by_key(_stored_rows(conn, key_ids, None, None)).items()
    }


def _load(
    conn: Connection, key_ids: Iterable[int], *, lock: bool = False
) -> dict[int, tuple[int, bytes]]:
    """{key id: (width, data)} of the keys that have an overview. With `lock` (ingest), the
    rows are locked on PostgreSQL: two writers of one series would each merge into the
    overview they read, and the later write would lose the other's points."""
    ids = list(key_ids)
    found: dict[int, tuple[int, bytes]] = {}
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    lock_clause = " FOR UPDATE" if lock and conn.dialect.name == "postgresql" else ""
    # Straight through the driver, as _stored_rows: the Core statement's own work was a third
    # of an MLflow batch's overview read (issue 29).
    cursor = conn.connection.cursor()
    try:
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i : i + _CHUNK]
            cursor.execute(
                "SELECT key_id, width, data FROM metric_overviews"
                f" WHERE key_id IN ({', '.join([mark] * len(chunk))}){lock_clause}",
                chunk,
            )
            found.update({k: (w, bytes(d)) for k, w, d in cursor.fetchall()})
    finally:
        cursor.close()
    return found


def read_overviews(conn: Connection, key_ids: Iterable[int]) -> dict[int, tuple[int, Points]]:
    """{key id: (width, points)} of the keys that have an overview."""
    return {k: (w, decode(d)) for k, (w, d) in _load(conn, key_ids).items()}


def _stored_rows(conn: Connection, key_ids: list[int], lo: int | None, hi: int | None) -> list[Row]:
    """The stored points of the keys (between lo and hi when given), straight from the
    driver (SQLAlchemy's rows would double a long read)."""
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    rows: list[Row] = []
    cursor = conn.connection.cursor()
    try:
        for i in range(0, len(key_ids), _CHUNK):
            chunk = key_ids[i : i + _CHUNK]
            sql = (
                "SELECT key_id, step, value, wall_time FROM metrics"
                f" WHERE key_id IN ({', '.join([mark] * len(chunk))})"
            )
            params: list[int] = list(chunk)
            if lo is not None and hi is not None:
                sql += f" AND step >= {mark} AND step <= {mark}"
                params += [lo, hi]
            cursor.execute(sql, params)
            rows.extend(cursor.fetchall())
    finally:
        cursor.close()
    return rows


def _by_key(rows: list[Row]) -> dict[int, Points]:
    """Rows grouped by key, each key's in step order and each step once (the first row)."""
    if not rows:
        return {}
    table = np.array(rows, dtype=_ROW)  # None -> NaN
    table = table[np.lexsort((table["step"], table["key"]))]
    keys = table["key"]
    cuts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    result: dict[int, Points] = {}
    for start, end in zip(cuts.tolist(), [*cuts[1:].tolist(), len(table)], strict=True):
        part = table[start:end]
        steps = np.ascontiguousarray(part["step"])
        if len(steps) > 1 and bool(np.any(steps[1:] == steps[:-1])):
            part = part[np.unique(steps, return_index=True)[1]]  # lexsort is stable: the first
            steps = np.ascontiguousarray(part["step"])
        values = np.ascontiguousarray(part["value"])
        result[int(keys[start])] = Points(steps, values, np.ascontiguousarray(part["time"]))
    return result


_UPSERT = (
    "INSERT INTO metric_overviews (key_id, width, data) VALUES ({0}, {0}, {0}) "
    "ON CONFLICT (key_id) DO UPDATE SET width = excluded.width, data = excluded.data"
)


def _write(conn: Connection, overviews: Mapping[int, tuple[int, bytes]]) -> None:
    """The driver's executemany (Core's per-row parameter processing was most of the cost of a
    batch of 10,000 keys)."""
    if not overviews:
        return
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    conn.exec_driver_sql(_UPSERT.format(mark), [(k, w, data) for k, (w, data) in overviews.items()])
