"""Pools with real workers (issue 40): two workers of two pools on one broker and database, real
jobs. A run goes only to its pool's workers: a worker of another pool stays idle beside it even
while the run waits for a slot; a run of a pool that no live worker serves waits saying so, and
starts once a worker of that pool comes.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

import httpx
import pytest

from app.gpus.scheduler import no_live_worker
from app.timeutil import as_utc
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, wait_for_status
from tests.stack import (
    LiveStack,
    free_port,
    start_logged,
    stop_process,
    wait_for_hosts,
    wait_healthy,
)
from tests.waits import holds_for
from torchyard.compose.processes import server_argv, worker_argv

pytestmark = pytest.mark.slow

# The module's own broker, so the suite's shared worker of the local pool never sees these
# tasks: the pass's Redis database of the two-host tests (emptied first, as
# tests/test_separate_hosts.py does: the pools' queues, the re-send's reads and the workers'
# hand-backs on Redis, as a team deploys), else an SQL broker of its own.
REDIS_URL = os.environ.get("TORCHYARD_TEST_REDIS_URL", "")
BROKER_URL = REDIS_URL or f"sqla+sqlite:///{BASE_DIR / 'pools-broker.db'}"
LOG_DIR = BASE_DIR / "logs-pools"
POOL_A, POOL_B = "pool-a", "pool-b"
HOST_A, HOST_B = "pools-host-a", "pools-host-b"


def stack_env(**extra: str) -> dict[str, str]:
    return dict(os.environ, TORCHYARD_BROKER_URL=BROKER_URL, PYTHONUNBUFFERED="1", **extra)


@dataclass
class PoolStack:
    live: LiveStack
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)

    def add_worker(self, host: str, pool: str) -> None:
        """Started with one run slot, and live (heartbeated with its pool)."""
        since = time.monotonic()
        env = stack_env(TORCHYARD_WORKER_HOST=host, TORCHYARD_WORKER_POOL=pool)
        self.workers[host] = start_logged(worker_argv(1), env, LOG_DIR / f"worker-{host}.log")
        wait_for_hosts((host,), since)


@pytest.fixture(scope="module")
def stack(database: str) -> Iterator[PoolStack]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    if REDIS_URL:
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()
    else:
        (BASE_DIR / "pools-broker.db").unlink(missing_ok=True)
    port = free_port()
    server = start_logged(server_argv("127.0.0.1", port), stack_env(), LOG_DIR / "server.log")
    stack = PoolStack(LiveStack(f"http://127.0.0.1:{port}", LOG_DIR, ADMIN_PASSWORD))
    try:
        wait_healthy(stack.live.base_url, server, LOG_DIR / "server.log")
        stack.add_worker(HOST_A, POOL_A)
        stack.add_worker(HOST_B, POOL_B)
        yield stack
    finally:
        stop_process(server)
        for worker in stack.workers.values():
            stop_process(worker)


@pytest.fixture(scope="module")
def api(stack: PoolStack) -> Iterator[httpx.Client]:
    with stack.live.admin_client() as client:
        yield client


def submit(api: httpx.Client, name: str, pool: str, steps: int = 4, sleep: float = 0.1) -> dict:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": steps, "step_sleep": sleep},
        "resources": {"gpus": 0, "nproc": 1, "pool": pool},
    }
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    assert run.json()["config"]["resources"]["pool"] == pool
    return dict(run.json())


def succeeded(api: httpx.Client, run_id: int) -> dict:
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=180)
    assert run["status"] == "succeeded", run
    return run


def when(run: dict, key: str) -> datetime:
    return as_utc(datetime.fromisoformat(run[key]))


def test_the_live_pools_are_listed_with_their_hosts(api: httpx.Client) -> None:
    pools = {p["name"]: p["hosts"] for p in api.get("/api/pools").json()["pools"]}
    assert pools[POOL_A] == [HOST_A] and pools[POOL_B] == [HOST_B]


def test_pool_b_runs_go_to_pool_b_only_while_pool_a_idles(api: httpx.Client) -> None:
    # Pool B's worker has one run slot: its second run waits while the first trains, and pool
    # A's idle worker never takes it.
    first = submit(api, "pools-b-first", POOL_B, steps=12, sleep=0.3)
    wait_for_status(api, first["id"], {"running"}, timeout=120)
    second = submit(api, "pools-b-second", POOL_B)

    def second_waits() -> bool:
        run = api.get(f"/api/runs/{second['id']}").json()
        return run["status"] == "queued" or run["worker_host"] == HOST_B

    holds_for(second_waits, 3, what="pool B's second run taken by pool A's idle worker")
    other = submit(api, "pools-a-run", POOL_A)
    done = [succeeded(api, r["id"]) for r in (first, second, other)]
    assert [r["worker_host"] for r in done] == [HOST_B, HOST_B, HOST_A]
    assert when(done[1], "started_at") >= when(done[0], "finished_at")


def test_a_pool_without_a_live_worker_is_the_queue_reason_until_one_starts(
    api: httpx.Client, stack: PoolStack
) -> None:
    pool = f"late-{secrets.token_hex(3)}"  # a pool no worker has ever served
    run = submit(api, "pools-late", pool)
    reason = no_live_worker(pool, ever_served=False)
    assert run["queue_reason"] == reason
    assert f"no live worker serves pool '{pool}'" in reason

    def waits_saying_so() -> bool:
        got = api.get(f"/api/runs/{run['id']}").json()
        return got["status"] == "queued" and got["queue_reason"] == reason

    holds_for(waits_saying_so, 3, what=f"the run of pool {pool} waiting with its reason")
    queue = api.get("/api/gpus").json()["queue"]
    assert [q["reason"] for q in queue if q["run_id"] == run["id"]] == [reason]
    stack.add_worker("pools-host-late", pool)
    assert succeeded(api, run["id"])["worker_host"] == "pools-host-late"
