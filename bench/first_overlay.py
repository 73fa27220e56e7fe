"""A fresh server's first overlay: 100 runs x 2 keys x 10,000 points, the two GET
/api/compare/metrics requests the compare and experiment pages send (one per key,
`max_points=300&with_time=true`, sent together as the browser does), timed on a server process
started for that round and asked nothing before but a token (its caches empty).

Fills a fresh database (SQLite in a temporary data dir, or --database-url: an empty
PostgreSQL database, migrated here) through ingest_points (the forwarder's path, which keeps
each series' overview: app/metrics/overview/), then alternates rounds of two kinds on the
same database, each on a new server process:
- overview: as shipped, the series read from their overviews (app/metrics/overlay.py);
- points: the overviews moved aside first, so every series is downsampled from its points
  (the live path, what every first overlay did before the overviews);
and prints each kind's median, the overview's ratio to the 1 s target (issue 43) and to the points
kind, and the load average.

    .venv/bin/python bench/first_overlay.py [--runs 100] [--points 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KEYS = ("train/loss", "val/acc")
TARGET_S = 1.0  # issue 43 (1.5 s before)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--max-points", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="torchyard-bench-"))
    password = "bench-password"
    os.environ.update(
        TORCHYARD_DATA_DIR=str(data_dir),
        TORCHYARD_ADMIN_PASSWORD=password,
        TORCHYARD_BROKER_URL="memory://",
        PYTHONPATH=str(Path(__file__).resolve().parent.parent),
    )
    if args.database_url:
        os.environ["TORCHYARD_DATABASE_URL"] = args.database_url
    else:
        os.environ.pop("TORCHYARD_DATABASE_URL", None)

    import httpx

    from app.db import session_scope
    from app.prestart import prestart
    from app.runs.models import Run
    from bench.ui_overlay import seed
    from tests.stack import free_port, start_logged, stop_process, wait_healthy
    from torchyard.compose.processes import server_argv

    prestart()
    t0 = time.perf_counter()
    exp_id = seed(args.runs, args.points)
    print(f"ingest with overviews: {time.perf_counter() - t0:.1f} s")
    with session_scope() as session:
        ids = [r.id for r in session.query(Run).filter_by(experiment_id=exp_id)]
    runs = ",".join(map(str, ids))

    def set_aside(aside: bool) -> None:
        """Move the overviews to a side table (points kind) or back (overview kind)."""
        with session_scope() as session:
            conn = session.connection()
            if aside:
                conn.exec_driver_sql("CREATE TABLE bench_aside AS SELECT * FROM metric_overviews")
                conn.exec_driver_sql("DELETE FROM metric_overviews")
            else:
                conn.exec_driver_sql("INSERT INTO metric_overviews SELECT * FROM bench_aside")
                conn.exec_driver_sql("DROP TABLE bench_aside")

    def first_overlay() -> tuple[float, float]:
        """(both requests sent together, the slower of the two alone) on a new server."""
        port = free_port()
        log = data_dir / "server.log"
        server = start_logged(server_argv("127.0.0.1", port), dict(os.environ), log)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, server, log)
            with httpx.Client(base_url=base, timeout=120) as client:
                token = client.post(
                    "/api/auth/token", data={"username": "admin", "password": password}
                ).json()["access_token"]
                headers = {"Authorization": f"Bearer {token}"}

                def one(key: str) -> float:
                    query = {"runs": runs, "keys": key, "max_points": args.max_points}
                    start = time.perf_counter()
                    r = client.get(
                        "/api/compare/metrics",
                        params={**query, "with_time": "true"},
                        headers=headers,
                    )
                    took = time.perf_counter() - start
                    assert r.status_code == 200, r.text
                    series = [s["series"][key] for s in r.json()["runs"].values()]
                    assert len(series) == args.runs
                    for s in series:
                        assert s["step"][0] == 1 and s["step"][-1] == args.points, "ends kept"
                        assert args.max_points // 4 <= len(s["step"]) <= args.max_points
                    return took

                start = time.perf_counter()
                with ThreadPoolExecutor(len(KEYS)) as pool:
                    each = list(pool.map(one, KEYS))
                return time.perf_counter() - start, max(each)
        finally:
            stop_process(server)

    results: dict[str, list[tuple[float, float]]] = {"overview": [], "points": []}
    for i in range(args.rounds):
        for kind in ("overview", "points") if i % 2 == 0 else ("points", "overview"):
            if kind == "points":
                set_aside(True)
            try:
                results[kind].append(first_overlay())
            finally:
                if kind == "points":
                    set_aside(False)
            both, slower = results[kind][-1]
            print(f"  round {i + 1} {kind:8}: both requests {both * 1000:.0f} ms")
    medians = {k: statistics.median(b for b, _ in v) for k, v in results.items()}
    for kind, rounds in results.items():
        totals = [b for b, _ in rounds]
        print(
            f"{kind:8}: a fresh server's first overlay ({args.runs} runs x {len(KEYS)} keys x "
            f"{args.points:,} points) {medians[kind] * 1000:.0f} ms, median of {len(totals)} "
            f"(min {min(totals) * 1000:.0f}, max {max(totals) * 1000:.0f})"
        )
    print(
        f"overview: ratio to the {TARGET_S} s target {medians['overview'] / TARGET_S:.2f}; "
        f"ratio to points {medians['overview'] / medians['points']:.2f}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
