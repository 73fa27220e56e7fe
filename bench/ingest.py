"""Metric ingest through the worker's real path, and series reads, on SQLite and PostgreSQL.

For each database (a fresh SQLite file with torchyard's pragmas; a fresh PostgreSQL database
created and dropped here), schema by Alembic:
- ingest: a real metrics.jsonl of --points points over --keys keys, written line by line with
  the job's own encoder (torchyard.runtime.reporter), is moved into the database by
  ``worker.forwarder.forward(session, run_id=..., metrics_path=..., final=True)`` called in a
  loop until it returns 0, one session and one commit per call: what the runner's final drain
  does. Timed from the first call to the last commit; each of --repeats rounds uses a fresh
  database. Prints points/s per round and the median, against 500k points/s on SQLite and
  100k points/s on PostgreSQL; then replays the whole spool (offset reset) and checks that it
  adds no point (ON CONFLICT DO NOTHING);
- read: one --read-points series (in a run that also logs a second key of the same length, so
  rows interleave on disk) read with read_series(max_points=--max-points), and read raw.

    .venv/bin/python bench/ingest.py [--points 1000000] [--repeats 5] [--skip-postgres]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, create_engine, make_url, update  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

import app.models as models  # noqa: E402
from app.db import make_engine  # noqa: E402
from app.metrics.service import Point, count_points, ingest_points, read_series  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.runs.models import Run  # noqa: E402
from tests.factories import add_run  # noqa: E402
from torchyard.contract import METRICS_FILE  # noqa: E402
from torchyard.runtime.reporter import _encode_metrics  # noqa: E402
from worker.forwarder import forward  # noqa: E402

TARGETS = {"sqlite": 500_000, "postgresql": 100_000}


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


def key_names(count: int) -> list[str]:
    return ["train/loss", "train/acc", "val/loss", "lr"][:count] + [
        f"extra/{i}" for i in range(max(count - 4, 0))
    ]


def write_spool(path: Path, keys: list[str], points: int) -> int:
    """A metrics.jsonl as the job writes it: one line per step, every key at every step.
    Returns the number of points."""
    rng = random.Random(0)
    steps = points // len(keys)
    with open(path, "w") as f:
        for step in range(1, steps + 1):
            values: dict[str, float | None] = {
                k: math.exp(-step / 50_000) + 0.05 * rng.random() + i for i, k in enumerate(keys)
            }
            f.write(_encode_metrics(step, 1.7e9 + step * 0.01, values))
    return steps * len(keys)


def drain(engine: Engine, run_id: int, metrics_path: Path) -> int:
    """forward() until it has nothing left, a transaction per call (the runner's drain)."""
    calls = 0
    while True:
        with Session(engine) as session:
            moved = forward(session, run_id=run_id, metrics_path=metrics_path, final=True)
            session.commit()
        calls += 1
        if not moved:
            return calls


def forward_round(
    name: str, url: str, args: argparse.Namespace, spool: Path, total: int
) -> tuple[float, float]:
    """One round in a fresh database: the spool through forward(); returns points/s by the
    wall clock and by this process's CPU time (SQLite works in this process; PostgreSQL's
    server time is not in it)."""
    upgrade(url)
    engine = make_engine(url)
    try:
        run_id = make_run(engine)
        run_dir = spool.parent / f"run-{run_id}-{time.monotonic_ns()}"
        run_dir.mkdir()
        metrics_path = run_dir / METRICS_FILE
        os.link(spool, metrics_path)
        start, cpu_start = time.perf_counter(), time.process_time()
        calls = drain(engine, run_id, metrics_path)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        with Session(engine) as session:
            stored = count_points(session, run_id=run_id)
            session.execute(update(Run).where(Run.id == run_id).values(metrics_offset=0))
            session.commit()
        start = time.perf_counter()
        drain(engine, run_id, metrics_path)
        replay = time.perf_counter() - start
        with Session(engine) as session:
            after = count_points(session, run_id=run_id)
        rate = total / elapsed
        print(
            f"{name:10s} forward() {total:,} points ({args.keys} keys, {calls - 1} batches): "
            f"{elapsed:.2f} s = {rate:,.0f} points/s (by this process's CPU time: "
            f"{total / cpu:,.0f}/s); {stored:,} stored; whole spool replayed in {replay:.2f} s, "
            f"{after - stored} points added",
            flush=True,
        )
        if stored != total or after != stored:
            raise SystemExit(f"{name}: expected {total:,} points stored once, got {after:,}")
        return rate, total / cpu
    finally:
        engine.dispose()


def bench_forward(name: str, fresh_url: Callable[[], Any], args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="torchyard-spool-") as tmp:
        spool = Path(tmp) / METRICS_FILE
        total = write_spool(spool, key_names(args.keys), args.points)
        rates, cpu_rates = [], []
        for _ in range(args.repeats):
            with fresh_url() as url:
                rate, cpu_rate = forward_round(name, url, args, spool, total)
            rates.append(rate)
            cpu_rates.append(cpu_rate)
    median, cpu_median = statistics.median(rates), statistics.median(cpu_rates)
    target = TARGETS[name]
    print(
        f"{name:10s} metrics.jsonl -> forward() -> database: median {median:,.0f} points/s "
        f"over {len(rates)} rounds ({min(rates):,.0f}-{max(rates):,.0f}); target "
        f"{target // 1000}k/s; ratio {median / target:.2f} (by CPU time: median "
        f"{cpu_median:,.0f}/s, ratio {cpu_median / target:.2f})",
        flush=True,
    )


def bench_read(name: str, url: str, args: argparse.Namespace) -> None:
    upgrade(url)
    engine = make_engine(url)
    try:
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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=20_000, help="read test's ingest batches")
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
    parser.add_argument("--skip-read", action="store_true")
    args = parser.parse_args()
    if not args.skip_sqlite:
        bench_forward("sqlite", sqlite_database, args)
    if not args.skip_postgres:
        bench_forward("postgresql", lambda: postgres_database(args.postgres_url), args)
    if not args.skip_read:
        if not args.skip_sqlite:
            with sqlite_database() as url:
                bench_read("sqlite", url, args)
        if not args.skip_postgres:
            with postgres_database(args.postgres_url) as url:
                bench_read("postgresql", url, args)


if __name__ == "__main__":
    main()
