"""The compare page's run picker at scale: its search (GET /api/runs?q=...&limit=25 with the
metric shown, app/static/compare_picker.js) over --runs runs (issue 31's target: under 100 ms
at 1,000 runs).

Fills a fresh database the way bench/runs_list.py does (its fill(): --params params a run as
run_params rows, --keys metric keys with their summaries), names every tenth run and gives
every params.p0 a text value (arch-<n>), then times, through the app in-process (auth, query,
params, tags and summaries of the page, JSON), median of --repeats after one warm-up:
a word found in names, a param's text, a number, two words, a word found nowhere, the empty
search (the picker's first list) and a condition (filter=).

    .venv/bin/python bench/picker_search.py [--database-url URL] [--runs 1000] [--repeats 20]

Without --database-url a temporary SQLite file is used; with one, the database must be empty.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.runs_list import analyze, fill, migrated_database  # noqa: E402

TARGET_MS = 100.0
SEARCHES = [
    {"q": "trial-7"},
    {"q": "arch-3"},
    {"q": "0.5"},
    {"q": "arch-1 trial"},
    {"q": "nothing-like-this"},
    {"q": ""},
    {"filter": "params.p1>500"},
]


def label(url: str, runs: int) -> None:
    """Names (every tenth run: trial-<n>) and a text param (params.p0 = arch-<n % 10>) to search."""
    from sqlalchemy import select, update

    from app.db import make_engine
    from app.runs.models import Run, RunParam

    engine = make_engine(url)
    with engine.begin() as conn:
        ids = list(conn.execute(select(Run.id).order_by(Run.id)).scalars())
        for n, run_id in enumerate(ids):
            if n % 10 == 0:
                conn.execute(update(Run).where(Run.id == run_id).values(name=f"trial-{n}"))
        for d in range(10):
            conn.execute(
                update(RunParam)
                .where(RunParam.key == "params.p0", RunParam.run_id % 10 == d)
                .values(value=f"arch-{d}", value_text=f"arch-{d}", value_num=None)
            )
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--params", type=int, default=20)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--limit", type=int, default=25, help="runs a search shows (the picker: 25)"
    )
    args = parser.parse_args()
    tmp, url = migrated_database(args.database_url)

    from fastapi.testclient import TestClient

    from app.main import create_app

    fill(url, runs=args.runs, params=args.params, keys=args.keys)
    label(url, args.runs)
    if url.startswith("postgresql"):
        analyze(url)
    print(f"{args.runs} runs x {args.params} params x {args.keys} keys ({url.split(':')[0]})")
    worst = 0.0
    with TestClient(create_app()) as client:
        token = client.post(
            "/api/auth/token", data={"username": "bench", "password": "bench-password"}
        ).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        for search in SEARCHES:
            query = {**search, "limit": args.limit, "sort": "-id", "summary_keys": "val/acc"}
            times = []
            for _ in range(args.repeats + 1):
                t0 = time.perf_counter()
                r = client.get("/api/runs", params=query, headers=headers)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
            found = len(r.json()["runs"])
            median = statistics.median(times[1:])  # the first warms caches
            worst = max(worst, median)
            shown = "&".join(f"{k}={v}" for k, v in search.items())
            print(
                f"  {shown or 'q='}: {found} shown, median {median:.1f} ms "
                f"(min {min(times[1:]):.1f}, max {max(times[1:]):.1f})"
            )
    print(f"slowest median {worst:.1f} ms: {worst / TARGET_MS:.2f}x the {TARGET_MS:.0f} ms target")
    tmp.cleanup()


if __name__ == "__main__":
    main()
