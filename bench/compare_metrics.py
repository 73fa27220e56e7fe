"""The experiment page's overlay, server side: the two GET /api/compare/metrics requests (one
per key) for 100 runs x 2 keys x 10,000 points, timed in-process, cold and warm.

Fills a fresh database (SQLite in a temporary data dir, or --database-url: an empty
PostgreSQL database, migrated here) the way bench/ui_overlay.py does (ingest_points, the
forwarder's path), then asks what the page asks (`runs=<all>&keys=<key>&max_points=300&
with_time=true`) through the app in-process (auth, reads, JSON), key after key:
- cold: the server's downsample cache emptied first (a restarted server; what every load was
  while the cache held fewer series than a page reads);
- warm: the same requests again (a reload, another viewer).
Medians of --repeats rounds of both requests.

    .venv/bin/python bench/compare_metrics.py [--runs 100] [--points 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KEYS = ("train/loss", "val/acc")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--max-points", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data_dir = tempfile.TemporaryDirectory(prefix="torchyard-bench-")
    password = "bench-password"
    os.environ.update(
        TORCHYARD_DATA_DIR=data_dir.name,
        TORCHYARD_ADMIN_PASSWORD=password,
        TORCHYARD_BROKER_URL="memory://",
    )
    if args.database_url:
        os.environ["TORCHYARD_DATABASE_URL"] = args.database_url
    else:
        os.environ.pop("TORCHYARD_DATABASE_URL", None)

    from fastapi.testclient import TestClient

    from app.main import create_app

    try:
        from app.metrics import live_downsample as cache
    except ImportError:  # a tree from before the cache had a module of its own
        from app.metrics import downsample as cache  # type: ignore[no-redef]
    from app.prestart import prestart
    from bench.ui_overlay import seed

    prestart()
    seed(args.runs, args.points)
    with TestClient(create_app()) as client:
        token = client.post(
            "/api/auth/token", data={"username": "admin", "password": password}
        ).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        ids = client.get("/api/runs", params={"limit": 1000}, headers=headers).json()["runs"]
        runs = ",".join(str(r["id"]) for r in ids)

        def page() -> list[float]:
            """Both requests, one after the other (the browser sends them together, and the
            server reads them on two threads; one after the other is the sum of the work)."""
            took = []
            cpu0 = time.process_time()
            for key in KEYS:
                query = {"runs": runs, "keys": key, "max_points": args.max_points}
                t0 = time.perf_counter()
                r = client.get(
                    "/api/compare/metrics", params={**query, "with_time": "true"}, headers=headers
                )
                took.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
                series = [s["series"][key] for s in r.json()["runs"].values()]
                assert len(series) == args.runs
                for s in series:
                    assert s["step"][0] == 1 and s["step"][-1] == args.points, "ends kept"
                    assert len(s["step"]) <= args.max_points
            cpu.append(time.process_time() - cpu0)
            return took

        cpu: list[float] = []  # this process's CPU time per page (the box is shared)
        results: dict[str, list[list[float]]] = {"cold": [], "warm": []}
        for _ in range(args.repeats):
            cache.clear_live_cache()
            results["cold"].append(page())
            results["warm"].append(page())
        for offset, (name, rounds) in enumerate(results.items()):
            totals = [sum(r) for r in rounds]
            cpus = cpu[offset::2]
            each = [f"{statistics.median(r[i] for r in rounds) * 1000:.0f}" for i in range(2)]
            print(
                f"{name}: both requests {statistics.median(totals) * 1000:.0f} ms "
                f"(min {min(totals) * 1000:.0f}, max {max(totals) * 1000:.0f}; "
                f"per key {' + '.join(each)} ms; CPU {statistics.median(cpus) * 1000:.0f} ms), "
                f"median of {len(totals)}"
            )
        if hasattr(cache, "cached_points"):  # absent before the cache counted points
            print(f"cache after the page: {cache.cached_points():,} points")
    data_dir.cleanup()


if __name__ == "__main__":
    main()
