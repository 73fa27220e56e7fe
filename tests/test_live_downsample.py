"""The live downsample cache (app/metrics/live_downsample.py) against real databases: bounded by the
points it holds, a whole view answered again without reading points while the series has not
moved, new points read (and the ends still there) as soon as it has.

SQLite, and PostgreSQL when TORCHYARD_TEST_POSTGRES_URL is set; each test in one transaction
that is rolled back, with the cache emptied first (key ids come back after a rollback).
"""

from __future__ import annotations

import math
import random
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session

import app.models as models
from app.metrics import downsample, live_downsample
from app.metrics.downsample import bucket_extremes, bucket_width, with_ends
from app.metrics.live_downsample import cached_points, clear_live_cache, live_width
from app.metrics.models import MetricKey
from app.metrics.service import LiveRun, ingest_points, read_runs_series, read_series
from tests.databases import KINDS, own_database
from tests.factories import add_run


@pytest.fixture(scope="module", params=KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with own_database(request.param, tmp_path_factory.mktemp("cache"), "ty_cache") as eng:
        yield eng


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    clear_live_cache()
    with Session(engine) as s:
        try:
            yield s
        finally:
            s.rollback()
            clear_live_cache()


def new_runs(session: Session, count: int) -> list[int]:
    user = models.User(username=f"u-{secrets.token_hex(6)}", password_hash="-")
    session.add(user)
    session.flush()
    return [add_run(session, owner_id=user.id) for _ in range(count)]


def add(session: Session, run_id: int, key: str, first: int, last: int, seed: int = 0) -> None:
    rng = random.Random(seed * 1_000_003 + first)
    points = [
        (key, s, rng.choice((rng.random(), rng.random(), math.nan)), 1000.0 + s)
        for s in range(first, last + 1)
    ]
    ingest_points(session, run_id=run_id, points=points)


def fresh(session: Session, run_id: int, key: str, *, width: int) -> dict[str, list[Any]]:
    """The view as a first read computes it, straight from the database."""
    conn = session.connection()
    key_id, hi = session.execute(
        select(MetricKey.id, MetricKey.last_step).where(
            MetricKey.run_id == run_id, MetricKey.key == key
        )
    ).one()
    assert hi is not None  # a key with points has a last step
    lo = 1
    steps, values, _ = with_ends(
        conn,
        key_id=key_id,
        lo=lo,
        hi=hi,
        points=bucket_extremes(conn, key_id=key_id, start=lo, hi=hi, width=width),
    )
    return {"step": steps, "value": values}


class Reads:
    """Counts the statements that read points: the buckets' SQL (from the driver's own
    cursor, so counted at `bucket_extremes`) and every statement through SQLAlchemy on `metrics`
    other than the one that finds the series and their first and last steps."""

    def __init__(self, session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
        self.buckets = 0
        self.other: list[str] = []
        self.engine = session.get_bind()

        def counted(conn: Any, **kw: Any) -> Any:
            self.buckets += 1
            return bucket_extremes(conn, **kw)

        monkeypatch.setattr(downsample, "bucket_extremes", counted)
        event.listen(self.engine, "before_cursor_execute", self._record)
        self._monkeypatch = monkeypatch

    def _record(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "metrics" in statement and "metric_keys.run_id" not in statement:
            self.other.append(statement)

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._record)

    @property
    def total(self) -> int:
        return self.buckets + len(self.other)


def overlay(session: Session, run_ids: list[int], *, growing: bool = False) -> dict[int, Any]:
    runs = [LiveRun(id=r, generation=1, growing=growing) for r in run_ids]
    return read_runs_series(session, runs=runs, keys=["loss"], max_points=300, with_time=True)


def test_a_page_of_200_series_is_read_again_without_reading_a_point(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The experiment page's overlay: 200 finished series of 2,000 points (more series than
    the cache held when it counted series). The second read of the page asks the database
    only for the series and their ends' steps: one statement, no points."""
    run_ids = new_runs(session, 200)
    for i, run_id in enumerate(run_ids):
        add(session, run_id, "loss", 1, 2000, seed=i)
    first = overlay(session, run_ids)
    held = cached_points()
    assert 0 < held <= live_downsample.MAX_CACHED_POINTS
    reads = Reads(session, monkeypatch)
    try:
        second = overlay(session, run_ids)
    finally:
        reads.close()
    assert second == first and reads.total == 0
    width = bucket_width(1, 2000, 300)
    for run_id in (run_ids[0], run_ids[-1]):
        series = second[run_id]["loss"]
        assert series["step"][0] == 1 and series["step"][-1] == 2000
        expected = fresh(session, run_id, "loss", width=width)
        assert {"step": series["step"], "value": series["value"]} == expected


def test_the_cache_is_bounded_by_points_least_recently_used_first(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget of points, not of series: reading more than it holds evicts the series read
    longest ago, and what is held never exceeds the budget; an evicted series is read from
    the database again, the same as before."""
    run_ids = new_runs(session, 6)
    for i, run_id in enumerate(run_ids):
        add(session, run_id, "loss", 1, 3000, seed=i)
    overlay(session, run_ids[:1])
    per_series = cached_points()  # the final buckets and the whole view of one series
    assert per_series > 300
    monkeypatch.setattr(live_downsample, "MAX_CACHED_POINTS", 3 * per_series + per_series // 2)
    clear_live_cache()
    first = overlay(session, run_ids)
    assert cached_points() <= live_downsample.MAX_CACHED_POINTS
    assert cached_points() >= 3 * per_series * 9 // 10  # three series fit, the newest ones
    reads = Reads(session, monkeypatch)
    try:
        overlay(session, run_ids[-3:])  # held: no read
        assert reads.total == 0
        again = overlay(session, run_ids[:1])  # evicted: read again
        assert reads.buckets == 1
    finally:
        reads.close()
    assert again[run_ids[0]] == first[run_ids[0]]
    assert cached_points() <= live_downsample.MAX_CACHED_POINTS


@pytest.mark.parametrize("growing", [True, False])
def test_new_points_are_read_and_the_ends_kept(
    session: Session, monkeypatch: pytest.MonkeyPatch, growing: bool
) -> None:
    """A cached view is answered only while the series still ends where it did: the first
    point past it makes the next read ask for the buckets from the last kept one on (not the
    whole series) and the ends again; the view equals a fresh downsample and starts and ends
    at the series' ends every time."""
    (run_id,) = new_runs(session, 1)
    add(session, run_id, "loss", 1, 5000)
    runs = [LiveRun(id=run_id, generation=1, growing=growing)]

    def read() -> dict[str, list[Any]]:
        got = read_runs_series(session, runs=runs, keys=["loss"], max_points=300)[run_id]
        return got["loss"]

    def width(hi: int) -> int:
        return live_width(1, hi, 300) if growing else bucket_width(1, hi, 300)

    first = read()
    assert first == fresh(session, run_id, "loss", width=width(5000))
    assert first["step"][0] == 1 and first["step"][-1] == 5000
    reads = Reads(session, monkeypatch)
    try:
        assert read() == first and reads.total == 0
        for start, last in ((5001, 5001), (5002, 5400), (5401, 9000)):
            add(session, run_id, "loss", start, last)
            before = reads.buckets
            view = read()
            assert reads.buckets == before + 1  # only the buckets that could change
            assert view == fresh(session, run_id, "loss", width=width(last))
            assert view["step"][0] == 1 and view["step"][-1] == last
            assert len(view["step"]) <= 300
    finally:
        reads.close()


def test_a_series_read_by_read_series_and_by_the_overlay_agree(session: Session) -> None:
    """GET /api/runs/{id}/metrics (read_series) and the overlay (read_runs_series) give the
    same view of the same series, whichever filled the cache."""
    run_a, run_b = new_runs(session, 2)
    add(session, run_a, "loss", 1, 4000, seed=1)
    add(session, run_b, "loss", 1, 50, seed=2)  # short: sent whole
    one = read_series(session, run_id=run_a, max_points=300, generation=1, growing=False)
    many = overlay(session, [run_a, run_b])
    assert many[run_a] == {"loss": {**one["loss"], "time": many[run_a]["loss"]["time"]}}
    assert many[run_b]["loss"]["step"] == list(range(1, 51))
    assert overlay(session, [run_a]) == {run_a: many[run_a]}


def test_a_deleted_runs_key_id_given_to_a_new_series_is_not_answered_from_the_cache(
    session: Session,
) -> None:
    """SQLite gives a new row the highest id + 1: the keys of a deleted newest run come back
    as the next run's, with the same first step and generation. The cache tells them apart by
    the first point's wall time, so the new run shows its own points, not the deleted one's."""
    from sqlalchemy import delete

    from app.metrics.models import Metric

    (old_run,) = new_runs(session, 1)
    add(session, old_run, "loss", 1, 3000, seed=1)
    old_view = overlay(session, [old_run])[old_run]["loss"]
    (old_key,) = session.scalars(select(MetricKey.id).where(MetricKey.run_id == old_run))
    session.execute(delete(Metric).where(Metric.key_id == old_key))
    session.execute(delete(MetricKey).where(MetricKey.id == old_key))
    (new_run,) = new_runs(session, 1)
    rng = random.Random(9)
    points = [("loss", s, rng.random() + 5.0, 5000.0 + s) for s in range(1, 3001)]
    ingest_points(session, run_id=new_run, points=points)
    (new_key,) = session.scalars(select(MetricKey.id).where(MetricKey.run_id == new_run))
    if session.get_bind().dialect.name == "sqlite":
        assert new_key == old_key  # the case this guards against
    view = overlay(session, [new_run])[new_run]["loss"]
    assert view != old_view and min(v for v in view["value"] if v is not None) >= 5.0
    assert view["time"][0] == 5001.0 and view["step"][-1] == 3000
    width = bucket_width(1, 3000, 300)
    expected = fresh(session, new_run, "loss", width=width)
    assert {"step": view["step"], "value": view["value"]} == expected
