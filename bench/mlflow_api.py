"""torchyard's MLflow API beside MLflow's own ``mlflow server`` (SQLite backend), the same
client loop against each, in one run: the real ``mlflow`` client (MlflowClient) does the work.

- log-batch ingestion: --points points of --keys keys into one run, 1,000 metrics per
  log_batch (MLflow's limit); points/s (target: 20x MLflow's);
- search_runs over --runs runs of one experiment (each with params lr and opt, a loss metric):
  a param filter (``params.opt = 'adam'``) and a metric sort (``metrics.loss DESC``), all pages;
  median of --repeats (fewer past --repeat-budget s; target: 10x faster);
- get_metric_history of one --series-points series; median of --repeats (target: 20x faster).

Each is timed twice: through the client (what a user waits for, the client's own protobuf work
included, the same for both servers) and as the same requests straight over HTTP (the
server's share).

The runs of the search phase and the history's series are written (not timed) through each
server's own storage layer in one transaction: torchyard's app.mlflow service functions,
MLflow's own tables (its dbmodels, in bulk). The timed log-batch phase stays at --points
(30,000 by default): MLflow ingests a few hundred points/s on a loaded box.
torchyard runs as a server of its own over a fresh SQLite database with no worker
(tests/own_server.py); MLflow as ``<--mlflow> server --backend-store-uri sqlite:///...``.

    .venv/bin/python bench/mlflow_api.py --mlflow /path/to/venv/bin/mlflow \\
        [--points 30000] [--runs 10000] [--series-points 100000] [--repeats 3] \\
        [--only ingest|search|history]
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
import orjson  # noqa: E402
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


def median_of(fn: Callable[[], object], args: argparse.Namespace) -> float:
    """The median of --repeats timings, fewer once they add up to --repeat-budget seconds: a
    read that takes MLflow 100 s under load is not noise-bound, and three of each would not
    fit a session (at least one timing always)."""
    times: list[float] = []
    while len(times) < args.repeats and sum(times) < args.repeat_budget:
        times.append(timed(fn))
    return statistics.median(times)


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


def _opt(i: int) -> str:
    return "adam" if i % 2 else "sgd"


def _lr(i: int) -> str:
    return str(10 ** -(1 + i % 4))


def seed_torchyard(ty: OwnServer, username: str, what: str, target: str, count: int) -> None:
    """app.mlflow's own service functions, as the routes call them, in one transaction:
    ``runs``: ``count`` runs of experiment ``target`` (create_run, log_params, log_metrics);
    ``series``: ``count`` points of ``loss`` into run ``target`` (log_metrics, in batches of
    1,000 as log-batch takes them)."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from app.auth.models import User
    from app.mlflow import service, writes
    from app.mlflow.schemas import CreateRun, KeyValue

    with Session(ty.engine) as session:
        if what == "series":
            run = service.get_run(session, target)
            for start in range(0, count, BATCH):
                writes.log_metrics(
                    session,
                    run,
                    [
                        ("loss", s, 1.0 / (1 + s), s / 1000)
                        for s in range(start, min(count, start + BATCH))
                    ],
                )
            session.commit()
            return
        user = session.scalars(select(User).where(User.username == username)).one()
        for i in range(count):
            run = service.create_run(session, user, CreateRun(experiment_id=target))
            writes.log_params(
                session, run, [KeyValue(key="lr", value=_lr(i)), KeyValue(key="opt", value=_opt(i))]
            )
            writes.log_metrics(session, run, [("loss", 1, 1.0 / (1 + i), 0.0)])
        session.commit()


_MLFLOW_SEED = """
import sys, time, uuid
from sqlalchemy import insert
from mlflow.store.tracking.dbmodels.models import (
    SqlLatestMetric, SqlMetric, SqlParam, SqlRun, SqlTag)
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.utils.name_utils import _generate_random_name
uri, artifacts, what, target = sys.argv[1:5]
n = int(sys.argv[5])
store = SqlAlchemyStore(uri, artifacts)
now = int(time.time() * 1000)
def metric(run_id, value, step, timestamp):
    return dict(run_uuid=run_id, key="loss", value=value, timestamp=timestamp, step=step,
                is_nan=False)
with store.ManagedSessionMaker() as session:
    if what == "runs":
        runs, tags, params, metrics = [], [], [], []
        for i in range(n):
            run_id, name = uuid.uuid4().hex, _generate_random_name()
            runs.append(dict(
                name=name, artifact_uri=f"{artifacts}/{target}/{run_id}/artifacts",
                run_uuid=run_id, experiment_id=int(target), source_type="UNKNOWN",
                source_name="", entry_point_name="", user_id="bench", status="RUNNING",
                start_time=now + i, end_time=None, deleted_time=None, source_version="",
                lifecycle_stage="active"))
            tags.append(dict(run_uuid=run_id, key="mlflow.runName", value=name))
            params += [dict(run_uuid=run_id, key="lr", value=str(10 ** -(1 + i % 4))),
                       dict(run_uuid=run_id, key="opt", value="adam" if i % 2 else "sgd")]
            metrics.append(metric(run_id, 1.0 / (1 + i), 1, 0))
        rows = [(SqlRun, runs), (SqlTag, tags), (SqlParam, params), (SqlMetric, metrics),
                (SqlLatestMetric, metrics)]
    else:  # one run's series: every point, and its latest_metrics row (the last step)
        series = [metric(target, 1.0 / (1 + s), s, s) for s in range(n)]
        rows = [(SqlMetric, series), (SqlLatestMetric, series[-1:])]
    for model, values in rows:
        session.execute(insert(model.__table__), values)
"""


