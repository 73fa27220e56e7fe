"""Metric ingest: the forwarder's bulk inserts (the reads are in app.metrics.service).

Every function takes the caller's session, flushes at most, and never commits. A point is
(key, step, value, wall_time); the key becomes an integer id per run (metric_keys), a point is
unique per (key id, step) and the first one stored is kept (ON CONFLICT DO NOTHING, so
replaying the spool is harmless); NaN is stored as NULL, +/-inf as they are
(app/metrics/finite.py). Each batch also
updates the summaries of the keys it touched (app.metrics.summary: one aggregate query, one
UPDATE per key), and their overviews (app.metrics.overview: what the overlays of many runs
read instead of the points).

Two entry points with those semantics: ``ingest_steps`` takes metrics lines as the job wrote
them, (step, wall_time, {key: value}), which is the forwarder's hot path: the rows for the
driver are built in one comprehension with integer key ids, no per-point tuple of strings in
between. ``ingest_points`` takes ready points (TensorBoard scalars, tests, benches).

Inserts go around the ORM: Core's per-row parameter processing halves the rate.
- SQLite: the driver's ``executemany`` of a prepared INSERT ... ON CONFLICT DO NOTHING of 200
  rows (Core ``insert().on_conflict_do_nothing()`` executemany was ~280k/s when the driver's
  one-row statement did 330-520k/s; 200 rows per statement took ~15% off the driver's time).
- PostgreSQL: binary COPY straight into metrics in a savepoint; only when that meets a point
  already stored, COPY into a per-connection temp table and one INSERT ... SELECT ... ON
  CONFLICT DO NOTHING (the staged way alone writes every row twice). psycopg's executemany
  was ~25% slower than the staged way, ``unnest()`` of array parameters half as fast.
bench/ingest.py measures the whole path from metrics.jsonl; docs/performance.md has figures.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session
from sqlalchemy.sql import Select

from app.metrics.models import Metric, MetricKey
from app.metrics.summary import update_summaries
from app.ops import counters

Point = tuple[str, int, float | None, float]
# One metrics line: (step, wall_time, {key: value}); a value is a number or None.
Step = tuple[int, float, Mapping[str, Any]]
Row = tuple[int, int, float | None, float]

MAX_KEY_LENGTH = 255
_INF = math.inf

_SQLITE_INSERT = (
    "INSERT INTO metrics (key_id, step, value, wall_time) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key_id, step) DO NOTHING"
)
# Multi-row VALUES: one statement step per 200 rows instead of per row (~15% off the insert).
_SQLITE_ROWS_PER_STATEMENT = 200
_SQLITE_INSERT_MANY = (
    "INSERT INTO metrics (key_id, step, value, wall_time) VALUES "
    + ", ".join(["(?, ?, ?, ?)"] * _SQLITE_ROWS_PER_STATEMENT)
    + " ON CONFLICT (key_id, step) DO NOTHING"
)
_PG_STAGE = "ty_metrics_ingest"
_PG_CREATE_STAGE = (
    f"CREATE TEMPORARY TABLE {_PG_STAGE} "
    "(key_id int4, step int8, value float8, wall_time float8) ON COMMIT DELETE ROWS"
)
_PG_COPY_DIRECT = "COPY metrics (key_id, step, value, wall_time) FROM STDIN (FORMAT BINARY)"
# Moving the rows out with DELETE ... RETURNING leaves the stage empty for the next call in the
# same transaction, in the same statement as the insert.
_PG_MOVE = (
    f"WITH staged AS (DELETE FROM {_PG_STAGE} RETURNING key_id, step, value, wall_time) "
    "INSERT INTO metrics (key_id, step, value, wall_time) "
    "SELECT key_id, step, value, wall_time FROM staged "
    "ON CONFLICT (key_id, step) DO NOTHING"
)


def clip_key(key: str) -> str:
    """A key that fits the key columns: NUL (which PostgreSQL refuses in text) replaced, and a
    key longer than MAX_KEY_LENGTH cut to leave room for "~" and 8 hex digits of its hash, so
    long keys stay distinct."""
    key = key.replace("\x00", "\ufffd")
    if len(key) <= MAX_KEY_LENGTH:
        return key
    digest = hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{key[: MAX_KEY_LENGTH - 9]}~{digest}"


@dataclass
class KeyLimit:
    """At most ``max_keys`` metric keys per run: the points of keys past it are not stored,
    and counted in ``dropped_points`` (the forwarder says so on the run)."""

    max_keys: int
    dropped_points: int = 0


def ingest_points(
    session: Session, *, run_id: int, points: Sequence[Point], key_limit: KeyLimit | None = None
) -> int:
    """Store (key, step, value, wall_time) points; returns how many were new.

    Re-ingesting a point already stored (same key and step) keeps the first one and does not
    count it, so replaying the spool after a crash is harmless. NaN becomes NULL; +/-inf are
    stored as they are (app/metrics/finite.py).
    """
    if not points:
        return 0
    keys = set(map(itemgetter(0), points))
    key_ids = _key_ids(session, run_id=run_id, keys=keys, key_limit=key_limit)
    if key_limit is not None and not keys <= key_ids.keys():
        kept = [p for p in points if p[0] in key_ids]
        key_limit.dropped_points += len(points) - len(kept)
        points = kept
    rows = [
        (
            key_ids[key],
            step,
            float(value) if value is not None and -_INF <= value <= _INF else None,
            wall_time,
        )
        for key, step, value, wall_time in points
    ]
    inserted = _insert_rows(session, rows)
    counters.add(session, name=counters.POINTS_INGESTED, amount=inserted, key=run_id)
    if rows:
        steps = [row[1] for row in rows]
        touched = {key_ids[key] for key in keys if key in key_ids}
        lo, hi = min(steps), max(steps)
        _after_insert(session, rows, inserted, touched=touched, lo=lo, hi=hi)
    return inserted


def ingest_steps(
    session: Session, *, run_id: int, steps: Sequence[Step], key_limit: KeyLimit | None = None
) -> int:
    """Store the points of metrics lines, (step, wall_time, {key: value}) each, with the
    semantics of ``ingest_points``; returns how many were new.

    The forwarder's path, so it is written for speed: the keys of all lines are gathered
    first (a run logs a handful of keys on every line), then each point becomes a driver row
    in one comprehension. A value that is None, NaN or not a number at all is stored as NULL,
    +/-inf as it is; an int or a bool as a float (the columns are floats on both databases).
    """
    if not steps:
        return 0
    keys: set[str] = set()
    for _step, _wall, values in steps:
        keys.update(values)
    ids = _key_ids(session, run_id=run_id, keys=keys, key_limit=key_limit)
    if key_limit is not None and not keys <= ids.keys():  # keys past the limit: points go
        before = sum(map(len, map(itemgetter(2), steps)))
        steps = [(s, w, {k: v for k, v in vals.items() if k in ids}) for s, w, vals in steps]
        key_limit.dropped_points += before - sum(map(len, map(itemgetter(2), steps)))
    try:
        rows = [
            (ids[key], step, value if value is None or -_INF <= value <= _INF else None, wall)
            for step, wall, values in steps
            for key, value in values.items()
        ]
    except TypeError:  # a value that is not a number (a hand-written line): stored as NULL
        rows = [
            (ids[key], step, _number_or_none(value), wall)
            for step, wall, values in steps
            for key, value in values.items()
        ]
    inserted = _insert_rows(session, rows)
    counters.add(session, name=counters.POINTS_INGESTED, amount=inserted, key=run_id)
    if rows:  # per line, not per point: the hot path pays one pass over the lines
        numbers = [s for s, _w, _v in steps]
        touched = {ids[key] for key in keys if key in ids}
        lo, hi = min(numbers), max(numbers)
        _after_insert(session, rows, inserted, touched=touched, lo=lo, hi=hi)
    return inserted


def _after_insert(
    session: Session, rows: list[Row], inserted: int, *, touched: set[int], lo: int, hi: int
) -> None:
    """The touched keys' overviews, then their summaries (a key whose summary has no step yet
    had no point before this batch); from the batch's own rows when all were stored."""
    # numpy: not in an idle process
    from app.metrics.overview.batch import Batch
    from app.metrics.overview.stored import update_overviews

    batch = Batch(rows) if inserted == len(rows) else None
    update_overviews(session, key_ids=touched, batch=batch, lo=lo, hi=hi)
    update_summaries(session, key_ids=touched, lo=lo, hi=hi, batch=batch)


