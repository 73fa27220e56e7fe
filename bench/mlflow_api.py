"""torchyard's MLflow API beside MLflow's own ``mlflow server`` (SQLite backend), the same
client loop against each, in one run: the real ``mlflow`` client (MlflowClient) does the work.

- log-batch ingestion: --points points of --keys keys into one run, 1,000 metrics per
  log_batch (MLflow's limit); points/s (target: 20x MLflow's);
- search_runs over --runs runs of one experiment (each with params lr and opt, a loss metric):
  a param filter (``params.opt = 'adam'``) and a metric sort (``metrics.loss DESC``), all pages;
  median of --repeats (target: 10x faster);
- get_metric_history of one --series-points series; median of --repeats (target: 20x faster).

Each is timed twice: through the client (what a user waits for, the client's own protobuf work
included, the same for both servers) and as the same requests straight over HTTP (the
server's share).

The runs of the search phase are written (not timed) through each server's own storage layer
in one transaction: torchyard's app.mlflow service functions, MLflow's own ORM models.
torchyard runs as a server of its own over a fresh SQLite database with no worker
(tests/own_server.py); MLflow as ``<--mlflow> server --backend-store-uri sqlite:///...``.

    .venv/bin/python bench/mlflow_api.py --mlflow /path/to/venv/bin/mlflow \\
        [--points 200000] [--runs 10000] [--series-points 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from mlflow.entities import Metric  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from tests.own_server import OwnServer, own_server  # noqa: E402
from tests.stack import free_port, start_logged, stop_process  # noqa: E402

BATCH = 1000
TARGETS = {"ingest": 20.0, "search": 10.0, "history": 20.0}


@contextmanager
def mlflow_server(mlflow: str, directory: Path) -> Iterator[str]:
    port = free_port()
    store, artifacts = _mlflow_store(directory)
    argv = [
        mlflow,
        "server",
        "--backend-store-uri",
        store,
        "--artifacts-destination",
        artifacts,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    env = dict(os.environ, MLFLOW_HTTP_REQUEST_MAX_RETRIES="0")
    proc = start_logged(argv, env, directory / "mlflow-server.log")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while not _healthy(url):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError((directory / "mlflow-server.log").read_text()[-3000:])
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ingest(client: MlflowClient, experiment_id: str, points: int, keys: int) -> float:
    run_id = client.create_run(experiment_id).info.run_id
    now = int(time.time() * 1000)
    steps_per_batch = BATCH // keys
    batches = []
    for start in range(0, points // keys, steps_per_batch):
        batches.append(
            [
                Metric(f"m{k}", 1.0 / (1 + s + k), now + s, s)
                for s in range(start, start + steps_per_batch)
                for k in range(keys)
            ]
        )
    seconds = timed(lambda: [client.log_batch(run_id, metrics=b) for b in batches])
    return sum(map(len, batches)) / seconds


# The runs of the search phase are written through each server's own storage layer, in one
# transaction, not over HTTP: on this box MLflow's server (and its SqlAlchemyStore called
# directly) took ~0.25 s a run under load, so 10,000 runs did not fit a session. Not timed.
def _opt(i: int) -> str:
    return "adam" if i % 2 else "sgd"


def _lr(i: int) -> str:
    return str(10 ** -(1 + i % 4))


def seed_torchyard(ty: OwnServer, username: str, experiment_id: str, runs: int) -> None:
    """app.mlflow's own create_run / log_params / log_metrics, as the routes call them."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from app.auth.models import User
    from app.mlflow import service, writes
    from app.mlflow.schemas import CreateRun, KeyValue, MetricIn

    with Session(ty.engine) as session:
        user = session.scalars(select(User).where(User.username == username)).one()
        for i in range(runs):
            run = service.create_run(session, user, CreateRun(experiment_id=experiment_id))
            writes.log_params(
                session, run, [KeyValue(key="lr", value=_lr(i)), KeyValue(key="opt", value=_opt(i))]
            )
            writes.log_metrics(
                session, run, [MetricIn(key="loss", value=1.0 / (1 + i), timestamp=0, step=1)]
            )
        session.commit()


