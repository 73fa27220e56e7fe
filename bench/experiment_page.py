"""The experiment page at scale in headless Chromium, beside MLflow's UI on the same runs, in one
run (issue 31's targets, warm server):

- table: --runs runs (10,000) x --params params (20) x --keys metric keys (10): navigation
  start -> the runs table built from GET /api/runs (its first page, `data-loaded` set, rows in
  the body). Target < 1 s. MLflow: navigation start -> the newest run's name in its runs table.
- charts: --chart-runs runs (1,000) x --chart-keys keys (50) x --steps steps (1,000): navigation
  start (to the page's curves, #experiment-curves) -> the runs table loaded and every chart in
  the viewport drawn with all its runs' traces (the page overlays the newest 200 runs). Target
  < 1 s. MLflow: its runs table on the same runs (see the MLflow section of
  docs/performance.md for what its charts would take).

The data goes straight into each side's tables (not timed): torchyard's by bench/runs_list.fill
(runs, params as run_params rows, metric keys with their summaries) plus the points into
`metrics` as ingest writes them and each series' overview (app/metrics/overview/, as ingest
keeps it; --no-overviews leaves them out, the path of a series stored before them); MLflow's
by the python beside --mlflow into its own dbmodels (runs, params, tags, latest_metrics and
the last point of each key). Each side is a server of
its own over SQLite (torchyard: tests/own_server.py, no worker; MLflow: `mlflow server`, as
bench/mlflow_api.py). Every load is a fresh browser context after one warm-up load;
performance.now() (origin: the navigation start) is read when the page is ready.

    .venv/bin/python bench/experiment_page.py --mlflow /work/mlflow-venv/bin/mlflow \\
        [--runs 10000] [--chart-runs 1000] [--chart-keys 50] [--steps 1000] [--loads 5]

Without --mlflow (or with --skip-mlflow) only torchyard is timed.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.runs_list import fill  # noqa: E402

TARGET_S = 1.0
CURVE_RUNS = 200  # app/experiments/views.py CURVE_RUNS: the runs the page overlays

TABLE_READY = """() => {
    const s = document.getElementById("runs-section");
    const rows = document.querySelector("#runs tbody tr[data-run-id]");
    return s && s.dataset.loaded && rows ? performance.now() : false;
}"""

# The table loaded, and every chart in the viewport drawn with `runs` traces (the first time
# all hold: the later of the two).
CHARTS_READY = """(runs) => {
    const s = document.getElementById("runs-section");
    if (s && s.dataset.loaded && document.querySelector("#runs tbody tr[data-run-id]"))
        window.__tableAt = window.__tableAt || performance.now();
    if (!window.__tableAt) return false;
    const all = document.querySelectorAll("#experiment-charts .metric-chart");
    const shown = [...all].filter((el) => {
        const r = el.getBoundingClientRect();
        return !el.hidden && r.bottom > 0 && r.top < innerHeight;
    });
    if (!shown.length) return false;
    let last = window.__tableAt;
    for (const el of shown) {
        if (!el.dataset.drawnAt || Number(el.dataset.traces) !== runs) return false;
        last = Math.max(last, Number(el.dataset.drawnAt));
    }
    return [last, shown.length];
}"""

MLFLOW_READY = """(name) => document.body && document.body.textContent.includes(name)
    ? performance.now() : false"""


def add_points(db: Path, steps: int) -> int:
    """`steps` points of every metric key (as ingest stores them: one row per (key_id, step) in
    the WITHOUT ROWID table), through sqlite3's executemany: 50M rows in about a minute. Their
    overviews are built by `add_overviews` (ingest keeps them as it stores the points)."""
    conn = sqlite3.connect(db)
    keys = [k for (k,) in conn.execute("SELECT id FROM metric_keys ORDER BY id")]
    rows = (
        (k, s, 1.0 / (1 + s) + (k % 97) * 1e-3, 1e9 + s) for k in keys for s in range(1, steps + 1)
    )
    with conn:
        conn.executemany(
            "INSERT INTO metrics (key_id, step, value, wall_time) VALUES (?, ?, ?, ?)", rows
        )
        conn.execute("UPDATE metric_keys SET last_step = ?", (steps,))
    conn.close()
    return len(keys) * steps


def add_overviews(db: Path) -> None:
    """Every series' overview from its points (app.metrics.overview.stored.build_overviews, what the
    migration that added them runs), as ingest would have kept them: the page's overlay reads
    these, one row a series, not the points."""
    from sqlalchemy import text

    from app.db import make_engine
    from app.metrics.overview.stored import build_overviews

    engine = make_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        keys = [k for (k,) in conn.execute(text("SELECT id FROM metric_keys ORDER BY id"))]
    for start in range(0, len(keys), 500):
        with engine.begin() as conn:
            build_overviews(conn, key_ids=keys[start : start + 500])
    engine.dispose()


_MLFLOW_SEED = """
import random, sys, time, uuid
from sqlalchemy import insert
from mlflow.store.tracking.dbmodels.models import (
    SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag)
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
uri, artifacts, target, n, n_params, n_keys = sys.argv[1:7]
n, n_params, n_keys = int(n), int(n_params), int(n_keys)
rng = random.Random(17)
store = SqlAlchemyStore(uri, artifacts)
now = int(time.time() * 1000)
keys = ["val/acc", *(f"train/k{k}" for k in range(n_keys - 1))]
with store.ManagedSessionMaker() as session:
    runs, tags, params, metrics = [], [], [], []
    for i in range(n):
        run_id, name = uuid.uuid4().hex, f"bench-run-{i:05d}"
        runs.append(dict(
            name=name, artifact_uri=f"{artifacts}/{target}/{run_id}/artifacts",
            run_uuid=run_id, experiment_id=int(target), source_type="UNKNOWN",
            source_name="", entry_point_name="", user_id="bench", status="FINISHED",
            start_time=now + i, end_time=now + i + 1000, deleted_time=None, source_version="",
            lifecycle_stage="active"))
        tags.append(dict(run_uuid=run_id, key="mlflow.runName", value=name))
        params.append(dict(run_uuid=run_id, key="lr", value=str(10 ** rng.uniform(-4, -1))))
        params += [dict(run_uuid=run_id, key=f"p{p}", value=str(rng.randint(0, 1000)))
                   for p in range(n_params - 1)]
        metrics += [dict(run_uuid=run_id, key=k, value=rng.random(), timestamp=now, step=1000,
                         is_nan=False) for k in keys]
    for model, values in [(SqlRun, runs), (SqlTag, tags), (SqlParam, params),
                          (SqlMetric, metrics), (SqlLatestMetric, metrics)]:
        for start in range(0, len(values), 50000):
            session.execute(insert(model.__table__), values[start:start + 50000])
