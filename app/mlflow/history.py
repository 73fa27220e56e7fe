"""metrics/get-history's body, written by the database: one aggregate query returns a page's
points as the JSON text MLflow's client reads, so a 100,000-point series (issue 29's benchmark)
makes no Python row, dict or float per point; Python adds the brackets and the page token.

What each value looks like, as the row-by-row code wrote it (orjson of Python floats): a finite
value is a JSON number that parses back to the same double; NULL (a NaN or infinity logged:
app.metrics.ingest stores them as NULL) is ``"NaN"``; timestamps are rounded milliseconds,
steps integers.

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

import math
import random
import sqlite3
from contextlib import closing
from functools import cache

import orjson
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.metrics.models import MetricKey
from app.mlflow.service import page_offset, page_token
from app.runs.models import Run

MAX_HISTORY_RESULTS = 1_000_000
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
# own, then of the row, was a third more. A rounded REAL takes %d. group_concat keeps the
# subquery's order (SQLite before 3.44 has no ORDER BY in aggregates).
_SQLITE = """SELECT group_concat(CASE
    WHEN :printf AND abs(value) > 1e-100 AND abs(value) < 1e100
    THEN printf(:exact, value, round(wall_time * 1000), step)
    WHEN value IS NULL THEN printf(:other, '"NaN"', round(wall_time * 1000), step)
    ELSE printf(:other, ty_float_json(value), round(wall_time * 1000), step) END, ','),
    count(*), max(step)
FROM (SELECT step, value, wall_time FROM metrics WHERE key_id = :key_id {after}
      ORDER BY step LIMIT :limit)"""
_MORE = text("SELECT 1 FROM metrics WHERE key_id = :key_id AND step > :last LIMIT 1")


def history_body(
    session: Session, run: Run, key: str, *, max_results: int | None, token: str | None
) -> bytes:
    """The page of ``key``'s points after ``token`` (the last step of the page before) as
    get-history's JSON body, with ``next_page_token`` when more points follow."""
    key_id = session.scalar(
        select(MetricKey.id).where(MetricKey.run_id == run.id, MetricKey.key == key)
    )
    if key_id is None:
        return b'{"metrics":[]}'
    after = page_offset(token) if token else None
    limit = min(max_results or MAX_HISTORY_RESULTS, MAX_HISTORY_RESULTS)
    key_json = orjson.dumps(key).decode()
    params: dict[str, object] = {"key_id": key_id, "limit": limit}
    params |= {"after": after} if after is not None else {}
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET LOCAL extra_float_digits = 1"))
        params["key"] = key_json
        sql = _PG
    else:
        raw = connection.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.create_function("ty_float_json", 1, _float_json, deterministic=True)
        head = '{"key":' + key_json.replace("%", "%%") + ',"value":'
        tail = ',"timestamp":%d,"step":%d}'
        params |= {"exact": head + "%!.17g" + tail, "other": head + "%s" + tail}
        params["printf"] = _sqlite_printf_exact()
        sql = _SQLITE
    where = "AND step > :after" if after is not None else ""
    points, count, last = connection.execute(text(sql.replace("{after}", where)), params).one()
    more = count == limit and connection.execute(_MORE, {"key_id": key_id, "last": last}).first()
    token_json = b',"next_page_token":' + orjson.dumps(page_token(last)) if more else b""
    return b'{"metrics":[' + (points or "").encode() + b"]" + token_json + b"}"


def _float_json(value: float) -> str:
    """A value SQLite's printf is not trusted with, as Python writes it (shortest text that
    reads back the same; never NaN or infinity here: those are stored as NULL)."""
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
