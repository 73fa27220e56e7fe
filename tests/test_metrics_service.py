"""app.metrics.service against real databases: a SQLite file, and PostgreSQL when
TORCHYARD_TEST_POSTGRES_URL is set (a database of its own, created here and dropped after).

Each test works in one transaction that is rolled back, on a run of its own.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, delete, select, text
from sqlalchemy.orm import Session

import app.models as models
from app.metrics.finite import BIGGEST
from app.metrics.models import Metric, MetricKey
from app.metrics.service import (
    count_points,
    ingest_points,
    list_keys,
    read_new_points,
    read_series,
)
from tests.databases import KINDS, own_database, rolled_back, savepoints_on
from tests.factories import add_owned_run


@pytest.fixture(scope="module", params=KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with own_database(request.param, tmp_path_factory.mktemp("metrics"), "ty_metrics") as eng:
        yield eng


@pytest.fixture(scope="module")
def rollback_engine(engine: Engine) -> Iterator[Engine]:
    with savepoints_on(engine) as rollback:
        yield rollback


@pytest.fixture
def session(rollback_engine: Engine) -> Iterator[Session]:
    """Rolled back after the test, its commits included."""
    with rolled_back(rollback_engine) as sessions, sessions() as s:
        yield s


@pytest.fixture
def run_id(session: Session) -> int:
    return add_owned_run(session)


Point = tuple[str, int, float | None, float]


def pts(
    key: str, steps: range | list[int], f: Callable[[int], float | None] = lambda s: s / 10
) -> list[Point]:
    """Points of one key; wall time 1000 + step."""
    return [(key, s, f(s), 1000.0 + s) for s in steps]


# --- ingest -----------------------------------------------------------------------------


def test_reingesting_the_same_points_stores_them_once(session: Session, run_id: int) -> None:
    points = pts("train/loss", range(1, 101)) + pts("train/acc", range(1, 101))
    assert ingest_points(session, run_id=run_id, points=points) == 200
    assert ingest_points(session, run_id=run_id, points=points) == 0
    overlap = pts("train/loss", range(91, 111), f=lambda s: -1.0)
    assert ingest_points(session, run_id=run_id, points=overlap) == 10
    assert count_points(session, run_id=run_id) == 210
    assert count_points(session, run_id=run_id, key="train/loss") == 110
    assert count_points(session, run_id=run_id, key="nope") == 0
    loss = read_series(session, run_id=run_id, keys=["train/loss"])["train/loss"]
    assert loss["value"][90:100] == [s / 10 for s in range(91, 101)]  # first write wins
    assert loss["value"][100:] == [-1.0] * 10


def test_replay_across_transactions_doubles_nothing(engine: Engine) -> None:
    points = pts("a", range(1, 501)) + pts("b", range(1, 501))
    with Session(engine) as s:
        rid = add_owned_run(s)
        assert ingest_points(s, run_id=rid, points=points[:600]) == 600
        s.commit()
    # Later transactions reuse the pooled connection (on PostgreSQL, its staging temp table).
    for expected_new in (400, 0):
        with Session(engine) as s:
            assert ingest_points(s, run_id=rid, points=points) == expected_new
            s.commit()
    with Session(engine) as s:
        assert count_points(s, run_id=rid) == 1000
        assert ingest_points(s, run_id=rid, points=points[:10]) == 0
        assert ingest_points(s, run_id=rid, points=pts("a", [501])) == 1  # same transaction
        assert count_points(s, run_id=rid) == 1001
        s.rollback()


def test_key_ids_are_created_once_and_reused(session: Session, run_id: int) -> None:
    ingest_points(session, run_id=run_id, points=pts("a", [1]) + pts("b", [1]))
    ids = dict(
        session.execute(
            select(models.MetricKey.key, models.MetricKey.id).where(
                models.MetricKey.run_id == run_id
            )
        ).all()
    )
    ingest_points(session, run_id=run_id, points=pts("a", [2]) + pts("b", [2]) + pts("c", [2]))
    after = dict(
        session.execute(
            select(models.MetricKey.key, models.MetricKey.id).where(
                models.MetricKey.run_id == run_id
            )
        ).all()
    )
    assert set(after) == {"a", "b", "c"}
    assert {k: after[k] for k in ids} == ids
    other = add_owned_run(session)
    ingest_points(session, run_id=other, points=pts("a", [1], f=lambda s: 99.0))
    assert list_keys(session, run_id=run_id) == ["a", "b", "c"]
    assert list_keys(session, run_id=other) == ["a"]
    assert read_series(session, run_id=run_id, keys=["a"])["a"]["value"] == [0.1, 0.2]


def test_nan_is_stored_as_null_and_infinities_as_they_are(session: Session, run_id: int) -> None:
    """+/-inf stored exactly (the database holds inf), read as JSON carries them: the largest
    doubles (app/metrics/finite.py); NaN and None as NULL, read as None."""
    values = [1.0, math.nan, math.inf, -math.inf, None, 3, True]
    points = [("m", i + 1, v, 1.0) for i, v in enumerate(values)]
    assert ingest_points(session, run_id=run_id, points=points) == 7
    series = read_series(session, run_id=run_id)["m"]
    assert series == {
        "step": [1, 2, 3, 4, 5, 6, 7],
        "value": [1.0, None, BIGGEST, -BIGGEST, None, 3.0, 1.0],
    }
    assert read_new_points(session, run_id=run_id, after={})["m"]["value"] == series["value"]
    stored = session.scalars(
        select(Metric.value)
        .join(MetricKey, MetricKey.id == Metric.key_id)
        .where(MetricKey.run_id == run_id)
        .order_by(Metric.step)
    ).all()
    assert stored[2:4] == [math.inf, -math.inf]


def test_bad_keys_are_refused(session: Session, run_id: int) -> None:
    with pytest.raises(ValueError, match="metric keys"):
        ingest_points(session, run_id=run_id, points=[("x" * 256, 1, 1.0, 1.0)])
    assert ingest_points(session, run_id=run_id, points=[]) == 0


# --- read_series ------------------------------------------------------------------------


def test_read_series_is_in_step_order_and_filters_keys_and_steps(
    session: Session, run_id: int
) -> None:
    ingest_points(session, run_id=run_id, points=pts("b", [5, 1, 3]) + pts("a", [2]))
    ingest_points(session, run_id=run_id, points=pts("b", [4, 2]))
    every = read_series(session, run_id=run_id)
    assert list(every) == ["a", "b"]
    assert every["b"] == {"step": [1, 2, 3, 4, 5], "value": [0.1, 0.2, 0.3, 0.4, 0.5]}
    assert read_series(session, run_id=run_id, keys=["b", "missing"]).keys() == {"b"}
    assert read_series(session, run_id=run_id, keys=[]) == {}
    ranged = read_series(session, run_id=run_id, step_min=2, step_max=4)
    assert ranged == {
        "a": {"step": [2], "value": [0.2]},
        "b": {"step": [2, 3, 4], "value": [0.2, 0.3, 0.4]},
    }
    # max_points above the count in range: the series comes back whole.
    assert read_series(session, run_id=run_id, keys=["b"], max_points=5)["b"] == every["b"]
    with pytest.raises(ValueError, match="max_points"):
        read_series(session, run_id=run_id, max_points=1)


def wave(step: int) -> float:
    if step == 123_457:
        return 50.0
    if step == 7:
        return -50.0
    return math.sin(step / 1000)


def test_downsampling_keeps_single_step_spikes_within_max_points(
    session: Session, run_id: int
) -> None:
    n = 200_000
    points = pts("loss", range(1, n + 1), f=wave) + pts("acc", range(1, 5001, 1000))
    for i in range(0, len(points), 50_000):
        ingest_points(session, run_id=run_id, points=points[i : i + 50_000])
    for max_points in (1000, 999, 4):
        result = read_series(session, run_id=run_id, max_points=max_points)
        steps, values = result["loss"]["step"], result["loss"]["value"]
        assert len(steps) <= max_points
        assert steps == sorted(set(steps))
        assert values == [wave(s) for s in steps]  # real points only
        assert 123_457 in steps and 7 in steps
        assert len(steps) >= 0.9 * max_points  # min and max of every bucket, not a sample
        assert (steps[0], steps[-1]) == (1, n)  # and its ends
    assert result["acc"]["step"] == [1, 4001]  # 5 points > max_points=4: downsampled too
    assert read_series(session, run_id=run_id, keys=["acc"], max_points=5)["acc"]["step"] == [
        1,
        1001,
        2001,
        3001,
        4001,
    ]
    ranged = read_series(
        session, run_id=run_id, keys=["loss"], max_points=500, step_min=100_000, step_max=150_000
    )["loss"]
    assert len(ranged["step"]) <= 500
    assert (ranged["step"][0], ranged["step"][-1]) == (100_000, 150_000)
    assert 123_457 in ranged["step"]


MILLION = 1_000_000


def million_points(session: Session, run_id: int, key: str) -> int:
    """A 1M-point series (steps 0..999,999) inserted by the database itself, in one statement:
    a value whose bucket extremes are almost never at a bucket's edges ((7919 s mod 1000) /
    1000), wall time s / 100."""
    metric_key = MetricKey(run_id=run_id, key=key)
    session.add(metric_key)
    session.flush()
    key_id = metric_key.id
    if session.get_bind().dialect.name == "postgresql":
        steps = "SELECT generate_series(CAST(0 AS BIGINT), CAST(:last AS BIGINT)) AS s"
    else:
        steps = (
            "WITH RECURSIVE n(s) AS (SELECT 0 UNION ALL SELECT s + 1 FROM n WHERE s < :last)"
            " SELECT s FROM n"
        )
    session.execute(
        text(
            "INSERT INTO metrics (key_id, step, value, wall_time)"
            f" SELECT :key_id, s, ((s * 7919) % 1000) / 1000.0, s / 100.0 FROM ({steps}) AS steps"
        ),
        {"key_id": key_id, "last": MILLION - 1},
    )
    return key_id


def million_value(step: int) -> float:
    return ((step * 7919) % 1000) / 1000.0


def test_a_downsampled_view_of_a_million_points_includes_its_first_and_last(
    session: Session, run_id: int
) -> None:
    """The issue's case: a 2,000-point view of 1M points covered steps 41 to 999,634. Every
    read path (whole range, a zoomed range, the live path growing and finished) now starts at
    the first point and ends at the last, within max_points, with real points only."""
    from app.metrics.live_downsample import clear_live_cache

    clear_live_cache()
    million_points(session, run_id, "loss")
    reads: dict[str, tuple[dict[str, Any], int, int]] = {
        "whole": ({}, 0, MILLION - 1),
        "zoomed": ({"step_min": 123_457, "step_max": 876_543}, 123_457, 876_543),
        "live, growing": ({"generation": 1}, 0, MILLION - 1),
        "live, finished": ({"generation": 1, "growing": False}, 0, MILLION - 1),
    }
    for name, (kwargs, first, last) in reads.items():
        series = read_series(
            session, run_id=run_id, keys=["loss"], max_points=2000, with_time=True, **kwargs
        )["loss"]
        steps = series["step"]
        assert (steps[0], steps[-1]) == (first, last), name
        assert len(steps) <= 2000 and steps == sorted(set(steps)), name
        assert series["value"] == [million_value(s) for s in steps], name
        assert series["time"] == [s / 100.0 for s in steps], name
        assert len(steps) >= 0.45 * 2000, name  # still the buckets' extremes, not just the ends
    # The values' extremes (0.0 and 0.999) are there: every 1000th step holds each.
    assert {0.0, 0.999} <= set(series["value"])


def test_downsampling_shows_a_non_finite_stretch_as_a_gap(session: Session, run_id: int) -> None:
    def f(s: int) -> float:
        return math.nan if 1001 <= s <= 2000 else float(s % 7)

    ingest_points(session, run_id=run_id, points=pts("loss", range(1, 3001), f=f))
    series = read_series(session, run_id=run_id, max_points=100)["loss"]
    assert len(series["step"]) <= 100
    gap = [s for s, v in zip(series["step"], series["value"], strict=True) if v is None]
    assert gap and all(1001 <= s <= 2000 for s in gap)
    # The buckets' extremes, between the two ends (1 % 7 and 3000 % 7).
    assert (series["step"][0], series["step"][-1]) == (1, 3000)
    assert (series["value"][0], series["value"][-1]) == (1.0, 4.0)
    assert all(v in {0.0, 6.0} for v in series["value"][1:-1] if v is not None)


def test_a_growing_series_downsampled_live_equals_a_fresh_downsample(
    session: Session, run_id: int
) -> None:
    """The live path (final buckets kept between requests, regrouped when the width doubles)
    must give exactly what a fresh downsample at the same width gives, as the series grows,
    across width changes, with ties and runs of non-finite values, after the points past a
    step are dropped (a new generation), and once the run is finished (exact width)."""
    from app.metrics.downsample import bucket_extremes, bucket_width, with_ends
    from app.metrics.live_downsample import clear_live_cache, live_width

    clear_live_cache()
    rng = random.Random(3)

    def value(s: int) -> float:
        if s % 97 == 0 or 3000 <= s < 3400:  # single gaps, and whole buckets of gaps
            return math.nan
        return rng.choice((0.0, 0.5, 1.0)) if s % 3 == 0 else rng.random()  # many ties

    def add(first: int, last: int) -> None:
        ingest_points(
            session,
            run_id=run_id,
            points=[("x", s, value(s), 1.0 * s) for s in range(first, last + 1)],
        )

    def both(generation: int, growing: bool = True) -> tuple[dict, dict]:
        live = read_series(
            session, run_id=run_id, max_points=200, generation=generation, growing=growing
        )["x"]
        whole = read_series(session, run_id=run_id)["x"]
        lo, hi = whole["step"][0], whole["step"][-1]
        width = live_width(lo, hi, 200) if growing else bucket_width(lo, hi, 200)
        conn, key_id = session.connection(), read_key_id(session, run_id, "x")
        steps, values, _times = with_ends(
            conn,
            key_id=key_id,
            lo=lo,
            hi=hi,
            points=bucket_extremes(conn, key_id=key_id, start=lo, hi=hi, width=width),
        )
        return live, {"step": steps, "value": values}

    add(1, 1000)
    step = 1000
    widths = set()
    for grow in (1, 7, 37, 99, 100, 101, 250, 1, 1000, 3, 900, 2500, 4000, 1):
        add(step + 1, step + grow)
        step += grow
        widths.add(live_width(1, step, 200))
        live, fresh = both(generation=1)
        assert live == fresh, grow
        assert 0.5 * 200 <= len(live["step"]) <= 200
    assert len(widths) >= 4  # the growth crossed several doublings
    # A requeued attempt drops the points past its checkpoint and logs them again.
    keys = select(MetricKey.id).where(MetricKey.run_id == run_id)
    session.execute(delete(Metric).where(Metric.key_id.in_(keys), Metric.step > 1500))
    add(1501, step)
    live, fresh = both(generation=2)
    assert live == fresh
    # Finished: the exact width, all of max_points again, and the same answer twice.
    live, fresh = both(generation=2, growing=False)
    assert live == fresh and len(live["step"]) > 0.9 * 200
    assert both(generation=2, growing=False)[0] == live


def test_a_live_read_probes_a_series_length_once_per_generation(
    session: Session, run_id: int
) -> None:
    """Whether a series must be downsampled is found out once (the probe walks max_points
    index entries); a series only grows within a generation, so later reads skip it, and a
    short series (step span within max_points) never needs it."""
    from sqlalchemy import event

    from app.metrics.live_downsample import clear_live_cache

    clear_live_cache()
    ingest_points(session, run_id=run_id, points=pts("long", range(1, 3001)))
    ingest_points(session, run_id=run_id, points=pts("short", range(1, 50)))
    statements: list[str] = []
    engine = session.get_bind()

    def record(conn, cursor, statement, *args) -> None:  # noqa: ANN001
        statements.append(statement.upper())

    event.listen(engine, "before_cursor_execute", record)
    try:
        first = read_series(session, run_id=run_id, max_points=100, generation=1)
        probes_first = sum("OFFSET" in s for s in statements)
        statements.clear()
        ingest_points(session, run_id=run_id, points=pts("long", range(3001, 3101)))
        second = read_series(session, run_id=run_id, max_points=100, generation=1)
        probes_second = sum("OFFSET" in s for s in statements)
        statements.clear()
        read_series(session, run_id=run_id, max_points=100, generation=2)
        probes_new_generation = sum("OFFSET" in s for s in statements)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert (probes_first, probes_second, probes_new_generation) == (1, 0, 1)
    assert len(first["long"]["step"]) <= 100 and second["long"]["step"][-1] == 3100
    assert first["short"]["step"] == list(range(1, 50))


def test_a_series_read_whole_while_short_is_downsampled_from_memory_once_long(
    session: Session, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live series read whole while short is kept as its raw points; when it grows past
    max_points its first downsample regroups them and asks the database only for the
    buckets past them, and equals a fresh downsample."""
    from app.metrics import downsample
    from app.metrics.downsample import bucket_extremes, with_ends
    from app.metrics.live_downsample import clear_live_cache, live_width

    clear_live_cache()
    rng = random.Random(5)

    def add(first: int, last: int) -> None:
        ingest_points(
            session,
            run_id=run_id,
            points=[
                ("x", s, rng.choice((0.0, rng.random(), math.nan)), 1.0 * s)
                for s in range(first, last + 1)
            ],
        )

    add(1, 180)
    short = read_series(session, run_id=run_id, max_points=200, generation=1)["x"]
    assert short["step"] == list(range(1, 181))
    add(181, 700)
    bucket_starts: list[int] = []

    def record(conn, *, start, **kw):  # noqa: ANN001, ANN003, ANN202
        bucket_starts.append(start)  # the buckets' SQL reads from the driver's own cursor
        return bucket_extremes(conn, start=start, **kw)

    monkeypatch.setattr(downsample, "bucket_extremes", record)
    live = read_series(session, run_id=run_id, max_points=200, generation=1)["x"]
    monkeypatch.undo()
    assert bucket_starts and min(bucket_starts) >= 180 - live_width(1, 700, 200)
    conn, key_id = session.connection(), read_key_id(session, run_id, "x")
    steps, values, _times = with_ends(
        conn,
        key_id=key_id,
        lo=1,
        hi=700,
        points=bucket_extremes(conn, key_id=key_id, start=1, hi=700, width=live_width(1, 700, 200)),
    )
    assert live == {"step": steps, "value": values}


