"""The broker cannot freeze the queue (issue 27): no process that reaches the broker can tell
the workers to stop taking runs (Celery's remote control is off for them), and a queued run
whose message is lost - the broker flushed, a worker killed -9 holding its messages - is sent
again (app.runs.state.dispatch) and starts within 60 s.

A stack of its own (database, data dir, broker): real uvicorn server, real Celery worker, real
torch jobs. With Redis the broker is TORCHYARD_TEST_REDIS_URL's database, not the suite's, so
the session's shared worker never takes these runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from celery import Celery
from sqlalchemy import create_engine, text

from app.timeutil import as_utc, utcnow
from tests.conftest import BASE_DIR, BROKER_URL, DATABASE_URL
from tests.databases import own_database, user_with_token
from tests.stack import free_port, purge_broker, start_logged, stop_process, wait_healthy
from tests.waits import wait_for
from torchyard.compose.processes import server_argv, worker_argv

pytestmark = pytest.mark.slow

ROOT = BASE_DIR / "queue_faults"
DATA_DIR = ROOT / "data"
ON_REDIS = BROKER_URL.startswith("redis")
BROKER = (
    os.environ.get("TORCHYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
    if ON_REDIS
    else f"sqla+sqlite:///{ROOT / 'broker.db'}"
)


class Stack:
    """The server, and one worker at a time (one left running would take the next test's runs)."""

    def __init__(self, env: dict[str, str], api: httpx.Client, root: Path = ROOT) -> None:
        self.env = env
        self.api = api
        self.root = root
        self.worker: subprocess.Popen[bytes] | None = None
        self.workers_started = 0

    def start_worker(self) -> subprocess.Popen[bytes]:
        if self.worker is not None:
            stop_process(self.worker)
        log = self.root / f"worker-{self.workers_started}.log"
        self.workers_started += 1
        self.worker = start_logged(worker_argv(4), self.env, log)
        return self.worker


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """A server and one worker (4 threads) on a database, data dir and broker of their own;
    three fake GPUs, so that GPU runs queue behind a run that holds all three."""
    ROOT.mkdir(parents=True, exist_ok=True)
    kind = "postgresql" if DATABASE_URL.startswith("postgresql") else "sqlite"
    with own_database(kind, ROOT, "queue_faults") as engine:
        token = user_with_token(engine, "alice")
        env = dict(
            os.environ,
            TORCHYARD_DATABASE_URL=engine.url.render_as_string(hide_password=False),
            TORCHYARD_DATA_DIR=str(DATA_DIR),
            TORCHYARD_BROKER_URL=BROKER,
            TORCHYARD_FAKE_GPUS="0,1,2",
            TORCHYARD_QUEUE_RESEND_SECONDS="30",
            TORCHYARD_WORKER_HOST="queue-box",
            PYTHONUNBUFFERED="1",
        )
        purge_broker(BROKER)
        port = free_port()
        server = start_logged(server_argv("127.0.0.1", port), env, ROOT / "server.log")
        base = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"})
        stack = Stack(env, client)
        stack.start_worker()
        try:
            wait_healthy(base, server, ROOT / "server.log")
            yield stack
        finally:
            client.close()
            if stack.worker is not None:
                stop_process(stack.worker)
            stop_process(server)


def submit(api: httpx.Client, *, gpus: int = 0, steps: int = 5, sleep: float = 0.0) -> int:
    """A short run; one that needs no GPU is never held back by the scheduler."""
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": steps, "step_sleep": sleep},
        "seed": 1,
        "resources": {"gpus": gpus},
    }
    exp = api.post("/api/experiments", json={"name": "queue", "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs")
    assert run.status_code == 201, run.text
    return int(run.json()["id"])


def ends_succeeded(api: httpx.Client, run_id: int, timeout: float = 60) -> None:
    seen: list[dict] = [{}]

    def ended() -> bool:
        seen[0] = api.get(f"/api/runs/{run_id}").json()
        return seen[0]["status"] in {"succeeded", "failed", "cancelled"}

    wait_for(ended, timeout=timeout, every=0.2, what=lambda: f"run {run_id}: {seen[0]}")
    assert seen[0]["status"] == "succeeded", seen[0]


def test_no_process_on_the_broker_can_stop_the_workers_consuming(stack: Stack) -> None:
    api = stack.api
    ends_succeeded(api, submit(api))  # the worker consumes (and has declared its queues)
    if ON_REDIS:
        # What a job (or anyone who reaches Redis) could send: every worker with remote
        # control on answers and stops consuming the run queue.
        client = Celery("outsider", broker=BROKER)
        replies = client.control.cancel_consumer("celery", reply=True, timeout=2)
        assert replies == []
        client.close()
    else:
        # The SQL transport has no broadcast; a worker with remote control on still declares
        # its pidbox queue there.
        engine = create_engine(BROKER.removeprefix("sqla+"))
        with engine.connect() as conn:
            names = list(conn.scalars(text("SELECT name FROM kombu_queue")))
        engine.dispose()
        assert names and not [name for name in names if "pidbox" in name], names
    ends_succeeded(api, submit(api))


def run_of(api: httpx.Client, run_id: int) -> dict:
    return dict(api.get(f"/api/runs/{run_id}").json())


def one_running_three_queued(api: httpx.Client) -> tuple[int, list[int]]:
    """A run training on all three GPUs for a few seconds, three one-GPU runs queued behind it
    (their tasks asking again and again); once it ends all three may start at once, so how
    late they start is how late their messages are."""
    first = submit(api, gpus=3, steps=40, sleep=0.1)
    wait_for(lambda: run_of(api, first)["status"] == "running", timeout=60, what="first running")
    queued = [submit(api, gpus=1) for _ in range(3)]
    # Each queued task has come by a worker (the scheduler said why it waits).
    wait_for(
        lambda: all(run_of(api, r)["status"] == "queued" for r in queued),
        timeout=10,
        what="three queued",
    )
    return first, queued


def flush_broker() -> None:
    """Every message the broker holds, gone (a Redis FLUSHDB / a restart without persistence)."""
    if ON_REDIS:
        import redis

        redis.Redis.from_url(BROKER).flushdb()
    else:
        engine = create_engine(BROKER.removeprefix("sqla+"))
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM kombu_message"))
        engine.dispose()


def all_start_within(api: httpx.Client, runs: list[int], since: datetime, limit: float) -> None:
    for run_id in runs:
        ends_succeeded(api, run_id, timeout=limit + 60)
    started = {r: as_utc(datetime.fromisoformat(run_of(api, r)["started_at"])) for r in runs}
    late = {r: (t - since).total_seconds() for r, t in started.items()}
    print("seconds from the fault to each run's start:", late)
    assert max(late.values()) <= limit, late


def test_a_flushed_broker_leaves_no_run_queued_for_good(stack: Stack) -> None:
    first, queued = one_running_three_queued(stack.api)
    flush_broker()
    fault = utcnow()
    all_start_within(stack.api, [first, *queued], fault, 60)


def test_a_worker_killed_holding_messages_leaves_no_run_queued_for_good(stack: Stack) -> None:
    first, queued = one_running_three_queued(stack.api)
    worker = stack.worker
    assert worker is not None
    worker.send_signal(signal.SIGKILL)  # its prefetched and unacknowledged messages with it
    worker.wait()
    fault = utcnow()
    stack.worker = None
    stack.start_worker()  # re-adopts the first run's job; the queued ones must be sent again
    all_start_within(stack.api, [first, *queued], fault, 60)