def _number_or_none(value: Any) -> float | None:
    if isinstance(value, int | float) and -_INF <= value <= _INF:
        return float(value)
    return None


def _insert_rows(session: Session, rows: list[Row]) -> int:
    conn = session.connection()
    dialect = conn.dialect
    if dialect.name == "sqlite":
        return _insert_sqlite(conn, rows)
    if dialect.name == "postgresql" and dialect.driver == "psycopg":
        return _copy_insert_postgres(conn, rows)
    raise NotImplementedError(
        f"metrics ingest needs sqlite or postgresql+psycopg, not {dialect.name}+{dialect.driver}"
    )


def _insert_sqlite(conn: Connection, rows: list[Row]) -> int:
    """executemany of 200-row statements over the rows' flattened values, the rest (under
    200) one row per statement; rows keep their order, so a repeated point keeps its first."""
    whole = len(rows) - len(rows) % _SQLITE_ROWS_PER_STATEMENT
    inserted = 0
    if whole:
        flat = list(chain.from_iterable(rows[:whole]))
        width = 4 * _SQLITE_ROWS_PER_STATEMENT
        params = [tuple(flat[i : i + width]) for i in range(0, len(flat), width)]
        inserted = conn.exec_driver_sql(_SQLITE_INSERT_MANY, params).rowcount
    if whole < len(rows):
        inserted += conn.exec_driver_sql(_SQLITE_INSERT, rows[whole:]).rowcount
    return inserted