def seed_mlflow(mlflow: str, directory: Path, what: str, target: str, count: int) -> None:
    """Rows in MLflow's own tables (models of mlflow.store.tracking.dbmodels), as its
    SqlAlchemyStore.create_run and log_batch write them, inserted in bulk in one transaction
    by the python beside the --mlflow executable: ``runs`` runs of experiment ``target`` (the
    run, its mlflow.runName tag, params, the metric and its latest_metrics row), or
    ``series``: ``count`` points of ``loss`` into run ``target``."""
    python = str(Path(mlflow).with_name("python"))
    subprocess.run(
        [python, "-c", _MLFLOW_SEED, *_mlflow_store(directory), what, target, str(count)],
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


def history(
    client: MlflowClient, experiment_id: str, points: int, seed: Callable[[str, str, int], None]
) -> str:
    """A run made through the client, its series written (untimed) through the storage layer:
    at ~150 points/s under load MLflow's log_batch would take minutes for 100,000 points."""
    run_id = client.create_run(experiment_id).info.run_id
    seed("series", run_id, points)
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
        token = orjson.loads(r.content).get("next_page_token")
        if not token:
            return


def raw_history(http: httpx.Client, run_id: str) -> int:
    """Parsed with orjson: the stdlib's json.loads of the 100,000 points is the client's."""
    r = http.get(
        "/api/2.0/mlflow/metrics/get-history", params={"run_id": run_id, "metric_key": "loss"}
    )
    r.raise_for_status()
    return len(orjson.loads(r.content)["metrics"])


def measure(
    name: str, url: str, args: argparse.Namespace, seed: Callable[[str, str, int], None]
) -> dict[str, float]:
    client = MlflowClient(tracking_uri=url)
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    http = httpx.Client(
        base_url=url, timeout=600, headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    suffix = str(time.time_ns())
    out: dict[str, float] = {}
    if args.only in (None, "ingest"):
        raw_run = client.create_run(client.create_experiment(f"raw-{suffix}")).info.run_id
        out["ingest_http"] = raw_ingest(http, raw_run, args.points, args.keys)
        print(f"{name}: log-batch over HTTP {out['ingest_http']:,.0f} points/s", flush=True)
        out["ingest"] = ingest(
            client, client.create_experiment(f"ingest-{suffix}"), args.points, args.keys
        )
        print(f"{name}: log-batch ingestion {out['ingest']:,.0f} points/s", flush=True)
    if args.only in (None, "search"):
        experiment_id = client.create_experiment(f"search-{suffix}")
        started = time.perf_counter()
        seed("runs", experiment_id, args.runs)
        print(f"{name}: {args.runs} runs written in {time.perf_counter() - started:.1f} s")
        found = [0]  # the last search's count
        out["search"] = median_of(lambda: found.append(search(client, experiment_id)), args)
        took = out["search"]
        print(f"{name}: search_runs over {args.runs} runs ({found[-1]} found) {took:.3f} s")
        out["search_http"] = median_of(lambda: raw_search(http, experiment_id), args)
        print(f"{name}: runs/search over HTTP {out['search_http']:.3f} s", flush=True)
    if args.only in ("ingest", "search"):
        return out
    run_id = history(
        client, client.create_experiment(f"history-{suffix}"), args.series_points, seed
    )
    got = 0

    def read() -> None:
        nonlocal got
        got = len(client.get_metric_history(run_id, "loss"))

    out["history"] = median_of(read, args)
    assert got == args.series_points, got
    print(f"{name}: get_metric_history of {got} points {out['history']:.3f} s", flush=True)
    out["history_http"] = median_of(lambda: raw_history(http, run_id), args)
    print(f"{name}: metrics/get-history over HTTP {out['history_http']:.3f} s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mlflow", default=shutil.which("mlflow") or "mlflow")
    parser.add_argument("--points", type=int, default=30_000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--series-points", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--repeat-budget", type=float, default=60.0)
    parser.add_argument("--only", choices=["ingest", "search", "history"], help="one phase alone")
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
                lambda what, target, n: seed_torchyard(ty, "bench", what, target, n),
            )
        del os.environ["MLFLOW_TRACKING_TOKEN"]
        with mlflow_server(args.mlflow, directory) as url:
            theirs = measure(
                "mlflow",
                url,
                args,
                lambda what, target, n: seed_mlflow(args.mlflow, directory, what, target, n),
            )
    for how in ("", "_http"):
        ratios = {w: theirs[w + how] / ours[w + how] for w in TARGETS if w + how in ours}
        if "ingest" in ratios:
            ratios["ingest"] = 1 / ratios["ingest"]  # points/s: more is faster
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