"""


def seed_mlflow(mlflow: str, directory: Path, url: str, name: str, args: list[int]) -> str:
    """An MLflow experiment (through its REST API) filled in its own tables; its id."""
    import httpx

    from bench.mlflow_api import _mlflow_store

    # Its UI opens a "GenAI" overview unless the experiment is marked as model training.
    kind = {"key": "mlflow.experimentKind", "value": "custom_model_development"}
    body = {"name": name, "tags": [kind]}
    r = httpx.post(f"{url}/api/2.0/mlflow/experiments/create", json=body, timeout=60)
    r.raise_for_status()
    exp_id = str(r.json()["experiment_id"])
    python = str(Path(mlflow).with_name("python"))
    argv = [python, "-c", _MLFLOW_SEED, *_mlflow_store(directory), exp_id, *map(str, args)]
    subprocess.run(argv, check=True)
    return exp_id


def timed_loads(browser, base_url: str, login, url: str, ready: Callable, loads: int) -> list:
    """One warm-up load, then `loads` timed ones, each in a fresh context: ready(page) -> the
    figure (seconds) and a note."""
    out = []
    for i in range(loads + 1):
        context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=base_url)
        page = context.new_page()
        login(page)
        page.goto(url, wait_until="commit")
        seconds, note = ready(page)
        context.close()
        if i:
            out.append(seconds)
            print(f"    load {i}: {seconds:.3f} s{note}", flush=True)
    return out


def torchyard_login(page) -> None:
    page.goto("/login")
    page.fill("#username", "bench")
    page.fill("#password", "bench-password")
    with page.expect_navigation():
        page.click("form#login-form button[type=submit]")
    if "/login" in page.url:
        raise RuntimeError("login failed")


def table_ready(page) -> tuple[float, str]:
    got = page.wait_for_function(TABLE_READY, polling="raf", timeout=120_000).json_value()
    size = page.evaluate("() => document.documentElement.outerHTML.length")
    return float(got) / 1000, f" (page {size / 1024:.0f} KB of HTML after the script)"


def charts_ready(runs: int) -> Callable:
    def ready(page) -> tuple[float, str]:
        got = page.wait_for_function(CHARTS_READY, arg=runs, polling="raf", timeout=120_000)
        at, shown = got.json_value()
        return float(at) / 1000, f" ({shown} charts in view drawn, {runs} traces each)"

    return ready


def mlflow_ready(name: str) -> Callable:
    def ready(page) -> tuple[float, str]:
        got = page.wait_for_function(MLFLOW_READY, arg=name, polling="raf", timeout=120_000)
        return float(got.json_value()) / 1000, ""

    return ready


def summary(label: str, times: list[float]) -> float:
    median = statistics.median(times)
    print(
        f"  {label}: median of {len(times)} {median:.3f} s (min {min(times):.3f}, "
        f"max {max(times):.3f}); {median / TARGET_S:.2f}x the {TARGET_S:.0f} s target",
        flush=True,
    )
    return median


def torchyard_side(
    browser, directory: Path, size: dict[str, int], loads: int, *, overviews: bool = True
) -> float:
    from tests.own_server import own_server

    # A directory of an earlier run of the same size (--data-dir) is reused: writing 50M points
    # and their overviews takes minutes on a loaded box.
    done = directory / f"written-{size['runs']}x{size['keys']}x{size['steps']}-{overviews}"
    directory.mkdir(parents=True, exist_ok=done.exists())
    with own_server(directory) as ty:
        db = directory / "own.db"
        t0 = time.perf_counter()
        if not done.exists():
            fill(f"sqlite:///{db}", runs=size["runs"], params=size["params"], keys=size["keys"])
            points = add_points(db, size["steps"]) if size["steps"] else 0
            if points and overviews:
                add_overviews(db)
            done.touch()
        points = size["runs"] * size["keys"] * size["steps"]
        print(
            f"torchyard: {size['runs']:,} runs x {size['params']} params x {size['keys']} keys"
            f" ({points:,} points) written in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        # fill() makes one experiment: the first
        exp_id = 1
        if size["steps"]:
            ready = charts_ready(min(CURVE_RUNS, size["runs"]))
            url = f"/experiments/{exp_id}#experiment-curves"
        else:
            ready, url = table_ready, f"/experiments/{exp_id}"
        times = timed_loads(browser, ty.base_url, torchyard_login, url, ready, loads)
        return summary("torchyard", times)


def mlflow_side(browser, mlflow: str, directory: Path, size: dict[str, int], loads: int) -> float:
    from bench.mlflow_api import mlflow_server

    directory.mkdir()
    with mlflow_server(mlflow, directory) as url:
        t0 = time.perf_counter()
        exp_id = seed_mlflow(
            mlflow, directory, url, "bench", [size["runs"], size["params"], size["keys"]]
        )
        print(f"mlflow: {size['runs']:,} runs written in {time.perf_counter() - t0:.1f} s")
        newest = f"bench-run-{size['runs'] - 1:05d}"  # its table's default sort: newest first
        times = timed_loads(
            browser,
            url,
            lambda page: None,
            f"{url}/#/experiments/{exp_id}/runs",
            mlflow_ready(newest),
            loads,
        )
        return summary("mlflow (runs table)", times)


def sizes(args: argparse.Namespace) -> Iterator[tuple[str, dict[str, int]]]:
    if args.runs:
        yield "table", {"runs": args.runs, "params": args.params, "keys": args.keys, "steps": 0}
    if args.chart_runs:
        yield (
            "charts",
            {
                "runs": args.chart_runs,
                "params": args.params,
                "keys": args.chart_keys,
                "steps": args.steps,
            },
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mlflow", default=None, help="the mlflow executable of its venv")
    parser.add_argument("--skip-mlflow", action="store_true")
    parser.add_argument("--runs", type=int, default=10_000, help="0: skip the table size")
    parser.add_argument("--params", type=int, default=20)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--chart-runs", type=int, default=1000, help="0: skip the charts size")
    parser.add_argument("--chart-keys", type=int, default=50)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep torchyard's data here, and reuse it when a run of the same size wrote it",
    )
    parser.add_argument(
        "--no-overviews",
        action="store_true",
        help="leave the series without overviews (the page's curves then read the points)",
    )
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from tests.stack import CHROMIUM, launch_chromium

    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-page-") as tmp, sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            for name, size in sizes(args):
                print(f"--- {name}: {size}", flush=True)
                ours = torchyard_side(
                    browser,
                    (args.data_dir or Path(tmp)) / f"ty-{name}",
                    size,
                    args.loads,
                    overviews=not args.no_overviews,
                )
                if args.mlflow and not args.skip_mlflow:
                    mlflow_dir = Path(tmp) / f"mlflow-{name}"
                    theirs = mlflow_side(browser, args.mlflow, mlflow_dir, size, args.loads)
                    print(f"  {name}: MLflow's time / torchyard's = {theirs / ours:.2f}x")
        finally:
            browser.close()
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