def test_live_widths_only_double_as_a_series_grows() -> None:
    from app.metrics.downsample import bucket_width
    from app.metrics.live_downsample import live_width

    previous = 1
    for hi in range(1, 200_000, 997):
        width = live_width(1, hi, 2000)
        assert width >= bucket_width(1, hi, 2000) and width & (width - 1) == 0
        assert width in (previous, 2 * previous) or width > previous and width % previous == 0
        previous = width


# --- read_new_points --------------------------------------------------------------------


def test_read_new_points_returns_only_what_is_past_each_cursor(
    session: Session, run_id: int
) -> None:
    ingest_points(session, run_id=run_id, points=pts("a", range(1, 4)) + pts("b", range(1, 3)))
    first = read_new_points(session, run_id=run_id, after={})
    assert first == {
        "a": {"step": [1, 2, 3], "value": [0.1, 0.2, 0.3], "time": [1001.0, 1002.0, 1003.0]},
        "b": {"step": [1, 2], "value": [0.1, 0.2], "time": [1001.0, 1002.0]},
    }
    cursor = {"a": 3, "b": 2}
    assert read_new_points(session, run_id=run_id, after=cursor) == {}
    ingest_points(session, run_id=run_id, points=pts("a", [4, 5]) + pts("c", [5]))
    assert read_new_points(session, run_id=run_id, after=cursor) == {
        "a": {"step": [4, 5], "value": [0.4, 0.5], "time": [1004.0, 1005.0]},
        "c": {"step": [5], "value": [0.5], "time": [1005.0]},
    }
    # At most `limit` points in all, key by key: a's four, then b's first.
    chunk = read_new_points(session, run_id=run_id, after={"a": 1}, limit=5)
    assert {k: s["step"] for k, s in chunk.items()} == {"a": [2, 3, 4, 5], "b": [1]}
    assert read_new_points(session, run_id=add_owned_run(session), after={}) == {}


