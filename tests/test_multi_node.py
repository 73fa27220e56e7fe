"""Multi-node runs for real (issue 30, docs/multi-node.md): the API in this namespace, two
worker hosts that are network namespaces (tests/netns_hosts.py) with 2 fake GPUs each, one
database and one broker. A run of 2 nodes x 2 processes trains as one gloo world of 4, fails
as one when a rank of node 1 raises, cancels as one, and two such runs submitted at once run
one after the other."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.cli import server_argv, worker_argv
from app.db import session_scope
from app.gpus.models import GpuLease
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, WORKSPACE_DIR, processes_in, wait_for_status
from tests.netns_hosts import NetnsHosts, require_netns
from tests.stack import (
    LiveStack,
    free_port,
    start_logged,
    stop_process,
    wait_for_hosts,
    wait_healthy,
)
from tests.test_netns_hosts import NETNS_BROKER_URL
from tests.waits import wait_for

pytestmark = pytest.mark.slow

ROOT = BASE_DIR / "multi-node"
SCRIPT = Path(__file__).parent / "workspace_scripts" / "ddp_multi_node.py"
# Short enough that a lost node is noticed within a test, long enough for a busy box (a
# fresh data dir builds its job base without a heartbeat).
RUN_LOST_SECONDS = 30.0
ENDED = {"succeeded", "failed", "cancelled"}


@dataclass
class Cluster:
    api: httpx.Client
    hosts: NetnsHosts
    data_dirs: dict[str, Path]

    def processes(self, run_id: int) -> dict[str, list[int]]:
        """The run's live processes on each host (its run directory in their environment)."""
        return {
            name: processes_in(data_dir / "runs" / str(run_id))
            for name, data_dir in self.data_dirs.items()
        }

    def leases(self, run_id: int) -> list[tuple[str, int]]:
        with session_scope() as session:
            rows = session.execute(
                select(GpuLease.host, GpuLease.gpu_index).where(GpuLease.run_id == run_id)
            ).all()
        return sorted((host, index) for host, index in rows)


def _purge(url: str) -> None:
    if url.startswith("redis"):
        import redis

        redis.Redis.from_url(url).flushdb()  # this test's own database: its hosts' queues too


@pytest.fixture(scope="module")
def cluster(database: str) -> Iterator[Cluster]:
    require_netns()
    _purge(NETNS_BROKER_URL)
    logs = ROOT / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (WORKSPACE_DIR / "multi_node").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "multi_node" / "ddp.py")
    env = dict(
        os.environ,
        TORCHYARD_DATA_DIR=str(ROOT / "api-data"),
        TORCHYARD_BROKER_URL=NETNS_BROKER_URL,
        PYTHONUNBUFFERED="1",
    )
    port = free_port()
    server = start_logged(server_argv("127.0.0.1", port), env, logs / "server.log")
    try:
        with NetnsHosts(2) as hosts:
            t0 = time.monotonic()
            data_dirs = {}
            for host in hosts.hosts:
                data_dirs[host.name] = ROOT / f"{host.name}-data"
                worker_env = hosts.worker_env(
                    host,
                    data_dirs[host.name],
                    gpus="0,1",
                    broker_url=NETNS_BROKER_URL,
                    TORCHYARD_RUN_LOST_SECONDS=str(RUN_LOST_SECONDS),
                    TORCHYARD_REAP_INTERVAL_SECONDS="2",  # the suite's is off
                )
                hosts.start(host, worker_argv(2), worker_env, logs / f"worker-{host.name}.log")
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(base_url, server, logs / "server.log")
            wait_for_hosts(tuple(data_dirs), t0, timeout=180)
            with LiveStack(base_url, logs, ADMIN_PASSWORD).admin_client() as api:
                yield Cluster(api, hosts, data_dirs)
    finally:
        stop_process(server)


def submit(api: httpx.Client, name: str, resources: dict, **params: object) -> int:
    config = {
        "script": "multi_node/ddp.py",
        "params": {"epochs": 2, **params},
        "seed": 7,
        "resources": resources,
    }
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    return int(run.json()["id"])


def ended(api: httpx.Client, run_id: int, timeout: float = 240) -> dict:
    return wait_for_status(api, run_id, ENDED, timeout=timeout)


def succeeded(api: httpx.Client, run_id: int) -> dict:
    run = ended(api, run_id)
    if run["status"] != "succeeded":
        tail = api.get(f"/api/runs/{run_id}/logs", params={"tail": 40}).text
        pytest.fail(f"run {run_id} {run['status']}: {run.get('error')!r}\nlog tail:\n{tail}")
    return run


def series(api: httpx.Client, run_id: int) -> dict:
    return dict(api.get(f"/api/runs/{run_id}/metrics").json()["series"])


def gone_within(cluster: Cluster, run_id: int, seconds: float) -> None:
    wait_for(
        lambda: not any(cluster.processes(run_id).values()),
        timeout=seconds,
        every=0.1,
        what=lambda: f"processes of run {run_id} left: {cluster.processes(run_id)}",
    )


TWO_BY_TWO = {"nodes": 2, "nproc": 2, "gpus": 2}


