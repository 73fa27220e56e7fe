"""100,000 distinct metric keys in one experiment (issue 43): the pickers' key search and the
size of every list answer.

Targets: the chart-key and column pickers search the keys in < 200 ms
(GET /api/experiments/{id}/keys?q=..., app/metrics/key_search.py); every list answer < 100 KB
(that search, GET /api/runs as the page asks it: `summary_first=0` and its columns' keys, the
experiment page itself). The API's default list (50 summaries a run) is measured beside it.
In the page, in Chromium: bench/picker_search.py --keys-data on the same data.

The data goes in through the public path, the MLflow API: an experiment
(experiments/create), --runs runs (runs/create) and --keys-per-run distinct keys a run, one
point each, in log-batch requests of 1,000 (MLflow's limit per request): --runs x
--keys-per-run distinct keys (default 100 x 1,000 = 100,000; torchyard's per-run limit is
10,000 keys). Names as a real project's: `<group>/<layer>/<stat>` spread over groups. The
building is timed; --reuse keeps data built before in --data-dir (SQLite) or --database-url
(PostgreSQL: an empty database of its own, migrated here). Each figure: median of --repeats
after a warm-up, min-max, the load average.

    .venv/bin/python bench/scale_keys.py [--runs 100] [--keys-per-run 1000] [--data-dir DIR] \\
        [--reuse] [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/DB]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale_runs import load, server  # noqa: E402

SEARCH_TARGET_S = 0.2
SIZE_TARGET = 100 * 1024
# (no sys/: the MLflow API refuses a key under sys/, the system series, since 5d31e18)
GROUPS = ["train", "val", "grad", "weights", "act", "opt"]
STATS = ["mean", "std", "norm", "max", "min"]
# the empty search (the picker's first list), a word in one key, a group (1/6 of the keys), a
# part of the names that picks ~100 (any case), one key exactly, a word found nowhere
SEARCHES = ["", "loss", "grad/", "layer_0500", "LAYER_077777/STD", "nothing-like-this"]


def key_name(run: int, j: int) -> str:
    """The j-th key of run `run`: distinct across runs (layer numbers per run)."""
    group = GROUPS[j % len(GROUPS)]
    layer = run * 1000 + j // len(STATS)
    return f"{group}/layer_{layer:06d}/{STATS[j % len(STATS)]}" if j else "train/loss"


def build(http: Any, args: argparse.Namespace) -> None:
    """Runs and keys through the MLflow API (what a user's `mlflow.log_metrics` sends)."""
    t0 = time.perf_counter()
    body = {"name": "scale-keys"}
    exp = http.post("/api/2.0/mlflow/experiments/create", json=body).json()["experiment_id"]
    now = int(time.time() * 1000)
    for run in range(args.runs):
        made = http.post(
            "/api/2.0/mlflow/runs/create", json={"experiment_id": exp, "run_name": f"r{run}"}
        )
        made.raise_for_status()
        run_id = made.json()["run"]["info"]["run_id"]
        for start in range(0, args.keys_per_run, 1000):
            metrics = [
                {"key": key_name(run, j), "value": (j % 97) / 97, "timestamp": now, "step": 1}
                for j in range(start, min(start + 1000, args.keys_per_run))
            ]
            r = http.post(
                "/api/2.0/mlflow/runs/log-batch", json={"run_id": run_id, "metrics": metrics}
            )
            r.raise_for_status()
        # finished, as a script's `mlflow.end_run()` leaves it (a running run makes the page
        # poll its list and series while the pickers are timed)
        ended = {"run_id": run_id, "status": "FINISHED", "end_time": now}
        http.post("/api/2.0/mlflow/runs/update", json=ended).raise_for_status()
        if run % 10 == 9:
            print(f"  {run + 1} runs, {(run + 1) * args.keys_per_run:,} keys, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
    print(f"built {args.runs * args.keys_per_run:,} keys ({args.runs} runs) through the MLflow API"
          f" in {time.perf_counter() - t0:.1f} s ({load()})", flush=True)  # fmt: skip


def make_user(url: str) -> None:
    from sqlalchemy.orm import Session

    from app.auth.service import create_user
    from app.db import make_engine

    engine = make_engine(url)
    with Session(engine) as session:
        create_user(session, username="bench", password="bench-password", role="member")
        session.commit()
    engine.dispose()


def timed(http: Any, url: str, params: dict[str, Any], repeats: int) -> tuple[list[float], Any]:
    times = []
    r = None
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        r = http.get(url, params=params)
        took = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        if i:
            times.append(took)
    return times, r


def report(label: str, times: list[float], size: int, target: float) -> None:
    median = statistics.median(times)
    print(
        f"  {label}: median of {len(times)} {median * 1000:.1f} ms (min {min(times) * 1000:.1f},"
        f" max {max(times) * 1000:.1f}); {median / target:.2f}x the {target * 1000:.0f} ms target;"
        f" {size / 1024:.1f} KB ({size / SIZE_TARGET:.2f}x the 100 KB bound); {load()}",
        flush=True,
    )


def main() -> None:
    import httpx

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--keys-per-run", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/torchyard-scale-keys"))
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    url = args.database_url or f"sqlite:///{args.data_dir / 'own.db'}"
    os.environ["TORCHYARD_DATABASE_URL"] = url
    stack = url.split(":")[0].split("+")[0]
    marker = args.data_dir / f"built-keys-{stack}-{args.runs}x{args.keys_per_run}"
    fresh = not (args.reuse and marker.exists())
    if fresh and marker.exists():
        sys.exit(f"{args.data_dir} holds data already: --reuse, or a fresh --data-dir")
    from app.migrate import upgrade

    upgrade(url)
    if fresh:
        make_user(url)
    print(f"{stack}: {args.runs * args.keys_per_run:,} keys in one experiment; {load()}")
    with server(url, args.data_dir) as base, httpx.Client(base_url=base, timeout=600) as http:
        body = {"username": "bench", "password": "bench-password"}
        token = http.post("/api/auth/token", data=body).json()["access_token"]
        http.headers["Authorization"] = f"Bearer {token}"
        if fresh:
            build(http, args)
            marker.write_text(load())
        if url.startswith("postgresql"):
            from bench.runs_list import analyze

            analyze(url)  # the statistics autovacuum gives within a minute (off on this box)
        exps = http.get("/api/experiments").json()
        exp = next(e["id"] for e in exps if e["name"] == "scale-keys")
        for q in SEARCHES:
            times, r = timed(
                http, f"/api/experiments/{exp}/keys", {"q": q, "limit": 200}, args.repeats
            )
            got = r.json()
            shown = f"q={q!r}: {len(got['keys'])} keys{', more' if got['more'] else ''}"
            report(f"key search {shown}", times, len(r.content), SEARCH_TARGET_S)
        for limit in (25, 100):
            query = {"experiment_id": exp, "limit": limit, "sort": "-id"}
            times, r = timed(http, "/api/runs", query, args.repeats)
            report(f"GET /api/runs limit={limit}", times, len(r.content), 1.0)
            # as the experiment page's table asks: its shown columns' summaries alone (a loss
            # and a key found by the column picker's search)
            columns = ["train/loss", key_name(args.runs // 2, args.keys_per_run // 2)]
            page_query = query | {"summary_first": 0, "summary_keys": columns}
            times, r = timed(http, "/api/runs", page_query, args.repeats)
            report(f"GET /api/runs limit={limit} as the page asks", times, len(r.content), 1.0)
        with httpx.Client(base_url=base, timeout=600) as browser:
            browser.post("/login", data=body | {"next": "/"})  # 303 to "/" with the cookie
            times, r = timed(browser, f"/experiments/{exp}", {}, args.repeats)
            report("the experiment page (HTML)", times, len(r.content), 1.0)
    print(f"done; {load()}", flush=True)


if __name__ == "__main__":
    main()