_MLFLOW_SEED = """
import sys, time, uuid
from mlflow.store.tracking.dbmodels.models import (
    SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag)
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.utils.name_utils import _generate_random_name
uri, artifacts, experiment_id, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = SqlAlchemyStore(uri, artifacts)
now = int(time.time() * 1000)
with store.ManagedSessionMaker() as session:
    for i in range(runs):
        run_id, name = uuid.uuid4().hex, _generate_random_name()
        session.add(SqlRun(
            name=name, artifact_uri=f"{artifacts}/{experiment_id}/{run_id}/artifacts",
            run_uuid=run_id, experiment_id=int(experiment_id), source_type="UNKNOWN",
            source_name="", entry_point_name="", user_id="bench", status="RUNNING",
            start_time=now + i, end_time=None, deleted_time=None, source_version="",
            lifecycle_stage="active",
            tags=[SqlTag(key="mlflow.runName", value=name)],
            params=[SqlParam(key="lr", value=str(10 ** -(1 + i % 4))),
                    SqlParam(key="opt", value="adam" if i % 2 else "sgd")],
            metrics=[SqlMetric(key="loss", value=1.0 / (1 + i), timestamp=0, step=1,
                               is_nan=False)],
            latest_metrics=[SqlLatestMetric(key="loss", value=1.0 / (1 + i), timestamp=0,
                                            step=1, is_nan=False)],
        ))
"""


def seed_mlflow(mlflow: str, directory: Path, experiment_id: str, runs: int) -> None:
    """MLflow's own ORM models (what its SqlAlchemyStore.create_run and log_batch write: the
    run, its mlflow.runName tag, params, the metric and its latest_metrics row), run by the
    python beside the --mlflow executable."""
    python = str(Path(mlflow).with_name("python"))
    subprocess.run(
        [python, "-c", _MLFLOW_SEED, *_mlflow_store(directory), experiment_id, str(runs)],
        check=True,
    )


def _mlflow_store(directory: Path) -> list[str]:
    return [f"sqlite:///{directory / 'mlflow.db'}", str(directory / "artifacts")]


def search(client: MlflowClient, experiment_id: str) -> int:
    found, token = 0, None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string="params.opt = 'adam'",
            order_by=["metrics.loss DESC"],
            max_results=1000,
            page_token=token,
        )
        found += len(page)
        token = page.token
        if not token:
            return found


def history(client: MlflowClient, experiment_id: str, points: int) -> str:
    run_id = client.create_run(experiment_id).info.run_id
    for start in range(0, points, BATCH):
        client.log_batch(
            run_id,
            metrics=[Metric("loss", 1.0 / (1 + s), s, s) for s in range(start, start + BATCH)],
        )
    return run_id