def _key_ids(
    session: Session, *, run_id: int, keys: set[str], key_limit: KeyLimit | None = None
) -> dict[str, int]:
    """Integer ids of the run's keys, creating the missing ones: one SELECT when none is new.
    Flushes first: the run (and anything else pending) must exist before its rows. With a
    ``key_limit``, only as many new keys as fit under it are created (in name order)."""
    too_long = [k for k in keys if not isinstance(k, str) or len(k) > MAX_KEY_LENGTH or not k]
    if too_long:
        raise ValueError(f"metric keys must be 1-{MAX_KEY_LENGTH} characters: {too_long[:3]!r}")
    session.flush()
    stmt = select(MetricKey.key, MetricKey.id).where(MetricKey.run_id == run_id)
    # Straight through the driver: every batch asks, and the ORM session's statement work
    # was most of this read's time (issue 29).
    conn = session.connection()
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    cursor = conn.connection.cursor()
    try:
        cursor.execute(f"SELECT key, id FROM metric_keys WHERE run_id = {mark}", (run_id,))
        ids: dict[str, int] = dict(cursor.fetchall())
    finally:
        cursor.close()
    missing = keys - ids.keys()
    if key_limit is not None and len(ids) + len(missing) > key_limit.max_keys:
        missing = set(sorted(missing)[: max(0, key_limit.max_keys - len(ids))])
    if missing:
        dialect = session.get_bind().dialect.name
        insert = pg_insert if dialect == "postgresql" else sqlite_insert
        session.execute(
            insert(MetricKey).on_conflict_do_nothing(index_elements=["run_id", "key"]),
            [{"run_id": run_id, "key": k} for k in sorted(missing)],
        )
        ids.update({k: i for k, i in session.execute(stmt.where(MetricKey.key.in_(missing)))})
    return ids


def _copy_insert_postgres(conn: Connection, rows: list[Row]) -> int:
    """COPY straight into metrics inside a savepoint: new points, the normal case, are
    written once. A point already stored (a replayed spool) fails the COPY with a unique
    violation; the savepoint is rolled back and the batch goes the idempotent way, staged and
    moved with ON CONFLICT DO NOTHING."""
    import psycopg  # only PostgreSQL deployments need it at this point

    dbapi = cast(psycopg.Connection[Any], conn.connection.dbapi_connection)
    try:
        with dbapi.transaction(), dbapi.cursor() as cur:
            with cur.copy(_PG_COPY_DIRECT) as copy:
                copy.set_types(["int4", "int8", "float8", "float8"])
                for row in rows:
                    copy.write_row(row)
            return len(rows)
    except psycopg.errors.UniqueViolation:
        pass
    with dbapi.cursor() as cur:
        # A temp table lives as long as the connection; it is gone if its creating
        # transaction rolled back, hence the check every call (one cheap round trip).
        cur.execute("SELECT to_regclass(%s)", (f"pg_temp.{_PG_STAGE}",))
        if cast(tuple[Any], cur.fetchone())[0] is None:
            cur.execute(_PG_CREATE_STAGE)
        with cur.copy(f"COPY {_PG_STAGE} FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "int8", "float8", "float8"])
            for row in rows:
                copy.write_row(row)
        cur.execute(_PG_MOVE)
        return cur.rowcount


# --- points taken out: the metrics table has this one writer (docs/architecture.md) --------


def drop_points(
    session: Session, *, key_ids: Sequence[int] | Select[Any], after: int | None = None
) -> None:
    """The points of ``key_ids`` past step ``after`` (all of them by default): a requeue's
    cut (app.runs.state.recovery), a deleted run's late points (app.runs.deletion)."""
    stmt = delete(Metric).where(Metric.key_id.in_(key_ids))
    session.execute(stmt if after is None else stmt.where(Metric.step > after))


def drop_first_points(session: Session, *, key_id: int, count: int) -> int:
    """Up to ``count`` of the key's first points (a range on the (key_id, step) primary key,
    one short transaction's worth: app.runs.deletion); how many went."""
    last = session.scalar(
        select(Metric.step)
        .where(Metric.key_id == key_id)
        .order_by(Metric.step)
        .offset(count - 1)
        .limit(1)
    )
    stmt = delete(Metric).where(Metric.key_id == key_id)
    if last is not None:
        stmt = stmt.where(Metric.step <= last)
    result: CursorResult[Any] = session.execute(stmt)  # type: ignore[assignment]
    return int(result.rowcount or 0) if last is not None else 0