def test_a_two_node_run_is_one_world_of_four_matching_one_host_of_four(cluster: Cluster) -> None:
    api = cluster.api
    multi = succeeded(api, submit(api, "mn-2x2", TWO_BY_TWO))
    single = succeeded(api, submit(api, "mn-1x4", {"nproc": 4, "gpus": 0}))
    got, want = series(api, multi["id"]), series(api, single["id"])
    steps = list(range(1, 17))  # 256 samples, a global batch of 32, 2 epochs
    assert got["world_size"]["value"] == [4.0] * 16 == want["world_size"]["value"]
    assert got["shards_disjoint"]["value"] == [1.0] * 16  # each rank's shard its own
    assert got["train/loss"]["step"] == steps == want["train/loss"]["step"]
    assert got["train/loss"]["value"] == pytest.approx(want["train/loss"]["value"], rel=1e-5)
    assert multi["worker_host"] == "host-0" or multi["worker_host"] == "host-1"
    assert cluster.leases(multi["id"]) == []
    # node 1's output reaches the API from its host, labelled: it holds global ranks 2 and 3
    # (node 0's log is read from its run directory, which these hosts' API does not share)
    node_1 = api.get(f"/api/runs/{multi['id']}/logs", params={"node": 1}).text
    assert "rank 2 of 4 on node 1" in node_1 and "rank 3 of 4 on node 1" in node_1, node_1
    rank_3 = api.get(f"/api/runs/{multi['id']}/logs", params={"rank": 3}).text
    assert "rank 3 of 4 on node 1" in rank_3 and "rank 2 of 4" not in rank_3, rank_3


def test_a_failing_rank_on_node_1_fails_the_run_on_both_hosts(cluster: Cluster) -> None:
    api = cluster.api
    run_id = submit(api, "mn-fail", TWO_BY_TWO, epochs=50, fail_rank=2, fail_step=4, step_sleep=0.2)
    run = ended(api, run_id)
    assert run["status"] == "failed", run
    error = run["error"] or ""
    assert "node 1" in error and "rank 2" in error, error
    assert "rank 2 fails on purpose at step 4" in error, error
    # every process of the run on both hosts is gone within 10 s of the rank's failure (the
    # time its record says, written as it raised)
    node_1 = next(
        d
        for d in cluster.data_dirs.values()
        if (d / "runs" / str(run_id)).is_dir()
        and (d / "runs" / str(run_id) / "errors" / "rank2.json").is_file()
    )
    raised = json.loads((node_1 / "runs" / str(run_id) / "errors" / "rank2.json").read_text())
    gone_within(cluster, run_id, 10)
    took = time.time() - float(raised["time"])
    print(f"rank 2 raised -> every process on both hosts gone: at most {took:.1f} s")
    assert took < 10, took
    assert cluster.leases(run_id) == []


def test_a_cancel_stops_every_process_on_both_hosts_and_frees_every_lease(
    cluster: Cluster,
) -> None:
    api = cluster.api
    run_id = submit(api, "mn-cancel", TWO_BY_TWO, epochs=50, step_sleep=0.2)

    def training_on_both() -> bool:
        found = cluster.processes(run_id)
        points = series(api, run_id).get("train/loss", {}).get("step", [])
        return all(found.values()) and len(points) >= 2

    wait_for(training_on_both, timeout=240, every=0.2, what="the run training on both hosts")
    assert len(cluster.leases(run_id)) == 4
    assert api.post(f"/api/runs/{run_id}/cancel").status_code == 202
    t0 = time.monotonic()
    gone_within(cluster, run_id, 5)
    took = time.monotonic() - t0
    print(f"cancel -> every process on both hosts gone: {took:.1f} s")
    assert took < 5
    assert ended(api, run_id, timeout=30)["status"] == "cancelled"
    assert cluster.leases(run_id) == []


def test_two_two_node_runs_submitted_at_once_run_one_after_the_other(cluster: Cluster) -> None:
    api = cluster.api
    first = submit(api, "mn-gang-a", TWO_BY_TWO, step_sleep=0.05)
    second = submit(api, "mn-gang-b", TWO_BY_TWO, step_sleep=0.05)
    runs = [succeeded(api, first), succeeded(api, second)]
    runs.sort(key=lambda r: r["started_at"])
    # never both partly: the later one started only after the earlier one had finished
    assert runs[0]["finished_at"] <= runs[1]["started_at"], runs


def test_the_worker_of_node_1_killed_mid_run_fails_the_run_and_leaves_nothing_on_node_0(
    cluster: Cluster,
) -> None:
    """Its job trains on under its keeper, but nothing speaks for node 1 any more: once its
    heartbeat is older than run_lost_seconds the run fails as one with the reason, and node
    0's worker stops every process of its node. (Last: it kills a worker of the cluster.)"""
    api = cluster.api
    run_id = submit(api, "mn-lost", TWO_BY_TWO, epochs=50, step_sleep=0.2)

    def training_on_both() -> bool:
        found = cluster.processes(run_id)
        points = series(api, run_id).get("train/loss", {}).get("step", [])
        return all(found.values()) and len(points) >= 2

    wait_for(training_on_both, timeout=240, every=0.2, what="the run training on both hosts")
    node_0 = api.get(f"/api/runs/{run_id}").json()["worker_host"]
    names = [h.name for h in cluster.hosts.hosts]
    node_1 = names[1 - names.index(node_0)]
    cluster.hosts.workers[names.index(node_1)].kill()  # SIGKILL: its job is left behind
    run = ended(api, run_id, timeout=RUN_LOST_SECONDS * 4)
    assert run["status"] == "failed", run
    assert f"node 1 ({node_1}) lost" in (run["error"] or ""), run["error"]
    wait_for(
        lambda: not cluster.processes(run_id)[node_0],
        timeout=10,
        every=0.1,
        what=lambda: f"processes of run {run_id} left on node 0: {cluster.processes(run_id)}",
    )
    assert cluster.leases(run_id) == []