def raw_ingest(http: httpx.Client, run_id: str, points: int, keys: int) -> float:
    """The same batches as JSON bodies straight over HTTP: the server's share alone."""
    steps_per_batch = BATCH // keys
    bodies = [
        {
            "run_id": run_id,
            "metrics": [
                {"key": f"m{k}", "value": 1.0 / (1 + s + k), "timestamp": s, "step": s}
                for s in range(start, start + steps_per_batch)
                for k in range(keys)
            ],
        }
        for start in range(0, points // keys, steps_per_batch)
    ]

    def send() -> None:
        for body in bodies:
            http.post("/api/2.0/mlflow/runs/log-batch", json=body).raise_for_status()

    return sum(len(b["metrics"]) for b in bodies) / timed(send)


def raw_search(http: httpx.Client, experiment_id: str) -> None:
    token = None
    while True:
        body = {
            "experiment_ids": [experiment_id],
            "filter": "params.opt = 'adam'",
            "order_by": ["metrics.loss DESC"],
            "max_results": 1000,
        }
        r = http.post(
            "/api/2.0/mlflow/runs/search", json=body | ({"page_token": token} if token else {})
        )
        r.raise_for_status()
        token = r.json().get("next_page_token")
        if not token:
            return


def raw_history(http: httpx.Client, run_id: str) -> int:
    r = http.get(
        "/api/2.0/mlflow/metrics/get-history", params={"run_id": run_id, "metric_key": "loss"}
    )
    r.raise_for_status()
    return len(r.json()["metrics"])


def measure(
    name: str, url: str, args: argparse.Namespace, seed: Callable[[str, int], None]
) -> dict[str, float]:
    client = MlflowClient(tracking_uri=url)
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    http = httpx.Client(
        base_url=url, timeout=600, headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    suffix = str(time.time_ns())
    out: dict[str, float] = {}
    raw_run = client.create_run(client.create_experiment(f"raw-{suffix}")).info.run_id
    out["ingest_http"] = raw_ingest(http, raw_run, args.points, args.keys)
    print(f"{name}: log-batch over HTTP {out['ingest_http']:,.0f} points/s", flush=True)
    out["ingest"] = ingest(
        client, client.create_experiment(f"ingest-{suffix}"), args.points, args.keys
    )
    print(f"{name}: log-batch ingestion {out['ingest']:,.0f} points/s", flush=True)
    experiment_id = client.create_experiment(f"search-{suffix}")
    started = time.perf_counter()
    seed(experiment_id, args.runs)
    print(f"{name}: {args.runs} runs written in {time.perf_counter() - started:.1f} s", flush=True)
    times = []
    for _ in range(args.repeats):
        found = 0

        def run_search() -> None:
            nonlocal found
            found = search(client, experiment_id)

        times.append(timed(run_search))
    out["search"] = statistics.median(times)
    print(f"{name}: search_runs over {args.runs} runs ({found} found) {out['search']:.3f} s")
    out["search_http"] = statistics.median(
        [timed(lambda: raw_search(http, experiment_id)) for _ in range(args.repeats)]
    )
    print(f"{name}: runs/search over HTTP {out['search_http']:.3f} s", flush=True)
    run_id = history(client, client.create_experiment(f"history-{suffix}"), args.series_points)
    times = []
    for _ in range(args.repeats):
        got = 0

        def read() -> None:
            nonlocal got
            got = len(client.get_metric_history(run_id, "loss"))

        times.append(timed(read))
    assert got == args.series_points, got
    out["history"] = statistics.median(times)
    print(f"{name}: get_metric_history of {got} points {out['history']:.3f} s", flush=True)
    out["history_http"] = statistics.median(
        [timed(lambda: raw_history(http, run_id)) for _ in range(args.repeats)]
    )
    print(f"{name}: metrics/get-history over HTTP {out['history_http']:.3f} s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mlflow", default=shutil.which("mlflow") or "mlflow")
    parser.add_argument("--points", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--series-points", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as tmp:
        directory = Path(tmp)
        (directory / "ty").mkdir()
        with own_server(directory / "ty") as ty:
            _password, headers = ty.user("bench")
            os.environ["MLFLOW_TRACKING_TOKEN"] = headers["Authorization"].split()[1]
            ours = measure(
                "torchyard",
                ty.base_url,
                args,
                lambda exp, n: seed_torchyard(ty, "bench", exp, n),
            )
        del os.environ["MLFLOW_TRACKING_TOKEN"]
        with mlflow_server(args.mlflow, directory) as url:
            theirs = measure(
                "mlflow", url, args, lambda exp, n: seed_mlflow(args.mlflow, directory, exp, n)
            )
    for how in ("", "_http"):
        ratios = {
            "ingest": ours["ingest" + how] / theirs["ingest" + how],
            "search": theirs["search" + how] / ours["search" + how],
            "history": theirs["history" + how] / ours["history" + how],
        }
        for what, ratio in ratios.items():
            verdict = "meets" if ratio >= TARGETS[what] else "misses"
            label = f"{what} ({'mlflow client' if not how else 'HTTP alone'})"
            target = f"{TARGETS[what]:.0f}x"
            print(
                f"{label}: torchyard {ratio:.1f}x MLflow, {ratio / TARGETS[what]:.2f} of the "
                f"{target} target ({verdict} it)"
            )


if __name__ == "__main__":
    main()
