"""A live viewer catching up on a flooding run: the cost of one poll of its event stream.

A fresh database (SQLite file, or PostgreSQL with --postgres-url: a database created next to
it and dropped after, its tables never ANALYZEd, as a fresh run's points are), one run of
--keys keys x --steps steps (20 x 20,000: 400,000 points, what a 12-job flood leaves a viewer
behind by), then a stream from nothing (app.runs.streams.events.poll, as the SSE route runs it, JSON
encoding included) until it has every point. Its peer: the same positions read with the one
joined statement (app.metrics.live_read._read_joined, what every poll ran before, and what a
viewer that keeps up still runs), without the encoding. Prints the median poll and the ratio
peer / stream (> 1: the stream's poll is the cheaper).

    .venv/bin/python bench/stream_catchup.py [--postgres-url postgresql+psycopg://...]
        [--keys 20] [--steps 20000]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@contextmanager
def fresh_database(postgres_url: str | None) -> Iterator[str]:
    if postgres_url is None:
        with tempfile.TemporaryDirectory(prefix="torchyard-bench-catchup-") as tmp:
            yield f"sqlite:///{tmp}/torchyard.db"
        return
    from sqlalchemy import create_engine, make_url

    name = f"ty_catchup_{secrets.token_hex(4)}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postgres-url", help="admin URL (default: a SQLite file)")
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    with fresh_database(args.postgres_url) as url:
        os.environ["TORCHYARD_DATABASE_URL"] = url  # events.poll's sessions
        run(url, args.keys, args.steps)


def run(url: str, keys: int, steps: int) -> None:
    from sqlalchemy.orm import Session

    import app.models as models
    from app.db import make_engine
    from app.metrics.live_read import _read_joined
    from app.metrics.service import ingest_points
    from app.migrate import upgrade
    from app.runs.streams.events import StreamCursor, poll
    from tests.factories import add_run

    upgrade(url)
    engine = make_engine(url)
    with Session(engine) as s:
        user = models.User(username="bench", password_hash="-")
        s.add(user)
        s.flush()
        run_id = add_run(s, owner_id=user.id, status="succeeded")  # the stream then ends
        s.commit()
        for first in range(1, steps + 1, 5000):
            batch = range(first, min(first + 5000, steps + 1))
            ingest_points(
                s,
                run_id=run_id,
                points=[
                    (f"flood/k{k:02d}", st, 0.5, 1000.0 + st) for st in batch for k in range(keys)
                ],
            )
            s.commit()
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    cursor = StreamCursor(run_id=run_id)
    stream, positions = [], []
    while True:
        positions.append(dict(cursor.last_steps))
        t0 = time.perf_counter()
        _, done = poll(cursor)
        stream.append(time.perf_counter() - t0)
        if done:
            break
    joined = []
    for after in positions:
        with Session(engine) as s:
            t0 = time.perf_counter()
            _read_joined(s, run_id=run_id, after=after, limit=20_000, keys=None)
            joined.append(time.perf_counter() - t0)
    engine.dispose()
    kind = url.split(":", 1)[0]
    s_med, j_med = statistics.median(stream), statistics.median(joined)
    print(f"{kind}: {keys} keys x {steps:,} steps, a stream from nothing; load average {load}")
    print(f"  stream polls {len(stream)}: median {s_med * 1000:.1f} ms, all {sum(stream):.2f} s")
    print(
        f"  one joined statement at the same positions: median {j_med * 1000:.1f} ms, "
        f"all {sum(joined):.2f} s"
    )
    print(f"  ratio joined / stream (median poll): {j_med / s_med:.2f}")


if __name__ == "__main__":
    main()
