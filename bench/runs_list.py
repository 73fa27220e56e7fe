"""The runs list at scale: GET /api/runs over 10,000 runs, sorted by a summary field and
filtered by a param condition (issue 17's target: under 200 ms).

Builds a fresh database (schema by Alembic) with --runs runs of one owner, each with --params
params (as run_params rows, the way lifecycle.queue records a config) and --keys metric keys
whose summaries are set directly (what ingest keeps up to date; the points themselves play no
part in listing, which is the point). Then times the request as the API serves it, through the
app in-process (auth, query, params/tags/summaries of the page, JSON): the first page of
`sort=-summary.val/acc.max&filter=params.params.lr>0.01&limit=100`, median of --repeats.

    .venv/bin/python bench/runs_list.py [--database-url URL] [--runs 10000] [--repeats 20]

Without --database-url a temporary SQLite file is used. With one (e.g.
postgresql+psycopg://user:pw@host/db), the database must be empty: it is migrated and filled.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_MS = 200.0


def fill(url: str, *, runs: int, params: int, keys: int) -> None:
    from sqlalchemy import insert, select
    from sqlalchemy.orm import Session

    from app.auth.models import User
    from app.auth.service import create_user
    from app.db import make_engine
    from app.experiments.models import Experiment
    from app.metrics.models import MetricKey
    from app.runs.models import Run, RunParam

    engine = make_engine(url)
    rng = random.Random(17)
    with engine.begin() as conn:
        with Session(bind=conn) as session:
            create_user(session, username="bench", password="bench-password", role="member")
            session.flush()
        owner_id = conn.execute(select(User.id).where(User.username == "bench")).scalar_one()
        exp = conn.execute(
            insert(Experiment)
            .values(name="bench", config={}, owner_id=owner_id)
            .returning(Experiment.id)
        ).scalar_one()
        run_rows = [
            {"experiment_id": exp, "owner_id": owner_id, "status": "succeeded", "config": {},
             "seed": i}
            for i in range(runs)
        ]  # fmt: skip
        conn.execute(insert(Run), run_rows)
        ids = list(conn.execute(select(Run.id).order_by(Run.id)).scalars())
        param_rows = []
        key_rows = []
        for run_id in ids:
            lr = 10 ** rng.uniform(-4, -1)
            param_rows.append(
                {"run_id": run_id, "key": "params.lr", "source": "config", "value": lr,
                 "value_num": lr, "value_text": None}
            )  # fmt: skip
            for p in range(params - 1):
                v = rng.randint(0, 1000)
                param_rows.append(
                    {"run_id": run_id, "key": f"params.p{p}", "source": "config", "value": v,
                     "value_num": float(v), "value_text": None}
                )  # fmt: skip
            names = ["val/acc", *(f"train/k{k}" for k in range(keys - 1))]
            for name in names:
                lo, hi = sorted((rng.random(), rng.random()))
                key_rows.append(
                    {"run_id": run_id, "key": name, "last_value": hi, "min_value": lo,
                     "max_value": hi, "last_step": 1000}
                )  # fmt: skip
            if len(param_rows) > 50_000:
                conn.execute(insert(RunParam), param_rows)
                conn.execute(insert(MetricKey), key_rows)
                param_rows, key_rows = [], []
        if param_rows:
            conn.execute(insert(RunParam), param_rows)
            conn.execute(insert(MetricKey), key_rows)
    engine.dispose()


def analyze(url: str) -> None:
    """PostgreSQL's ANALYZE of the whole database (what autovacuum does after a bulk load)."""
    from sqlalchemy import text

    from app.db import make_engine

    engine = make_engine(url)
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        conn.commit()
    engine.dispose()


def migrated_database(
    database_url: str | None,
) -> tuple[tempfile.TemporaryDirectory[str], str]:
    """A migrated database for an in-process app (--database-url, else SQLite in a temporary
    folder, which also holds the data dir), set in the environment before `app` is imported:
    its settings are read once. Keep the folder object alive while the bench runs."""
    tmp = tempfile.TemporaryDirectory(prefix="torchyard-bench-")
    url = database_url or f"sqlite:///{Path(tmp.name) / 'bench.db'}"
    os.environ["TORCHYARD_DATABASE_URL"] = url
    os.environ.setdefault("TORCHYARD_DATA_DIR", tmp.name)
    os.environ.setdefault("TORCHYARD_BROKER_URL", "memory://")

    from app.migrate import upgrade

    upgrade(url)
    return tmp, url


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--params", type=int, default=20)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    tmp, url = migrated_database(args.database_url)

    from fastapi.testclient import TestClient

    from app.main import create_app

    started = time.perf_counter()
    fill(url, runs=args.runs, params=args.params, keys=args.keys)
    print(
        f"filled {args.runs} runs x {args.params} params x {args.keys} keys "
        f"in {time.perf_counter() - started:.1f} s ({url.split(':')[0]})"
    )
    query: dict[str, str | int] = {
        "sort": "-summary.val/acc.max",
        "filter": "params.params.lr>0.01",
        "limit": 100,
    }
    with TestClient(create_app()) as client:
        token = client.post(
            "/api/auth/token", data={"username": "bench", "password": "bench-password"}
        ).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        rounds = [("", lambda: None)]
        if url.startswith("postgresql"):
            # Right after a bulk fill the tables have no planner statistics (autovacuum's
            # ANALYZE comes within a minute on a default server; this box has autovacuum off),
            # so both are measured: as filled, and after the ANALYZE a live server would have.
            rounds = [
                (" (no statistics yet)", lambda: None),
                (" (after ANALYZE)", lambda: analyze(url)),
            ]
        for label, before in rounds:
            before()
            times = []
            for _ in range(args.repeats + 1):
                t0 = time.perf_counter()
                r = client.get("/api/runs", params=query, headers=headers)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
            body = r.json()
            tops = [x["summary"]["val/acc"]["max"] for x in body["runs"]]
            assert tops == sorted(tops, reverse=True) and len(body["runs"]) == 100
            assert all(x["params"]["params.lr"] > 0.01 for x in body["runs"]) and body["next"]
            page2 = client.get(
                "/api/runs", params={**query, "cursor": body["next"]}, headers=headers
            )
            assert page2.status_code == 200
            median = statistics.median(times[1:])  # the first warms caches
            print(
                f"GET /api/runs?{'&'.join(f'{k}={v}' for k, v in query.items())}{label}: "
                f"median {median:.1f} ms (min {min(times[1:]):.1f}, max {max(times[1:]):.1f}) "
                f"over {args.repeats}; {median / TARGET_MS:.2f}x the {TARGET_MS:.0f} ms target"
            )
    tmp.cleanup()


if __name__ == "__main__":
    main()
