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

The runs of the search phase are created with --setup-threads client threads (not timed).
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
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from mlflow.entities import Metric, Param  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from tests.own_server import own_server  # noqa: E402
from tests.stack import free_port, start_logged, stop_process  # noqa: E402

BATCH = 1000
TARGETS = {"ingest": 20.0, "search": 10.0, "history": 20.0}


@contextmanager
def mlflow_server(mlflow: str, directory: Path) -> Iterator[str]:
    port = free_port()
    argv = [
        mlflow,
        "server",
        "--backend-store-uri",
        f"sqlite:///{directory / 'mlflow.db'}",
        "--artifacts-destination",
        str(directory / "artifacts"),
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
        deadline = time.monotonic() + 120
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


def seed_runs(client: MlflowClient, experiment_id: str, runs: int, threads: int) -> None:
    def one(i: int) -> None:
        run_id = client.create_run(experiment_id).info.run_id
        client.log_batch(
            run_id,
            params=[Param("lr", str(10 ** -(1 + i % 4))), Param("opt", "adam" if i % 2 else "sgd")],
            metrics=[Metric("loss", 1.0 / (1 + i), 0, 1)],
        )

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(runs)))


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


def measure(name: str, url: str, args: argparse.Namespace) -> dict[str, float]:
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
    seed_runs(client, experiment_id, args.runs, args.setup_threads)
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
    parser.add_argument("--setup-threads", type=int, default=8)
    args = parser.parse_args()
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as tmp:
        directory = Path(tmp)
        (directory / "ty").mkdir()
        with own_server(directory / "ty") as ty:
            _password, headers = ty.user("bench")
            os.environ["MLFLOW_TRACKING_TOKEN"] = headers["Authorization"].split()[1]
            ours = measure("torchyard", ty.base_url, args)
        del os.environ["MLFLOW_TRACKING_TOKEN"]
        with mlflow_server(args.mlflow, directory) as url:
            theirs = measure("mlflow", url, args)
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
            print(f"{label}: torchyard {ratio:.1f}x MLflow ({verdict} the {target} target)")


if __name__ == "__main__":
    main()
