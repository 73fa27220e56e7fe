"""The live stream's reads (app/metrics/live_read.py): the points past a viewer's position, the
same whether the viewer keeps up (one joined statement) or is far behind (a bounded read per
key, a few hundred keys a statement), and a far-behind read's work bounded by its limit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from app.metrics.live_read import _KEYS_PER_READ, read_new_points
from app.metrics.service import ingest_points
from tests.databases import KINDS, own_database, rolled_back, savepoints_on
from tests.factories import add_owned_run


@pytest.fixture(scope="module", params=KINDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with own_database(request.param, tmp_path_factory.mktemp("live"), "ty_live_read") as eng:
        yield eng


@pytest.fixture(scope="module")
def rollback_engine(engine: Engine) -> Iterator[Engine]:
    with savepoints_on(engine) as rollback:
        yield rollback


@pytest.fixture
def session(rollback_engine: Engine) -> Iterator[Session]:
    with rolled_back(rollback_engine) as sessions, sessions() as s:
        yield s


@pytest.fixture
def run_id(session: Session) -> int:
    return add_owned_run(session)


def key(i: int) -> str:
    return f"k{i:04d}"


def expected(
    points: dict[str, list[int]], after: dict[str, int], limit: int
) -> dict[str, list[int]]:
    """What read_new_points must give: new steps key by key in key order, `limit` in all."""
    out: dict[str, list[int]] = {}
    for k in sorted(points):
        new = [s for s in points[k] if s > after.get(k, -(2**63))][:limit]
        if new:
            out[k] = new
            limit -= len(new)
        if limit == 0:
            break
    return out


def steps_of(series: dict[str, dict[str, list[float]]]) -> dict[str, list[int]]:
    return {k: [int(s) for s in v["step"]] for k, v in series.items()}


def test_far_behind_and_keeping_up_read_the_same_points(session: Session, run_id: int) -> None:
    # More keys than one statement of the far-behind read takes, 30 points each.
    n_keys = _KEYS_PER_READ + 60
    points = {key(i): list(range(1, 31)) for i in range(n_keys)}
    ingest_points(
        session,
        run_id=run_id,
        points=[(k, s, s / 10, 1000.0 + s) for k, steps in points.items() for s in steps],
    )
    # From nothing, a limit that ends inside a key past the first statement's keys.
    limit = (_KEYS_PER_READ + 20) * 30 + 7
    first = read_new_points(session, run_id=run_id, after={}, limit=limit)
    assert steps_of(first) == expected(points, {}, limit)
    assert list(first) == sorted(first)  # key order, as the stream's cursor assumes
    assert first[key(0)]["value"][:2] == [0.1, 0.2]
    assert first[key(0)]["time"][:2] == [1001.0, 1002.0]

    # Where that read stopped, the rest: the far-behind way again (a key not seen yet).
    after = {k: s[-1] for k, s in steps_of(first).items()}
    rest = read_new_points(session, run_id=run_id, after=after, limit=100_000)
    assert steps_of(rest) == expected(points, after, 100_000)

    # Caught up: nothing; then a few new points a key, read the keeping-up way, the same.
    caught_up = {k: 30 for k in points}
    assert read_new_points(session, run_id=run_id, after=caught_up) == {}
    ingest_points(
        session,
        run_id=run_id,
        points=[(key(i), s, 0.5, 2000.0 + s) for i in range(0, n_keys, 3) for s in (31, 32)],
    )
    for i in range(0, n_keys, 3):
        points[key(i)] += [31, 32]
    for limit in (5, 1_000):
        got = read_new_points(session, run_id=run_id, after=caught_up, limit=limit)
        assert steps_of(got) == expected(points, caught_up, limit)
    # Within a key range (the stream's window of keys).
    window = read_new_points(
        session, run_id=run_id, after=caught_up, keys=(key(3), key(9)), limit=1_000
    )
    assert steps_of(window) == {key(3): [31, 32], key(6): [31, 32], key(9): [31, 32]}


def test_a_far_behind_read_does_not_read_the_whole_backlog(
    session: Session, run_id: int, engine: Engine
) -> None:
    """A viewer 100,000 points behind reads a limit's worth, not the backlog: before, on a
    PostgreSQL table without statistics yet (a fresh run's points), the one joined statement
    read every new point of every key and sorted them all (0.5-1 s a poll, bench/flood.py)."""
    if engine.dialect.name != "postgresql":
        pytest.skip("the rows a statement reads: PostgreSQL's per-transaction table counters")
    ingest_points(
        session,
        run_id=run_id,
        points=[(key(i), s, 0.5, 1000.0 + s) for i in range(20) for s in range(1, 5_001)],
    )
    after = {key(i): 0 for i in range(20)}  # seen, but nothing of them yet

    def fetched() -> int:
        return int(
            session.execute(
                text(
                    "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)"
                    " FROM pg_stat_xact_user_tables WHERE relname = 'metrics'"
                )
            ).scalar_one()
        )

    before = fetched()
    got = read_new_points(session, run_id=run_id, after=after, limit=1_000)
    read = fetched() - before
    assert steps_of(got) == {key(0): list(range(1, 1_001))}
    # A limit's worth, or at worst the one key it stops in (5,000): never all 100,000.
    assert read <= 5_000 + 1_000, read
