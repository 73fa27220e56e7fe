"""Metric ingest and read speed through app.metrics.service, on SQLite and on PostgreSQL.

For each database (a fresh SQLite file with torchyard's pragmas; a fresh PostgreSQL database
created and dropped here), schema by Alembic:
- ingest: --points points over --keys keys, interleaved by step as the forwarder sends them,
  in batches of --batch, one session and one commit per batch (the forwarder's shape);
  targets 200k points/s on SQLite and 100k points/s on PostgreSQL;
- read: one --read-points series (in a run that also logs a second key of the same length, so
  rows interleave on disk) read with read_series(max_points=--max-points), and read raw.

    .venv/bin/python bench/ingest.py [--points 1000000] [--batch 20000] [--skip-postgres]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, create_engine, make_url  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

import app.models as models  # noqa: E402
from app.db import make_engine  # noqa: E402
from app.metrics.service import Point, count_points, ingest_points, read_series  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from tests.factories import add_run  # noqa: E402

TARGETS = {"sqlite": 200_000, "postgresql": 100_000}


@contextmanager
def sqlite_database() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="torchyard-bench-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.db'}"


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    name = f"ty_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def make_run(engine: Engine) -> int:
    with Session(engine) as session:
        user = session.query(models.User).filter_by(username="bench").one_or_none()
        if user is None:
            user = models.User(username="bench", password_hash="-")
            session.add(user)
            session.flush()
        run_id = add_run(session, owner_id=user.id)
        session.commit()
        return run_id


def make_batches(keys: list[str], points: int, batch: int, spike_at: int = -1) -> list[list[Point]]:
    """Points step by step, every key at every step; a +100 spike at step spike_at."""
    rng = random.Random(0)
    flat: list[Point] = []
    steps = points // len(keys)
    for step in range(1, steps + 1):
        wall = 1.7e9 + step * 0.01
        for i, key in enumerate(keys):
            value = math.exp(-step / 50_000) + 0.05 * rng.random() + i
            flat.append((key, step, value + (100.0 if step == spike_at else 0.0), wall))
    return [flat[i : i + batch] for i in range(0, len(flat), batch)]


def ingest_all(engine: Engine, run_id: int, batches: list[list[Point]]) -> float:
    start = time.perf_counter()
    for chunk in batches:
        with Session(engine) as session:
            ingest_points(session, run_id=run_id, points=chunk)
            session.commit()
    return time.perf_counter() - start


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """(first, best, last result) over `repeat` calls."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times[0], min(times), result


def bench(name: str, url: str, args: argparse.Namespace) -> None:
    upgrade(url)
    engine = make_engine(url)
    try:
        keys = ["train/loss", "train/acc", "val/loss", "lr"][: args.keys] + [
            f"extra/{i}" for i in range(max(args.keys - 4, 0))
        ]
        run_id = make_run(engine)
        batches = make_batches(keys, args.points, args.batch)
        total = sum(map(len, batches))
        elapsed = ingest_all(engine, run_id, batches)
        rate = total / elapsed
        target = TARGETS[name]
        print(
            f"{name:10s} ingest {total:,} points ({len(keys)} keys, batches of {args.batch:,}): "
            f"{elapsed:.2f} s = {rate:,.0f} points/s = {rate / target:.2f}x the "
            f"{target // 1000}k/s target"
        )
        with Session(engine) as session:
            start = time.perf_counter()
            again = ingest_points(session, run_id=run_id, points=batches[0])
            replay = time.perf_counter() - start
            session.commit()
            stored = count_points(session, run_id=run_id)
        print(
            f"{name:10s} replay of one stored batch: {again} new points in {replay:.3f} s; "
            f"{stored:,} points stored (expected {total:,})"
        )

        read_run = make_run(engine)
        spike = args.read_points // 3 + 7
        read_batches = make_batches(
            ["read/loss", "read/acc"], 2 * args.read_points, args.batch, spike_at=spike
        )
        elapsed = ingest_all(engine, read_run, read_batches)
        print(
            f"{name:10s} ingest {2 * args.read_points:,} points (2 keys) for the read test: "
            f"{2 * args.read_points / elapsed:,.0f} points/s"
        )

        def down() -> dict:
            with Session(engine) as session:
                return read_series(
                    session, run_id=read_run, keys=["read/loss"], max_points=args.max_points
                )

        def raw() -> dict:
            with Session(engine) as session:
                return read_series(session, run_id=read_run, keys=["read/loss"])

        first, best, result = timed(down, 5)
        series = result["read/loss"]  # type: ignore[index]
        ok = spike in series["step"] and len(series["step"]) <= args.max_points
        print(
            f"{name:10s} read_series {args.read_points:,}-point series -> "
            f"{len(series['step']):,} points: best {best:.3f} s, first {first:.3f} s "
            f"(spike kept and <= max_points: {ok})"
        )
        first, best, result = timed(raw, 2)
        print(
            f"{name:10s} read_series raw {len(result['read/loss']['step']):,} points: "  # type: ignore[index]
            f"best {best:.3f} s"
        )
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--read-points", type=int, default=500_000)
    parser.add_argument("--max-points", type=int, default=2_000)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(
            "TORCHYARD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1/test"
        ),
    )
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--skip-sqlite", action="store_true")
    args = parser.parse_args()
    if not args.skip_sqlite:
        with sqlite_database() as url:
            bench("sqlite", url, args)
    if not args.skip_postgres:
        with postgres_database(args.postgres_url) as url:
            bench("postgresql", url, args)


if __name__ == "__main__":
    main()
