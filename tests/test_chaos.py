"""Chaos (issue 27): an API and two workers acting as two GPU hosts (fake inventories, GPUs 0,1
and 2,3) train a few short runs while a worker is killed -9, the broker is flushed (Redis), a
worker is frozen with SIGSTOP past run_lost_seconds, the API is stopped with SIGTERM with event
streams open (and started again), and the database's connections are terminated (PostgreSQL).
Then: every run reached a terminal state (so none is stuck queued), no two jobs ever held one
GPU at the same moment (each job writes its own CUDA_VISIBLE_DEVICES with the wall clock at
every step: tests/workspace_scripts/chaos_steps.py), every series has each step exactly once,
and no request was answered 500 (a request whose database connection was cut answers 503 with
Retry-After, by design: app/http_errors.py).

A stack of its own (database, data dir, broker); the runs' jobs need no torch, so the faults,
not the training, take the time.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path

import httpx
import pytest
import redis
from sqlalchemy import create_engine

from tests.conftest import BASE_DIR, BROKER_URL, DATABASE_URL, WORKSPACE_DIR
from tests.databases import POSTGRES_URL, own_database, user_with_token
from tests.stack import REPO, free_port, purge_broker, start_logged, stop_process
from tests.test_api_shutdown import Viewer
from tests.waits import wait_for
from torchyard.compose.processes import server_argv, worker_argv

pytestmark = pytest.mark.slow

LOST_AFTER = 6.0
ROOT = BASE_DIR / "chaos"
DATA_DIR = ROOT / "data"
ON_REDIS = BROKER_URL.startswith("redis")
ON_POSTGRES = DATABASE_URL.startswith("postgresql")
BROKER = (
    os.environ.get("TORCHYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
    if ON_REDIS
    else f"sqla+sqlite:///{ROOT / 'broker.db'}"
)
HOSTS = {"chaos-a": "0,1", "chaos-b": "2,3"}
# (steps, seconds per step): long runs outlive the faults, short ones end during them.
RUNS = [(150, 0.1)] * 4 + [(40, 0.1)] * 4
FINISHED = {"succeeded", "failed", "cancelled"}
SCRIPT = REPO / "tests" / "workspace_scripts" / "chaos_steps.py"


class Chaos:
    """The stack's processes, each started again the way the fault test needs."""

    def __init__(self, env: dict[str, str], port: int, database: str) -> None:
        self.env = env
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.database = database
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.server: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start_server(self) -> None:
        self.starts += 1
        log = ROOT / f"server-{self.starts}.log"
        env = {**self.env, "TORCHYARD_WORKER_HOST": "chaos-api"}
        self.server = start_logged(server_argv("127.0.0.1", self.port), env, log)
        wait_for(lambda: self.healthy(log), timeout=180, every=0.2, what=lambda: log.read_text())

    def healthy(self, log: Path) -> bool:
        assert self.server is not None
        if self.server.poll() is not None:
            raise AssertionError(f"the server exited:\n{log.read_text()}")
        try:
            return httpx.get(f"{self.base_url}/api/health", timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    def start_worker(self, host: str) -> None:
        self.starts += 1
        env = {**self.env, "TORCHYARD_WORKER_HOST": host, "TORCHYARD_FAKE_GPUS": HOSTS[host]}
        log = ROOT / f"worker-{host}-{self.starts}.log"
        self.workers[host] = start_logged(worker_argv(3), env, log)

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.send_signal(signal.SIGCONT)
            stop_process(worker)
        if self.server is not None:
            stop_process(self.server)


@pytest.fixture
def chaos() -> Iterator[tuple[Chaos, httpx.Client]]:
    ROOT.mkdir(parents=True, exist_ok=True)
    (WORKSPACE_DIR / "chaos").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "chaos" / SCRIPT.name)
    kind = "postgresql" if ON_POSTGRES else "sqlite"
    with own_database(kind, ROOT, f"chaos_{os.getpid()}") as engine:
        token = user_with_token(engine, "alice")
        env = dict(
            os.environ,
            TORCHYARD_DATABASE_URL=engine.url.render_as_string(hide_password=False),
            TORCHYARD_DATA_DIR=str(DATA_DIR),
            TORCHYARD_BROKER_URL=BROKER,
            TORCHYARD_REAP_INTERVAL_SECONDS="1",
            TORCHYARD_RUN_LOST_SECONDS=str(LOST_AFTER),
            TORCHYARD_RUN_HEARTBEAT_SECONDS="1",
            TORCHYARD_LEASE_TTL_SECONDS="5",
            TORCHYARD_QUEUE_RESEND_SECONDS="5",
            # A worker frozen inside a transaction holds its rows locked until PostgreSQL ends
            # the session: before the reaper's turn (app/settings.py).
            TORCHYARD_DB_IDLE_TRANSACTION_SECONDS="3",
            PYTHONUNBUFFERED="1",
        )
        purge_broker(BROKER)
        stack = Chaos(env, free_port(), str(engine.url.database))
        headers = {"Authorization": f"Bearer {token}"}
        api = httpx.Client(base_url=stack.base_url, headers=headers, timeout=30)
        try:
            stack.start_server()
            for host in HOSTS:
                stack.start_worker(host)
            yield stack, api
        finally:
            api.close()
            stack.stop()


