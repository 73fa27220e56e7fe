"""Each series' overview, kept at ingest, so an overlay of many runs reads one row per series.

Why: the overlays (compare, the experiment page's curves) downsample every series they show,
and a fresh server had nothing kept (the live cache of app/metrics/live_downsample.py lives in
one process): its first overlay of 100 runs x 2 keys x 10k points was 1-3 s of bucket queries
over the points (issue 31, item 8). The overview is stored beside the points, in the same
transaction, so every server process reads it at once, before any cache is warm.

What (app.metrics.models.MetricOverview): the series' first and last points, and the min and
the max point of each bucket of `width` steps, buckets aligned on multiples of `width` (a
power of two). A NULL (non-finite) value loses against any finite value, ties go to the
earliest step, and a bucket of NULLs only keeps its first point: the rules of the SQL
downsample (app/metrics/downsample.py). When more than MAX_BUCKETS buckets hold points the
width doubles: a bucket of 2w is two buckets of w, so its extremes are among theirs and the
wider overview is exact without reading a point again. At width 1 it holds every point.

Kept by ingest after each batch's insert (``update_overviews``): from the batch's rows when
every one was stored (the normal case: app.metrics.overview_batch extends every key's overview
in one pass); when some were not (a replayed spool, a repeated step:
the first point of a step is the one kept), from the points stored in the batch's step range,
read back; merging a point the overview already has changes nothing. A series without an
overview yet is built from all its points (from the batch alone when its summary shows no
earlier point). Existing overview rows are locked for the merge on PostgreSQL; a series'
first overview is not (one forwarder writes a run's spool keys at a time). A requeued run
loses its points past the checkpoint: ``drop_overviews`` forgets its series' overviews, and
the next batch of each builds it again from what is left.

A view for max_points (``view``): the smallest width, the overview's times a power of two,
whose buckets between the first and the last step number at most (max_points - 2) // 2; those
buckets' extremes and the two ends. At most max_points points; between half and all of them
for a series without long gaps in its steps (as a growing series' live view).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Connection, delete, select
from sqlalchemy.orm import Session

from app.metrics.models import MetricKey, MetricOverview

if TYPE_CHECKING:
    from app.metrics.overview_batch import Batch

# Buckets holding points, at most: <= 2 x 1024 + 2 points, ~49 KB a series.
MAX_BUCKETS = 1024
# The largest view answered from an overview: with 1024 buckets kept, a view of up to 1,000
# points (499 buckets) is still at least half of what it asks for. The overlay asks 30,000 /
# runs points a curve (app/static/overlay.js): 300 at 100 runs, 1,000 from 30 runs down.
MAX_VIEW_POINTS = 1000
_CHUNK = 500  # key ids per IN (...)

Row = tuple[int, int, float | None, float]  # key id, step, value, wall time
_ROW = np.dtype([("key", "<i8"), ("step", "<i8"), ("value", "<f8"), ("time", "<f8")])


class Points:
    """Points in step order, each step once: steps (int64), values (float64, NaN for NULL:
    stored values are finite or NULL, never NaN) and wall times (float64)."""

    __slots__ = ("steps", "values", "times")

    def __init__(
        self,
        steps: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
        times: npt.NDArray[np.float64],
    ) -> None:
        self.steps, self.values, self.times = steps, values, times

    def __len__(self) -> int:
        return len(self.steps)

    def take(self, index: npt.NDArray[np.intp]) -> Points:
        return Points(self.steps[index], self.values[index], self.times[index])

    def lists(self) -> tuple[list[int], list[float | None], list[float]]:
        """As the series reads return them: NULL for NaN."""
        values = [None if v != v else v for v in self.values.tolist()]  # NaN != NaN
        return self.steps.tolist(), values, self.times.tolist()


def encode(points: Points) -> bytes:
    return b"".join(
        (
            points.steps.astype("<i8").tobytes(),
            points.values.astype("<f8").tobytes(),
            points.times.astype("<f8").tobytes(),
        )
    )


def decode(data: bytes) -> Points:
    n = len(data) // 24
    return Points(
        np.frombuffer(data, dtype="<i8", count=n).astype(np.int64),
        np.frombuffer(data, dtype="<f8", count=n, offset=8 * n).astype(np.float64),
        np.frombuffer(data, dtype="<f8", count=n, offset=16 * n).astype(np.float64),
    )


def extremes(points: Points, width: int, *, first: bool = True) -> Points:
    """Each bucket's min and max points and the two ends (see the module's rules); without
    `first`, the first point only where it is an extreme (the points are a series' tail)."""
    n = len(points)
    if n <= 2 and first:
        return points
    bucket = points.steps // width
    starts = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    null = np.isnan(points.values)
    low = np.where(null, np.inf, points.values)
    high = np.where(null, -np.inf, points.values)
    is_min = low == np.minimum.reduceat(low, starts)[group]  # all NULL: every point, take 1st
    is_max = (high == np.maximum.reduceat(high, starts)[group]) & ~null
    keep = np.concatenate((_first_per_group(is_min, group), _first_per_group(is_max, group)))
    return points.take(np.unique(np.concatenate((keep, [0, n - 1] if first else [n - 1]))))


def _first_per_group(mask: npt.NDArray[np.bool_], group: npt.NDArray[Any]) -> npt.NDArray[Any]:
    index = np.flatnonzero(mask)
    of = group[index]
    return index[np.concatenate(([True], of[1:] != of[:-1]))] if len(index) else index


def _buckets(steps: npt.NDArray[np.int64], width: int) -> int:
    """How many buckets of `width` hold points."""
    bucket = steps // width
    return 1 + int(np.count_nonzero(bucket[1:] != bucket[:-1])) if len(bucket) else 0


def fit(points: Points, width: int) -> tuple[int, Points]:
    """The overview of `points` (raw points, or an overview at `width` merged with raw
    points): their extremes at `width`, doubled until at most MAX_BUCKETS buckets hold
    points."""
    if width == 1 and len(points) <= MAX_BUCKETS:  # each point is its own bucket's extremes
        return 1, points
    while _buckets(points.steps, width) > MAX_BUCKETS:
        width *= 2
    return width, extremes(points, width)


def extend(width: int, old: Points, new: Points) -> tuple[int, Points]:
    """``fit(merge(old, new), width)`` for points `new` that all come after `old`'s last step
    (the normal batch), looking again only at `old`'s last bucket: the buckets before it keep
    their extremes, and an overview's points are their own extremes. A batch of 1,000 points
    into a long series was 2,000 points sorted and bucketed per key before (issue 29)."""
    cut = int(np.searchsorted(old.steps, old.steps[-1] // width * width))
    tail = extremes(
        Points(
            np.concatenate((old.steps[cut:], new.steps)),
            np.concatenate((old.values[cut:], new.values)),
            np.concatenate((old.times[cut:], new.times)),
        ),
        width,
        first=cut == 0,
    )
    points = Points(
        np.concatenate((old.steps[:cut], tail.steps)),
        np.concatenate((old.values[:cut], tail.values)),
        np.concatenate((old.times[:cut], tail.times)),
    )
    if _buckets(points.steps, width) > MAX_BUCKETS:
        return fit(points, width)
    return width, points


def merge(old: Points, new: Points) -> Points:
    """Both sets of points in step order, a step held by both once (the old point: a stored
    point never changes). Appended points (the normal case) are only put after the old."""
    if not len(old) or not len(new) or new.steps[0] > old.steps[-1]:
        return Points(
            np.concatenate((old.steps, new.steps)),
            np.concatenate((old.values, new.values)),
            np.concatenate((old.times, new.times)),
        )
    steps = np.concatenate((old.steps, new.steps))
    _, first = np.unique(steps, return_index=True)
    values = np.concatenate((old.values, new.values))
    return Points(steps, values, np.concatenate((old.times, new.times))).take(first)


def view(width: int, points: Points, max_points: int) -> Points:
    """The series downsampled to at most max_points points (module docstring), for
    max_points up to MAX_VIEW_POINTS: a series of at most max_points points goes whole (a
    width-1 overview holds them all; a wider one means more than MAX_BUCKETS points)."""
    if not len(points) or (width == 1 and len(points) <= max_points):
        return points
    budget = max((max_points - 2) // 2, 1)
    first, last = int(points.steps[0]), int(points.steps[-1])
    wide = width
    while last // wide - first // wide + 1 > budget:
        wide *= 2
    return extremes(points, wide) if wide != width else points


# --- kept at ingest ------------------------------------------------------------------------


def update_overviews(
    session: Session, *, key_ids: Collection[int], batch: Batch | None, lo: int, hi: int
) -> None:
    """Merge a batch into its keys' overviews. `batch`: the batch's rows, when every one was
    stored; None when some were not, and then the points stored between steps lo and hi
    are read back instead."""
    if not key_ids:
        return
    from app.metrics.overview_batch import extend_kept  # imports this module

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
        appended = _appended(data, points) if width == 1 else None
        if appended is not None:
            raw[key_id] = (1, appended)
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


def _appended(data: bytes, points: Points) -> bytes | None:
    """A width-1 overview (every point) with `points` appended, still under MAX_BUCKETS
    points, spliced as bytes (no array built: a batch of 10,000 keys' next step was 2x the
    ingest's time with a decode, merge and encode per key); None when that does not apply."""
    n = len(data) // 24
    if not n or n + len(points) > MAX_BUCKETS:
        return None
    if int.from_bytes(data[8 * n - 8 : 8 * n], "little", signed=True) >= int(points.steps[0]):
        return None
    return b"".join(
        (
            data[: 8 * n],
            points.steps.astype("<i8").tobytes(),
            data[8 * n : 16 * n],
            points.values.astype("<f8").tobytes(),
            data[16 * n :],
            points.times.astype("<f8").tobytes(),
        )
    )


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
