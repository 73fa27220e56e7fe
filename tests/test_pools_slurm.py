"""A Slurm pool among the pools (app.gpus.pools, issue 40): its worker records its executor
(worker_hosts.executor) and runs on a submit host with no GPUs of its own, so torchyard neither
refuses its runs for that host's GPUs (the 422 of a run no live host could ever start) nor
places them: Slurm schedules them. Until its worker takes one the queue reason says that; GET
/api/pools and the experiment form name the pool's executor. The same on a real cluster:
tests/test_slurm_executor.py (its worker's host has no GPUs)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.gpus.models import WorkerHost
from app.gpus.pools import outside_pools, pool_executors
from app.gpus.scheduler import QueuedRun, pick_pools, scheduled_outside
from app.gpus.service import queue_reason, touch_host
from app.timeutil import utcnow
from tests.conftest import make_user
from tests.test_pages import login

TTL = 60.0
NOW = datetime(2026, 12, 6, tzinfo=UTC)


def _config(pool: str, gpus: int) -> dict[str, object]:
    return {"recipe": "tiny_mlp", "resources": {"gpus": gpus, "nproc": gpus, "pool": pool}}


def test_a_slurm_pools_runs_are_not_placed_on_gpus_even_where_some_are_free() -> None:
    queue = [
        QueuedRun(id=1, gpus=2, priority=0, created_at=NOW, pool="cluster"),
        QueuedRun(id=2, gpus=1, priority=0, created_at=NOW, pool="local"),
    ]
    decision = pick_pools(
        queue,
        {"submit": [0, 1], "box": [0]},
        {"submit": "cluster", "box": "local"},
        NOW,
        300,
        capacity_by_host={"submit": 2, "box": 1},
        outside={"cluster": "slurm"},
    )
    assert decision.waiting == {1: scheduled_outside("cluster", "slurm")}
    assert list(decision.starts) == [2] and decision.starts[2].host == "box"
    assert "Slurm schedules" in scheduled_outside("cluster", "slurm")


def test_a_host_records_its_executor_and_its_pool_is_an_outside_schedulers(db: Session) -> None:
    tag = secrets.token_hex(3)
    touch_host(db, host=f"s-{tag}", gpus=[], now=utcnow(), pool=f"c-{tag}", executor="slurm")
    touch_host(db, host=f"p-{tag}", gpus=[0], now=utcnow(), pool=f"l-{tag}")
    host = db.get(WorkerHost, f"s-{tag}")
    assert host is not None and host.executor == "slurm"
    assert db.get(WorkerHost, f"p-{tag}").executor == "process"  # type: ignore[union-attr]
    executors = pool_executors(db, now=utcnow(), ttl_seconds=TTL)
    assert executors[f"c-{tag}"] == "slurm" and executors[f"l-{tag}"] == "process"
    assert outside_pools([host]) == {f"c-{tag}": "slurm"}


def test_a_gpu_run_of_a_slurm_pool_whose_submit_host_has_none_is_accepted_and_waits_for_it(
    client: TestClient, user_headers: dict[str, str], db: Session
) -> None:
    tag = secrets.token_hex(3)
    cluster, boxes = f"c-{tag}", f"b-{tag}"
    touch_host(db, host=f"s-{tag}", gpus=[], now=utcnow(), pool=cluster, executor="slurm")
    touch_host(db, host=f"p-{tag}", gpus=[], now=utcnow(), pool=boxes)
    exp = client.post(
        "/api/experiments",
        json={"name": f"slurm-{tag}", "config": _config(cluster, 2)},
        headers=user_headers,
    )
    assert exp.status_code == 201, exp.text
    run = client.post(f"/api/experiments/{exp.json()['id']}/runs", json={}, headers=user_headers)
    assert run.status_code == 201, run.text
    reason = scheduled_outside(cluster, "slurm")
    assert run.json()["queue_reason"] == reason
    assert (
        queue_reason(
            db, run_id=run.json()["id"], now=utcnow(), lease_ttl_seconds=TTL, starvation_seconds=300
        )
        == reason
    )
    queue = client.get("/api/gpus", headers=user_headers).json()["queue"]
    assert [q["reason"] for q in queue if q["run_id"] == run.json()["id"]] == [reason]
    # A process pool whose live hosts have no GPUs still refuses it: nothing would ever start it.
    refused = client.post(
        "/api/experiments",
        json={"name": f"boxes-{tag}", "config": _config(boxes, 2)},
        headers=user_headers,
    )
    exp_id = refused.json()["id"]
    refused = client.post(f"/api/experiments/{exp_id}/runs", json={}, headers=user_headers)
    assert refused.status_code == 422, refused.text
    assert "no live worker host could ever start this run" in refused.text


def test_the_api_the_form_and_the_gpu_page_name_a_slurm_pools_executor(
    client: TestClient, user_headers: dict[str, str], db: Session
) -> None:
    tag = secrets.token_hex(3)
    touch_host(db, host=f"s-{tag}", gpus=[], now=utcnow(), pool=f"c-{tag}", executor="slurm")
    pools = client.get("/api/pools", headers=user_headers).json()["pools"]
    assert {"name": f"c-{tag}", "hosts": [f"s-{tag}"], "executor": "slurm"} in pools
    hosts = client.get("/api/gpus", headers=user_headers).json()["hosts"]
    assert [(h["pool"], h["executor"]) for h in hosts if h["host"] == f"s-{tag}"] == [
        (f"c-{tag}", "slurm")
    ]
    username, password, _ = make_user()
    login(client, username, password)
    html = client.get("/experiments/new").text
    assert f'<option value="c-{tag}">c-{tag} (slurm: its scheduler places the runs)' in html
    html = client.get("/gpus").text  # each host's pool and executor
    assert f'data-host="s-{tag}" data-pool="c-{tag}" data-executor="slurm"' in html
    assert f"pool c-{tag} · executor slurm (Slurm places its runs)</p>" in html
