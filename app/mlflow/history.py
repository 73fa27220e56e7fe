"""metrics/get-history's body, written by the database: one aggregate query returns a page's
points as the JSON text MLflow's client reads, so a 100,000-point series (issue 29's benchmark)
makes no Python row, dict or float per point; Python adds the brackets and the page token.

What each value looks like, as the row-by-row code wrote it (orjson of Python floats): a finite
value is a JSON number that parses back to the same double; NULL (a NaN logged:
app.metrics.ingest stores it as NULL) is ``"NaN"``, +/-inf ``"Infinity"``/``"-Infinity"``;
timestamps are rounded milliseconds, steps integers.

- PostgreSQL writes a double as the shortest text that reads back the same
  (``extra_float_digits`` 1, its default since 12; set for the transaction to be sure) and
  without a fraction when it is whole (``3``, ``-0``): ``.0`` is added there, as Python writes
  it, so a JSON reader gets a float and -0.0 keeps its sign.
- SQLite's own float text has 15 digits (not enough to read back), and its ``printf('%!.17g')``
  (17 digits always read back) is computed in long double with a scale constant that is only
  a double from 1e100 up: a value outside 1e-100 < |v| < 1e100 (zero included) goes through
  ``repr`` (a Python function registered on the connection; rare), and the 17-digit path is
  checked once a process against values whose 17 digits are hard (``_sqlite_printf_exact``):
  where it fails (another SQLite build) every value goes through ``repr``. SQLite stores an
  integral REAL as an integer, so a logged -0.0 comes back as 0.0 there (as before).
"""

from __future__ import annotations

import asyncio
import math
import random
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

import orjson
from sqlalchemy import Connection, select, text
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.db import session_scope
from app.metrics.models import MetricKey
from app.mlflow.service import page_offset, page_token
from app.runs.models import Run

MAX_HISTORY_RESULTS = 1_000_000
_T = TypeVar("_T")
_PG_ROW = '{"key":%s,"value":%s,"timestamp":%s,"step":%s}'  # format() knows %s alone
_PG_VALUE = """CASE WHEN value IS NULL OR value = 'NaN' THEN '"NaN"'
    WHEN value = 'Infinity' THEN '"Infinity"' WHEN value = '-Infinity' THEN '"-Infinity"'
    WHEN value = trunc(value) AND abs(value) < 1e15 THEN value::text || '.0'
    ELSE value::text END"""
_PG = f"""SELECT string_agg(format('{_PG_ROW}', CAST(:key AS text), {_PG_VALUE},
    round(wall_time * 1000)::bigint, step), ',' ORDER BY step), count(*), max(step)
FROM (SELECT step, value, wall_time FROM metrics WHERE key_id = :key_id {{after}}
      ORDER BY step LIMIT :limit) AS page"""

# One printf a row, the key already in its format (:exact, :other): printf of the value on its
# own, then of the row, was a third more; the range test by comparisons alone (abs() twice a
# row was 5% of the query). A rounded REAL takes %d. group_concat keeps the subquery's order
# (SQLite before 3.44 has no ORDER BY in aggregates).
_SQLITE = """SELECT group_concat(CASE
    WHEN :printf AND (value > 1e-100 AND value < 1e100 OR value < -1e-100 AND value > -1e100)
    THEN printf(:exact, value, round(wall_time * 1000), step)
    WHEN value IS NULL THEN printf(:other, '"NaN"', round(wall_time * 1000), step)
    ELSE printf(:other, ty_float_json(value), round(wall_time * 1000), step) END, ','),
    count(*), max(step)
FROM (SELECT step, value, wall_time FROM metrics WHERE key_id = :key_id {after}
      ORDER BY step LIMIT :limit)"""
_MORE = text("SELECT 1 FROM metrics WHERE key_id = :key_id AND step > :last LIMIT 1")


# A page is read (and sent) in chunks of this many points: each chunk's query runs in a worker
# thread while the chunk before is compressed and sent, and the client receives and unzips as
# it goes (the whole 100,000-point page was one query, then one gzip, then the transfer, in
# series). A page that fits in one chunk is one query and one plain body, as before.
CHUNK_POINTS = 10_000


@dataclass(frozen=True)
class _Read:
    """What every chunk of one page's read needs: the series and its key as JSON."""

    key_id: int
    key_json: str


@dataclass(frozen=True)
class _Chunk:
    points: str  # the chunk's points as JSON objects joined by commas ("" for none)
    count: int
    last: int | None  # the chunk's last step


