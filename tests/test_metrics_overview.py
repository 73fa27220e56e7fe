"""app.metrics.overview (kept at ingest) and app.metrics.overlay (read from it), on SQLite and
PostgreSQL (when TORCHYARD_TEST_POSTGRES_URL is set): the overview is always the downsample of
the points stored, whatever order, repeats and non-finite values ingest met, and after a
requeue's deletion; the overlay answers from it without reading a point."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, delete, event, select
from sqlalchemy.orm import Session

from app.metrics.finite import BIGGEST, json_values
from app.metrics.ingest import ingest_points, ingest_steps
from app.metrics.live_downsample import clear_live_cache
from app.metrics.models import Metric, MetricKey, MetricOverview
from app.metrics.overlay import read_overlay
from app.metrics.overview.points import MAX_BUCKETS
from app.metrics.overview.stored import drop_overviews, read_overviews
from app.metrics.service import OVERVIEW_SPAN, LiveRun, read_runs_series, read_series
from tests.databases import KINDS, own_database, rolled_back, savepoints_on
from tests.factories import add_owned_run


@pytest.fixture(scope="module", params=KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with own_database(request.param, tmp_path_factory.mktemp("overview"), "ty_overview") as eng:
        with savepoints_on(eng) as rollback:
            yield rollback


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """Rolled back after the test, its commits included."""
    with rolled_back(engine) as sessions, sessions() as s:
        yield s


@pytest.fixture
def run_id(session: Session) -> int:
    return add_owned_run(session)


Stored = dict[int, tuple[float | None, float]]  # step -> (value, wall time)


def stored(session: Session, run_id: int, key: str) -> Stored:
    """The points the database holds: the truth the overview must agree with."""
    series = read_series(session, run_id=run_id, keys=[key], with_time=True)[key]
    return dict(zip(series["step"], zip(series["value"], series["time"], strict=True), strict=True))


def reference(points: Stored, width: int) -> list[tuple[int, float | None, float]]:
    """Each bucket's min and max point (NULL losing, earliest step on ties, a NULL-only
    bucket's first point) and the two ends, written out plainly."""
    buckets: dict[int, list[int]] = defaultdict(list)
    for step in sorted(points):
        buckets[step // width].append(step)
    keep = {min(points), max(points)}
    for steps in buckets.values():
        finite = [s for s in steps if points[s][0] is not None]
        if not finite:
            keep.add(steps[0])
            continue
        keep.add(min(finite, key=lambda s: (points[s][0], s)))
        keep.add(min(finite, key=lambda s: (-(points[s][0] or 0.0), s)))
    return [(s, *points[s]) for s in sorted(keep)]


def overview_width(steps: list[int]) -> int:
    width = 1
    while len({s // width for s in steps}) > MAX_BUCKETS:
        width *= 2
    return width


def view_width(steps: list[int], max_points: int) -> int:
    width, budget = overview_width(steps), (max_points - 2) // 2
    while max(steps) // width - min(steps) // width + 1 > budget:
        width *= 2
    return width


def expected_view(points: Stored, max_points: int) -> dict[str, list[Any]]:
    steps = sorted(points)
    if len(steps) <= max_points:
        kept = [(s, *points[s]) for s in steps]
    else:
        kept = reference(points, view_width(steps, max_points))
    return {
        "step": [p[0] for p in kept],
        "value": [p[1] for p in kept],
        "time": [p[2] for p in kept],
    }


def kept_overview(session: Session, run_id: int, key: str) -> tuple[int, list[tuple[Any, ...]]]:
    (key_id,) = session.scalars(
        select(MetricKey.id).where(MetricKey.run_id == run_id, MetricKey.key == key)
    )
    width, points = read_overviews(session.connection(), [key_id])[key_id]
    steps, values, times = points.lists()
    # as JSON carries it, as read_series gives the stored points (app/metrics/finite.py)
    return width, list(zip(steps, json_values(values), times, strict=True))


def assert_agrees(session: Session, run_id: int, key: str, *, dense: bool = True) -> None:
    """The overview and its views are the reference downsample of the stored points; a
    `dense` series' views (no gap in its steps) hold at least a quarter of max_points."""
    points = stored(session, run_id, key)
    width, kept = kept_overview(session, run_id, key)
    assert width == overview_width(list(points))
    assert kept == reference(points, width)
    for max_points in (4, 100, 300, 1000):
        runs = [LiveRun(id=run_id, generation=1, growing=False)]
        got = read_overlay(session, runs=runs, keys=[key], max_points=max_points, with_time=True)
        view = got[run_id][key]
        assert view == expected_view(points, max_points)
        assert len(view["step"]) <= max_points
        if dense:
            assert len(view["step"]) >= min(len(points), max_points // 4)


def noisy(rng: random.Random, step: int) -> float:
    roll = rng.random()
    if roll < 0.02:
        return math.nan
    if roll < 0.03:
        return math.inf if roll < 0.025 else -math.inf
    if roll < 0.035:
        return 1000.0  # a spike
    return math.sin(step / 300) + rng.random() / 10


def test_out_of_order_batches_repeats_and_non_finite_values(session: Session, run_id: int) -> None:
    """Batches in a shuffled order, each by one of the two entry points, some replaying steps
    already stored with other values (the first point is kept), one repeating a step within
    itself, NaN stored as NULL and +/-inf as they are, a stretch of NULLs only: the overview is the
    downsample of what is stored, after every batch."""
    rng = random.Random(31)
    steps = list(range(0, 9000, 2)) + list(range(20_000, 26_000, 3))  # a gap, two densities
    batches = [steps[i : i + rng.randint(1, 700)] for i in range(0, len(steps), 350)]
    rng.shuffle(batches)
    done: list[int] = []
    for n, batch in enumerate(batches):
        values = {s: (math.nan if 3000 <= s < 3400 else noisy(rng, s)) for s in batch}
        if n % 3 == 0:
            lines = [(s, 1e9 + s, {"loss": values[s]}) for s in batch]
            ingest_steps(session, run_id=run_id, steps=lines)
        else:
            points = [("loss", s, values[s], 1e9 + s) for s in batch]
            if n % 4 == 1:  # a repeat inside the batch, and earlier steps with other values
                points = [*points, ("loss", batch[0], -500.0, 0.0)]
                points += [("loss", s, -700.0, 1.0) for s in done[:200:7]]
            ingest_points(session, run_id=run_id, points=points)
        done += batch
        if n % 5 == 0:
            assert_agrees(session, run_id, "loss", dense=False)
    assert_agrees(session, run_id, "loss", dense=False)
    finite = [v for v, _ in stored(session, run_id, "loss").values() if v is not None]
    assert min(v for v in finite if v != -BIGGEST) > -2  # the first point of a step kept
    assert -BIGGEST in finite and BIGGEST in finite  # -inf and +inf kept, as the largest doubles


def test_a_short_series_goes_whole_and_a_long_one_doubles_its_width(
    session: Session, run_id: int
) -> None:
    """The long series: 200,000 steps logged every 8th (25,000 points, 8 to 32 a bucket): its
    widths are those of every step logged (64, 128, 256, 256 after each quarter), at an eighth
    of the points to store and check."""
    ingest_points(session, run_id=run_id, points=[("short", s, s / 2, 5.0 + s) for s in (5, 1, 3)])
    for first in range(1, 200_001, 50_000):
        chunk = [("long", s, math.cos(s), float(s)) for s in range(first, first + 50_000, 8)]
        ingest_points(session, run_id=run_id, points=chunk)
        assert_agrees(session, run_id, "long")
    assert kept_overview(session, run_id, "short") == (
        1,
        [(1, 0.5, 6.0), (3, 1.5, 8.0), (5, 2.5, 10.0)],
    )
    width, kept = kept_overview(session, run_id, "long")
    assert width == 256 and len(kept) <= 2 * MAX_BUCKETS + 2


def test_a_requeued_attempt_rewriting_steps_is_drawn_from_its_new_points(
    session: Session, run_id: int
) -> None:
    """A requeue deletes the points past the checkpoint (app.runs.state.recovery.requeue) and drops
    the overviews (an overview cannot lose a point): the overlay reads the series the live
    way meanwhile, and the next attempt's first batch builds the overview again from every
    point left, its own included."""
    ingest_points(
        session, run_id=run_id, points=[("loss", s, 10.0 + s, float(s)) for s in range(1, 4001)]
    )
    (key_id,) = session.scalars(select(MetricKey.id).where(MetricKey.run_id == run_id))
    session.execute(delete(Metric).where(Metric.key_id == key_id, Metric.step > 1500))
    drop_overviews(session, key_ids=[key_id])
    runs = [LiveRun(id=run_id, generation=2, growing=True)]
    between = read_overlay(session, runs=runs, keys=["loss"], max_points=300)
    assert between == read_runs_series(session, runs=runs, keys=["loss"], max_points=300)
    assert between[run_id]["loss"]["step"][-1] == 1500
    again = [("loss", s, -float(s), 1e6 + s) for s in range(1501, 3001)]
    ingest_points(session, run_id=run_id, points=again)
    assert_agrees(session, run_id, "loss")
    view = read_overlay(session, runs=runs, keys=["loss"], max_points=300)[run_id]["loss"]
    assert view["step"][-1] == 3000 and view["value"][-1] == -3000.0
    assert min(v for v in view["value"] if v is not None) == -3000.0


def test_the_overlay_reads_no_point_and_falls_back_without_an_overview(
    session: Session,
) -> None:
    """100 runs x 2 keys in one statement over metric_keys and metric_overviews; a series
    whose overview is missing (dropped) is read from its points, the same way as before."""
    run_ids = [add_owned_run(session) for _ in range(20)]
    for i, rid in enumerate(run_ids):
        points = [
            (k, s, math.sin(s / (i + 5)), float(s)) for k in ("a", "b") for s in range(1, 3001)
        ]
        ingest_points(session, run_id=rid, points=points)
    runs = [LiveRun(id=rid, generation=1, growing=False) for rid in run_ids]
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    bind = session.get_bind()
    event.listen(bind, "before_cursor_execute", record)
    try:
        got = read_overlay(session, runs=runs, keys=["b", "a"], max_points=300, with_time=True)
    finally:
        event.remove(bind, "before_cursor_execute", record)
    assert len(seen) == 1 and "FROM metrics " not in seen[0] + " "
    assert list(got) == run_ids and all(list(series) == ["a", "b"] for series in got.values())
    assert got[run_ids[3]]["b"] == expected_view(stored(session, run_ids[3], "b"), 300)
    (key_id,) = session.scalars(
        select(MetricKey.id).where(MetricKey.run_id == run_ids[0], MetricKey.key == "a")
    )
    session.execute(delete(MetricOverview).where(MetricOverview.key_id == key_id))
    fallback = read_overlay(session, runs=runs[:2], keys=["a", "b"], max_points=300, with_time=True)
    live = read_runs_series(session, runs=runs[:1], keys=["a"], max_points=300, with_time=True)
    assert fallback[run_ids[0]] == {"a": live[run_ids[0]]["a"], "b": got[run_ids[0]]["b"]}
    assert fallback[run_ids[1]] == got[run_ids[1]]
    big = read_overlay(session, runs=runs[:1], keys=["a"], max_points=2000)
    assert big == read_runs_series(session, runs=runs[:1], keys=["a"], max_points=2000)


def test_a_run_page_view_of_a_long_series_comes_from_its_overview(
    session: Session, run_id: int
) -> None:
    """A whole series spanning more than OVERVIEW_SPAN steps is viewed from its overview (a
    fresh server's first view of 20 x 1,000,000 steps read every point: 30.7 s, issue 43):
    its one row read, the spike and both ends kept; without an overview, the points' downsample
    as before."""
    clear_live_cache()  # the same key id, first step and origin may be another test's
    steps = range(0, 3 * OVERVIEW_SPAN, 37)
    spike = steps[len(steps) // 3]
    points = [("loss", s, 50.0 if s == spike else math.cos(s / 999), 1e9 + s) for s in steps]
    ingest_points(session, run_id=run_id, points=points)
    view = read_series(
        session, run_id=run_id, max_points=4000, generation=1, growing=False, with_time=True
    )["loss"]
    assert view == expected_view(stored(session, run_id, "loss"), 4000)
    # The overview's own buckets (the points' downsample gives more than 3,600 of 4,000).
    assert MAX_BUCKETS <= len(view["step"]) <= 2 * MAX_BUCKETS + 2
    assert view["step"][0] == steps[0] and view["step"][-1] == steps[-1]
    assert spike in view["step"] and max(view["value"]) == 50.0
    (key_id,) = session.scalars(select(MetricKey.id).where(MetricKey.run_id == run_id))
    session.execute(delete(MetricOverview).where(MetricOverview.key_id == key_id))
    fallback = read_series(session, run_id=run_id, max_points=4000, generation=1, growing=False)
    assert len(fallback["loss"]["step"]) > 0.9 * 4000 and max(fallback["loss"]["value"]) == 50.0
