"""Deleting a large run on SQLite: how long it takes, and how long another writer waits.

A run of --points points over 2 keys is deleted with ``app.runs.deletion.delete_runs`` while
another process stands in for a worker's forwarder: it commits a one-row write every 5 ms and
records how long each one waited for the write lock. Deleting the points in batches
(POINTS_BATCH per transaction) keeps that wait short: one DELETE of every point of a key makes
the forwarder wait for all of it.

    .venv/bin/python bench/delete_run.py [--points 1000000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _forwarder(run_id: int, stop: Any, ready: Any, results: Any) -> None:
    """Another process (as a worker is): a one-row commit every 5 ms, each one timed."""
    from sqlalchemy import update

    from app.db import session_scope
    from app.runs.models import Run

    waits: list[float] = []
    n = 0
    ready.set()
    while not stop.is_set():
        began = time.perf_counter()
        with session_scope() as session:
            session.execute(update(Run).where(Run.id == run_id).values(metrics_offset=n))
        waits.append(time.perf_counter() - began)
        n += 1
        time.sleep(0.005)
    results.put(waits)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=1_000_000)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="torchyard-bench-delete-")
    os.environ["TORCHYARD_DATA_DIR"] = tmp
    os.environ.pop("TORCHYARD_DATABASE_URL", None)

    from app.auth.models import User
    from app.db import session_scope
    from app.metrics.ingest import ingest_steps
    from app.migrate import upgrade
    from app.runs import deletion
    from app.settings import get_settings
    from tests.factories import add_run

    upgrade(get_settings().resolved_database_url)
    with session_scope() as session:
        user = User(username="bench", password_hash="x", role="member")
        session.add(user)
        session.flush()
        victim = add_run(session, owner_id=user.id, status="succeeded")
        other = add_run(session, owner_id=user.id, status="running")
    half = args.points // 2
    for start in range(1, half + 1, 50_000):
        with session_scope() as session:
            steps = [
                (s, 1.0, {"a": float(s), "b": 1.0 / s})
                for s in range(start, min(start + 50_000, half + 1))
            ]
            ingest_steps(session, run_id=victim, steps=steps)
    get_settings().run_dir(victim).mkdir(parents=True, exist_ok=True)

    stop = multiprocessing.Event()
    ready = multiprocessing.Event()
    results: multiprocessing.Queue[list[float]] = multiprocessing.Queue()
    writer = multiprocessing.Process(target=_forwarder, args=(other, stop, ready, results))
    writer.start()
    ready.wait()
    time.sleep(0.2)
    began = time.perf_counter()
    deletion.delete_runs([victim])
    took = time.perf_counter() - began
    time.sleep(0.2)
    stop.set()
    waits = results.get()
    writer.join()
    print(f"deleted {args.points:,} points in {took:.2f} s ({args.points / took:,.0f} points/s)")
    print(
        f"a concurrent writer's {len(waits)} commits: median {statistics.median(waits) * 1000:.1f}"
        f" ms, max {max(waits) * 1000:.1f} ms (batch of {deletion.POINTS_BATCH:,} points)"
    )


if __name__ == "__main__":
    main()