def history_body(
    session: Session, run: Run, key: str, *, max_results: int | None, token: str | None
) -> bytes | AsyncIterator[bytes]:
    """The page of ``key``'s points after ``token`` (the last step of the page before) as
    get-history's JSON body, with ``next_page_token`` when more points follow: the body itself
    when the page fits in one chunk, else the body's parts as they are read (the first chunk
    already read here, in the request's session: a missing run or key is an error before any
    byte is sent)."""
    key_id = session.scalar(
        select(MetricKey.id).where(MetricKey.run_id == run.id, MetricKey.key == key)
    )
    if key_id is None:
        return b'{"metrics":[]}'
    after = page_offset(token) if token else None
    limit = min(max_results or MAX_HISTORY_RESULTS, MAX_HISTORY_RESULTS)
    read = _Read(key_id, orjson.dumps(key).decode())
    first = _chunk(session.connection(), read, after, min(limit, CHUNK_POINTS))
    head = b'{"metrics":[' + first.points.encode()
    if first.count < CHUNK_POINTS or limit == first.count:
        return head + _tail(session.connection(), read, first, limit - first.count)
    return _rest(read, head, first, limit - first.count)


async def _rest(read: _Read, head: bytes, chunk: _Chunk, left: int) -> AsyncIterator[bytes]:
    """The page's body after its first chunk: the next chunk's query starts (in a worker
    thread, a session of its own) before this one is yielded, so it runs while the server
    compresses and sends this one. Each chunk starts after the last step of the one before,
    as a page token would: no point is sent twice or skipped for a point logged meanwhile."""
    pending: asyncio.Future[_Chunk] | None = _start(read, chunk.last, min(left, CHUNK_POINTS))
    try:
        yield head
        while pending is not None:
            chunk = await pending
            left -= chunk.count
            full = chunk.count == CHUNK_POINTS and left > 0
            pending = _start(read, chunk.last, min(left, CHUNK_POINTS)) if full else None
            if chunk.count:
                yield b"," + chunk.points.encode()
        yield await run_in_threadpool(_in_session, _tail, read, chunk, left)
    finally:
        if pending is not None:  # the client went away: let the running query end
            pending.cancel()


def _start(read: _Read, after: int | None, limit: int) -> asyncio.Future[_Chunk]:
    return asyncio.ensure_future(run_in_threadpool(_in_session, _chunk, read, after, limit))


def _in_session(fn: Callable[..., _T], *args: Any) -> _T:
    with session_scope() as session:
        return fn(session.connection(), *args)


def _tail(connection: Connection, read: _Read, last: _Chunk, left: int) -> bytes:
    """The page's end: ``next_page_token`` when the page is full and a point follows."""
    step = last.last
    if left > 0 or step is None:
        return b"]}"
    if connection.execute(_MORE, {"key_id": read.key_id, "last": step}).first() is None:
        return b"]}"
    return b'],"next_page_token":' + orjson.dumps(page_token(step)) + b"}"


def _chunk(connection: Connection, read: _Read, after: int | None, limit: int) -> _Chunk:
    """Up to ``limit`` points after step ``after``, written by the database (see the module's
    docstring for how each value is written)."""
    params: dict[str, object] = {"key_id": read.key_id, "limit": limit}
    params |= {"after": after} if after is not None else {}
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET LOCAL extra_float_digits = 1"))
        params["key"] = read.key_json
        sql = _PG
    else:
        raw = connection.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.create_function("ty_float_json", 1, _float_json, deterministic=True)
        head = '{"key":' + read.key_json.replace("%", "%%") + ',"value":'
        tail = ',"timestamp":%d,"step":%d}'
        params |= {"exact": head + "%!.17g" + tail, "other": head + "%s" + tail}
        params["printf"] = _sqlite_printf_exact()
        sql = _SQLITE
    where = "AND step > :after" if after is not None else ""
    points, count, last = connection.execute(text(sql.replace("{after}", where)), params).one()
    return _Chunk(points or "", count, last)


def _float_json(value: float) -> str:
    """A value SQLite's printf is not trusted with, as Python writes it (shortest text that
    reads back the same), +/-inf as proto3 JSON writes them (NaN is stored NULL)."""
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    return repr(float(value)) if math.isfinite(value) else '"NaN"'


@cache
def _sqlite_printf_exact() -> bool:
    """Whether this process's SQLite library's ``printf('%!.17g')`` reads back every value of
    a sample with hard cases (next to powers of ten and two, long mantissas), values bound as
    parameters (SQLite's own text-to-float is not exact either)."""
    rng = random.Random(29)
    sample = [1.0 / (1 + s) for s in range(1, 2000)]
    sample += [rng.uniform(1, 10) * 10.0 ** rng.randint(-99, 99) for _ in range(5000)]
    sample += [math.nextafter(10.0**e, d) for e in range(-99, 100) for d in (0, math.inf)]
    sample += [2.0**e for e in range(-330, 330)]
    sample = [v for v in sample if 1e-100 < abs(v) < 1e100]
    with closing(sqlite3.connect(":memory:")) as check:
        for start in range(0, len(sample), 500):
            chunk = sample[start : start + 500]
            values = ",".join("(?)" for _ in chunk)
            query = f"SELECT printf('%!.17g', column1) FROM (VALUES {values})"
            found = [float(t) for (t,) in check.execute(query, chunk)]
            if found != chunk:
                return False
    return True
