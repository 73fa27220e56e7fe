"""`torchyard import mlflow` from an MLflow server against reading the same data out of MLflow
alone (`search_runs` + `get_metric_history` of every key of every run, as a team's script does).

The source: a real `mlflow server` (`make mlflow-server`; SQLite store) holding --runs runs of
--keys keys of --points points each. The runs are made by the MLflow client; their points are
written straight into the store's `metrics` and `latest_metrics` tables (logging 10 M points
through MLflow's REST API at ~4,300 points/s would take 40 minutes; what is timed is reading
them). The target: a torchyard server of its own (tests/own_server.py: uvicorn, SQLite, no
worker). Both reads go to the same MLflow server; the import also writes every point into
torchyard.

    .venv/bin/python bench/import_mlflow.py [--runs 100] [--keys 10] [--points 10000] [--workers 4]

Prints MLflow's read time, the import's, points/s of each and the ratio (MLflow / import).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlflow.tracking import MlflowClient  # noqa: E402

from tests.mlflow_server import real_mlflow_server  # noqa: E402
from tests.own_server import own_server  # noqa: E402
from torchyard.cli import main  # noqa: E402


def fill(client: MlflowClient, store: Path, runs: int, keys: int, points: int) -> str:
    experiment_id = client.create_experiment(f"bench-{time.time_ns()}")
    run_ids = [client.create_run(experiment_id).info.run_id for _ in range(runs)]
    for run_id in run_ids:
        client.set_terminated(run_id)
    now = int(time.time() * 1000)
    with sqlite3.connect(store) as db:
        for run_id in run_ids:
            rows = [
                (f"m{k}", 1.0 / (1 + s + k), now + s, run_id, s, 0)
                for k in range(keys)
                for s in range(points)
            ]
            db.executemany(
                "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            db.executemany(
                "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(f"m{k}", 1.0, now + points - 1, points - 1, 0, run_id) for k in range(keys)],
            )
    return experiment_id


def read_with_mlflow(url: str, experiment_id: str) -> int:
    client = MlflowClient(tracking_uri=url)
    total = 0
    for run in client.search_runs([experiment_id], max_results=1000):
        for key in run.data.metrics:
            total += len(client.get_metric_history(run.info.run_id, key))
    return total


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    total = args.runs * args.keys * args.points
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        folder = Path(tmp)
        (folder / "source").mkdir()
        (folder / "target").mkdir()
        with real_mlflow_server(folder / "source") as url:
            client = MlflowClient(tracking_uri=url)
            started = time.perf_counter()
            experiment_id = fill(client, folder / "source" / "mlflow.db", args.runs, args.keys,
                                 args.points)  # fmt: skip
            print(f"source: {args.runs} runs x {args.keys} keys x {args.points:,} points "
                  f"({total:,}) written in {time.perf_counter() - started:.0f} s")  # fmt: skip

            started = time.perf_counter()
            read = read_with_mlflow(url, experiment_id)
            mlflow_s = time.perf_counter() - started
            assert read == total, (read, total)
            print(f"MLflow search_runs + get_metric_history: {mlflow_s:.1f} s "
                  f"({total / mlflow_s:,.0f} points/s)")  # fmt: skip

            with own_server(folder / "target") as server:
                _password, headers = server.user("importer")
                token = headers["Authorization"].split()[1]
                argv = ["import", "mlflow", url, "-e", "bench", "--workers", str(args.workers),
                        "--server", server.base_url, "--token", token]  # fmt: skip
                said = io.StringIO()
                started = time.perf_counter()
                with contextlib.redirect_stderr(said):
                    code = main(argv)
                import_s = time.perf_counter() - started
                assert code == 0, said.getvalue()
                assert f"({total:,} points" in said.getvalue(), said.getvalue()
            print(f"torchyard import mlflow (--workers {args.workers}): {import_s:.1f} s "
                  f"({total / import_s:,.0f} points/s)")  # fmt: skip
            print(f"ratio (MLflow read / import): {mlflow_s / import_s:.2f}x")
            print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main_()
