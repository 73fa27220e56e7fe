"""Pools (app.gpus.pools, issue 40): a run's `resources.pool` checked by name, each pool
scheduled on its own hosts (app.gpus.scheduler.pick_pools), the asking host's pool recorded and
respected (app.gpus.service), a pool without a live worker as the run's queue reason, and the
live pools the experiment form offers (GET /api/pools). Real workers of two pools:
tests/test_pools_workers.py."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.experiments.config.model import run_config
from app.gpus.models import WorkerHost
from app.gpus.pools import live_pools, pool_of, served_pools
from app.gpus.scheduler import (
    NO_LIVE_HOST,
    Placement,
    QueuedRun,
    no_live_worker,
    pick_pools,
)
from app.gpus.service import StartOutcome, queue_reason, touch_host, try_start
from app.timeutil import utcnow
from tests.conftest import make_user
from tests.factories import admin_run
from tests.test_pages import login

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
TTL = 60.0


def queued(run_id: int, gpus: int, pool: str) -> QueuedRun:
    return QueuedRun(id=run_id, gpus=gpus, priority=0, created_at=NOW, pool=pool)


def test_a_runs_pool_defaults_to_local_and_is_kept_in_its_config() -> None:
    assert run_config({"recipe": "tiny_mlp"}).resources.pool == "local"
    typed = run_config({"recipe": "tiny_mlp", "resources": {"pool": "slurm-a100"}})
    assert typed.stored()["resources"]["pool"] == "slurm-a100"
    assert pool_of(typed.stored()) == "slurm-a100"
    assert pool_of({"recipe": "tiny_mlp", "resources": {"gpus": 1}}) == "local"  # stored before


@pytest.mark.parametrize("name", ["Local", "-x", "a b", "a" * 33, "", "x\n", "ü"])
def test_a_pool_name_that_is_no_pool_is_a_422_naming_the_field(
    client: TestClient, user_headers: dict[str, str], name: str
) -> None:
    config = {"recipe": "tiny_mlp", "resources": {"pool": name}}
    r = client.post(
        "/api/experiments", json={"name": "bad-pool", "config": config}, headers=user_headers
    )
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"][-2:] == ["resources", "pool"]
    assert "no pool name" in error["msg"]


def test_each_pool_is_scheduled_on_its_own_hosts_only() -> None:
    queue = [
        queued(1, 1, "a"),
        queued(2, 1, "b"),
        queued(3, 0, "b"),
        queued(4, 1, "c"),
        queued(5, 2, "a"),
        queued(6, 0, "d"),
    ]
    decision = pick_pools(
        queue,
        {"host-a": [0], "host-b": [0, 1]},
        {"host-a": "a", "host-b": "b"},
        NOW,
        300,
        capacity_by_host={"host-a": 1, "host-b": 2},
        served={"c"},
    )
    assert decision.starts == {
        1: Placement("host-a", (0,)),
        2: Placement("host-b", (0,)),
        3: Placement(None, ()),  # any host of pool b
    }
    assert decision.waiting[4] == no_live_worker("c", ever_served=True)
    # Pool b's host has 2 GPUs: pool a's hosts have 1, so this one can never fit in its pool.
    assert "no host has that many (the most on one host: 1)" in decision.waiting[5]
    assert decision.waiting[6] == no_live_worker("d", ever_served=False)
    assert "no live worker serves pool 'd' (no worker has ever served it)" in decision.waiting[6]


def test_with_no_host_at_all_the_local_pool_waits_for_any_worker() -> None:
    queue = [queued(1, 0, "local"), queued(2, 0, "gpu-b")]
    decision = pick_pools(queue, {}, {}, NOW, 300, capacity_by_host={})
    assert decision.waiting == {1: NO_LIVE_HOST, 2: no_live_worker("gpu-b", ever_served=False)}
    # Only a worker of another pool is live: the local pool's runs name their pool.
    decision = pick_pools(queue, {"b": []}, {"b": "gpu-b"}, NOW, 300, capacity_by_host={"b": 0})
    assert decision.waiting == {1: no_live_worker("local", ever_served=False)}
    assert decision.starts == {2: Placement(None, ())}


def test_a_multi_node_run_spans_hosts_of_its_own_pool_only() -> None:
    run = QueuedRun(id=1, gpus=1, priority=0, created_at=NOW, pool="a", nodes=2)
    free = {"a1": [0], "a2": [0], "b1": [0]}
    pools = {"a1": "a", "a2": "a", "b1": "b"}
    capacity = {"a1": 1, "a2": 1, "b1": 1}
    started = pick_pools([run], free, pools, NOW, 300, capacity_by_host=capacity)
    assert {host for host, _ in started.starts[1].nodes} == {"a1", "a2"}
    # One host of pool a is not live: pool b's host never stands in for it.
    del free["a2"], pools["a2"], capacity["a2"]
    waits = pick_pools([run], free, pools, NOW, 300, capacity_by_host=capacity)
    assert waits.starts == {} and "needs 2 hosts with 1 GPUs each" in waits.waiting[1]


def _pool_run(db: Session, pool: str, gpus: int = 0) -> int:
    resources = {"gpus": gpus, "pool": pool}
    config = {"recipe": "tiny_mlp", "params": {}, "seed": 1, "resources": resources}
    return admin_run(db, config=config, status="queued")


def _ask(db: Session, run_id: int, host: str, pool: str, gpus: list[int]) -> StartOutcome:
    return try_start(
        db,
        run_id=run_id,
        host=host,
        inventory=gpus,
        lease_ttl_seconds=TTL,
        starvation_seconds=300,
        pool=pool,
    ).outcome


def test_a_host_records_its_pool_and_only_that_pools_runs_start_there(db: Session) -> None:
    tag = secrets.token_hex(3)
    pool_x, pool_y = f"x-{tag}", f"y-{tag}"
    host_x, host_y = f"hx-{tag}", f"hy-{tag}"
    touch_host(db, host=host_x, gpus=[0], now=utcnow(), pool=pool_x)
    assert db.get(WorkerHost, host_x).pool == pool_x  # type: ignore[union-attr]
    run_id = _pool_run(db, pool_y, gpus=1)

    def reason() -> str:
        return queue_reason(
            db, run_id=run_id, now=utcnow(), lease_ttl_seconds=TTL, starvation_seconds=300
        )

    assert reason() == no_live_worker(pool_y, ever_served=False)
    # A worker of another pool that asks (a stray message) does not start it; it stays queued.
    assert _ask(db, run_id, host_x, pool_x, [0]) is StartOutcome.GONE
    assert reason() == no_live_worker(pool_y, ever_served=False)
    touch_host(db, host=host_y, gpus=[], now=utcnow(), pool=pool_y)
    assert live_pools(db, now=utcnow(), ttl_seconds=TTL)[pool_y] == [host_y]
    assert {pool_x, pool_y} <= served_pools(db)
    # Pool y's only host has no GPU: the run can never fit there, whatever pool x's host has.
    assert "no host has that many" in reason()
    touch_host(db, host=host_y, gpus=[0, 1], now=utcnow(), pool=pool_y)
    assert reason().startswith(f"starting: GPUs 0 of {host_y}")
    assert _ask(db, run_id, host_y, pool_y, [0, 1]) is StartOutcome.STARTED


def test_the_live_pools_are_what_the_api_lists(
    client: TestClient, user_headers: dict[str, str], db: Session
) -> None:
    tag = secrets.token_hex(3)
    touch_host(db, host=f"h1-{tag}", gpus=[], now=utcnow(), pool=f"p-{tag}")
    touch_host(db, host=f"h0-{tag}", gpus=[], now=utcnow(), pool=f"p-{tag}")
    pools = client.get("/api/pools", headers=user_headers).json()["pools"]
    assert {"name": f"p-{tag}", "hosts": [f"h0-{tag}", f"h1-{tag}"], "executor": "process"} in pools
    names = [p["name"] for p in pools]
    assert names == sorted(names, key=lambda n: (n != "local", n))


def test_the_gpu_page_says_each_hosts_pool(
    client: TestClient, user_headers: dict[str, str], db: Session
) -> None:
    tag = secrets.token_hex(3)
    touch_host(db, host=f"hg-{tag}", gpus=[0], now=utcnow(), pool=f"g-{tag}")
    hosts = client.get("/api/gpus", headers=user_headers).json()["hosts"]
    assert [h["pool"] for h in hosts if h["host"] == f"hg-{tag}"] == [f"g-{tag}"]
    username, password, _ = make_user()
    login(client, username, password)
    html = client.get("/gpus").text
    assert f'data-host="hg-{tag}" data-pool="g-{tag}"' in html
    assert f"hg-{tag} · pool g-{tag}</h3>" in html
    assert f'<p class="muted host-pool">pool g-{tag} · executor process</p>' in html