class Poller(threading.Thread):
    """Reads the run list and one run over and over; keeps every 5xx answer. A refused
    connection (the API stopped and not yet back) is not an answer."""

    def __init__(self, stack: Chaos, headers: dict[str, str], run_id: int) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=stack.base_url, headers=headers, timeout=30)
        self.paths = ["/api/runs?limit=50", f"/api/runs/{run_id}", "/api/experiments"]
        self.answers = 0
        self.errors: list[tuple[int, str, str]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            for path in self.paths:
                try:
                    r = self.client.get(path)
                except httpx.TransportError:
                    continue
                self.answers += 1
                if r.status_code >= 500:
                    self.errors.append((r.status_code, r.headers.get("retry-after", ""), r.text))

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.client.close()


def submit(api: httpx.Client, steps: int, step_sleep: float) -> int:
    config = {
        "script": f"chaos/{SCRIPT.name}",
        "params": {"steps": steps, "step_sleep": step_sleep},
        "resources": {"gpus": 1},
        # A loaded box can miss a 6 s heartbeat too: such a run is requeued and fenced like a
        # frozen worker's, and must still succeed.
        "max_restarts": 10,
    }
    exp = api.post("/api/experiments", json={"name": "chaos", "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs")
    assert run.status_code == 201, run.text
    return int(run.json()["id"])


def runs_of(api: httpx.Client, ids: list[int]) -> dict[int, dict]:
    r = api.get("/api/runs", params={"limit": 100})
    if r.status_code == 503:  # a connection cut under the request: asked to come back
        return {}
    listed = r.json()["runs"]
    return {r["id"]: r for r in listed if r["id"] in ids}


def running_on(api: httpx.Client, ids: list[int], host: str) -> list[dict]:
    runs = runs_of(api, ids).values()
    return [r for r in runs if r["status"] == "running" and r["worker_host"] == host]


def gpu_holders() -> dict[str, list[tuple[str, float, float]]]:
    """GPU -> (job token, first, last wall time) of every job that held it, from the jobs'
    own lines."""
    spans: dict[tuple[str, str], list[float]] = {}
    for path in (DATA_DIR / "runs").glob("*/gpus-*.jsonl"):
        for line in path.read_text().splitlines():
            if not line.endswith("}"):
                continue  # a job killed mid-line
            seen = json.loads(line)
            for gpu in seen["gpus"].split(","):
                span = spans.setdefault((gpu, seen["token"]), [seen["time"], seen["time"]])
                span[0], span[1] = min(span[0], seen["time"]), max(span[1], seen["time"])
    holders: dict[str, list[tuple[str, float, float]]] = {}
    for (gpu, token), (first, last) in spans.items():
        holders.setdefault(gpu, []).append((token, first, last))
    return holders


def cut_connections(database: str) -> int:
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            killed = conn.exec_driver_sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %(db)s AND pid <> pg_backend_pid()",
                {"db": database},
            ).scalar()
    finally:
        admin.dispose()
    return int(killed or 0)


def freeze(stack: Chaos, api: httpx.Client, ids: list[int]) -> None:
    """SIGSTOP chaos-b for at least run_lost_seconds and until every run it was training has
    been handed over (or has ended), then SIGCONT."""
    frozen = {r["id"]: r["attempt"] for r in running_on(api, ids, "chaos-b")}
    stack.workers["chaos-b"].send_signal(signal.SIGSTOP)
    since = time.monotonic()

    def handed_over() -> bool:
        runs = runs_of(api, list(frozen)).values()
        return time.monotonic() - since > LOST_AFTER + 1 and all(
            r["status"] != "running" or r["attempt"] > frozen[r["id"]] for r in runs
        )

    try:
        wait_for(handed_over, timeout=90, every=0.2, what=lambda: f"{runs_of(api, list(frozen))}")
    finally:
        stack.workers["chaos-b"].send_signal(signal.SIGCONT)


def test_faults_leave_every_run_ended_no_gpu_shared_no_step_twice_no_500(
    chaos: tuple[Chaos, httpx.Client],
) -> None:
    stack, api = chaos
    began = time.monotonic()
    ids = [submit(api, steps, pause) for steps, pause in RUNS]
    poller = Poller(stack, dict(api.headers), ids[0])
    poller.start()
    viewers: list[Viewer] = []
    gone_after = float("inf")
    try:
        wait_for(
            lambda: running_on(api, ids, "chaos-a") and running_on(api, ids, "chaos-b"),
            timeout=180,
            every=0.2,
            what=lambda: f"runs training on both hosts: {runs_of(api, ids)}",
        )
        watched = running_on(api, ids, "chaos-a")[0]["id"]
        viewers += [Viewer(stack, dict(api.headers), watched) for _ in range(4)]  # type: ignore[arg-type]
        for viewer in viewers:
            viewer.start()
        wait_for(lambda: all(v.lines for v in viewers), timeout=60, what="4 streams open")

        # 1. kill -9 of a worker (its jobs train on; the next worker re-adopts or fences them).
        stack.workers["chaos-a"].kill()
        stack.workers["chaos-a"].wait()
        stack.start_worker("chaos-a")
        # 2. The broker loses every message (a Redis flush or restart).
        if ON_REDIS:
            redis.Redis.from_url(BROKER).flushdb()
        # 3. The database drops every connection (a failover, an admin).
        cuts = [cut_connections(stack.database)] if ON_POSTGRES else []
        # 4. A worker frozen past run_lost_seconds while it trains, until its runs are handed
        # over under it; then it resumes. Not on SQLite: a process frozen inside a write holds
        # the database's one write lock, and everything waits for it (docs/deploy.md).
        if ON_POSTGRES:
            freeze(stack, api, ids)
        # 5. SIGTERM of the API with 4 streams open: gone within 5 s, then started again.
        assert stack.server is not None
        stopped_at = time.monotonic()
        stack.server.send_signal(signal.SIGTERM)
        stack.server.wait(timeout=30)
        gone_after = time.monotonic() - stopped_at
        stack.start_server()
        if ON_POSTGRES:
            cuts.append(cut_connections(stack.database))

        def all_ended() -> bool:
            return all(r["status"] in FINISHED for r in runs_of(api, ids).values())

        wait_for(all_ended, timeout=300, every=0.5, what=lambda: f"{runs_of(api, ids)}")
    finally:
        poller.stop()
    took = time.monotonic() - began
    assert gone_after < 5, f"the API took {gone_after:.1f} s to stop with 4 streams open"
    for viewer in viewers:
        viewer.join(timeout=5)
        assert viewer.ended == "end of stream", viewer.ended
    # No 500; a cut connection's request answers 503 with Retry-After (app/http_errors.py).
    assert all(code == 503 and retry for code, retry, _ in poller.errors), poller.errors
    assert poller.answers > 50, poller.answers
    ended = wait_for(lambda: runs_of(api, ids), timeout=30, what="the runs listed")
    not_succeeded = {
        i: (r["status"], r["attempt"], r["worker_host"], r.get("error"))
        for i, r in ended.items()
        if r["status"] != "succeeded"
    }
    logs = {i: api.get(f"/api/runs/{i}/logs").text[-1500:] for i in not_succeeded}
    assert not not_succeeded, f"{not_succeeded}; their logs' ends: {logs}"
    for run_id, (steps, _) in zip(ids, RUNS, strict=True):
        got = api.get(f"/api/runs/{run_id}/metrics", params={"keys": "chaos/step"}).json()
        assert got["series"]["chaos/step"]["step"] == list(range(1, steps + 1)), run_id
    holders = gpu_holders()
    assert set(holders) == {"0", "1", "2", "3"}, holders
    for gpu, jobs in holders.items():
        for (one, a0, a1), (other, b0, b1) in combinations(jobs, 2):
            assert a1 < b0 or b1 < a0, f"GPU {gpu} held by jobs {one} and {other} at once"
    attempts = sum(r["attempt"] - 1 for r in ended.values())
    print(
        f"chaos: {len(ids)} runs ended in {took:.0f} s, {attempts} handed over; API gone in "
        f"{gone_after:.2f} s; {poller.answers} answers, {len(poller.errors)} 503; "
        f"connections cut {cuts if ON_POSTGRES else 'n/a'}"
    )