def read_key_id(session: Session, run_id: int, key: str) -> int:
    return session.execute(
        select(MetricKey.id).where(MetricKey.run_id == run_id, MetricKey.key == key)
    ).scalar_one()


def test_a_growing_series_keeps_only_the_widths_still_read(
    session: Session, run_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a series' width doubles, the narrower widths' kept buckets that nobody reads any
    more are dropped (held until the LRU evicted them, they grew the server's memory with
    every doubling); a reader still at a narrower width (another max_points) keeps its own."""
    from app.metrics import live_downsample as downsample

    downsample.clear_live_cache()

    def widths() -> list[int]:
        return sorted(k[-1] for k in downsample._FINAL)  # (*series, width)

    def grow_to(last: int) -> None:
        first = len(read_series(session, run_id=run_id).get("x", {}).get("step", [])) + 1
        ingest_points(session, run_id=run_id, points=pts("x", range(first, last + 1)))

    grow_to(150)
    read_series(session, run_id=run_id, max_points=200, generation=1)  # whole: width 1 kept
    assert widths() == [1]
    monkeypatch.setattr(downsample, "SUPERSEDED_IDLE_SECONDS", 0.0)
    for last in (300, 700, 1500, 3000):
        grow_to(last)
        read_series(session, run_id=run_id, max_points=200, generation=1)
        assert widths() == [downsample.live_width(1, last, 200)], last
    # Two readers at different max_points, both active: each keeps its width.
    monkeypatch.setattr(downsample, "SUPERSEDED_IDLE_SECONDS", 3600.0)
    for last in (3050, 3100):  # the 200-point reader stays at its width of 3000 points
        grow_to(last)
        read_series(session, run_id=run_id, max_points=200, generation=1)
        read_series(session, run_id=run_id, max_points=1000, generation=1)
    assert downsample.live_width(1, 3100, 200) == downsample.live_width(1, 3000, 200)
    assert widths() == [downsample.live_width(1, 3100, 1000), downsample.live_width(1, 3100, 200)]
