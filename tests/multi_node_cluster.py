"""One multi-node test cluster (docs/multi-node.md, "Tests"): the API in this namespace, two
worker hosts that are network namespaces (tests/netns_hosts.py) with 2 fake GPUs each, one
database, one broker and one artifact store (the hosts share no run directory with the API,
as two GPU boxes would not).

Building it (namespaces, two workers, their job bases) takes most of a test's time, so a test
module builds it once::

    @pytest.fixture(scope="module")
    def cluster(database: str) -> Iterator[Cluster]:
        with running_cluster() as built:
            yield built

and each test leaves it as it found it: a test that kills a host's worker restarts it
(``Cluster.restart_worker``) before it ends, also when it fails."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
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

ROOT = BASE_DIR / "multi-node"
SCRIPT = Path(__file__).parent / "workspace_scripts" / "ddp_multi_node.py"
# Short enough that a lost node is noticed within a test, long enough for a busy box (a
# fresh data dir builds its job base without a heartbeat) and for a killed worker to be
# restarted before its node counts as lost.
RUN_LOST_SECONDS = 60.0  # the default; a restart took 21 s at load 27, 75 s at load 35
ENDED = {"succeeded", "failed", "cancelled"}
TWO_BY_TWO = {"nodes": 2, "nproc": 2, "gpus": 2}


@dataclass
class Cluster:
    api: httpx.Client
    hosts: NetnsHosts
    data_dirs: dict[str, Path]
    store: Path  # the artifact store every worker uploads to and the API reads
    worker_envs: dict[str, dict[str, str]]
    workers: dict[str, subprocess.Popen[bytes]]  # each host's current worker
    logs: Path

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts.hosts]

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

    def node_hosts(self, run_id: int) -> tuple[str, str]:
        """(node 0's host, node 1's host) of a running or ended 2-node run."""
        node_0 = self.api.get(f"/api/runs/{run_id}").json()["worker_host"]
        return node_0, next(n for n in self.names if n != node_0)

    def start_worker(self, name: str) -> float:
        """Start the host's worker (again); returns when it started (time.monotonic())."""
        t0 = time.monotonic()
        self.workers[name] = _start_worker(self.hosts, name, self.worker_envs[name], self.logs)
        return t0

    def kill_worker(self, name: str) -> None:
        """SIGKILL the host's worker: its jobs train on under their keepers."""
        self.workers[name].send_signal(signal.SIGKILL)
        self.workers[name].wait(timeout=30)

    def restart_worker(self, name: str, *, timeout: float = 120) -> None:
        """The host's worker, killed or stopped, started again and heartbeating."""
        if self.workers[name].poll() is None:
            self.kill_worker(name)
        wait_for_hosts((name,), self.start_worker(name), timeout=timeout)

    def worker_log(self, name: str) -> str:
        return (self.logs / f"worker-{name}.log").read_text(errors="replace")


def _start_worker(
    hosts: NetnsHosts, name: str, env: dict[str, str], logs: Path
) -> subprocess.Popen[bytes]:
    host = next(h for h in hosts.hosts if h.name == name)
    return hosts.start(host, worker_argv(2), env, logs / f"worker-{name}.log")


def _purge(url: str) -> None:
    if url.startswith("redis"):
        import redis

        redis.Redis.from_url(url).flushdb()  # this test's own database: its hosts' queues too


@contextlib.contextmanager
def running_cluster() -> Iterator[Cluster]:
    """The cluster, torn down (workers, namespaces, API) however the block ends."""
    require_netns()
    _purge(NETNS_BROKER_URL)
    logs = ROOT / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    store = ROOT / "store"
    store.mkdir(parents=True, exist_ok=True)
    (WORKSPACE_DIR / "multi_node").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "multi_node" / "ddp.py")
    env = dict(
        os.environ,
        TORCHYARD_DATA_DIR=str(ROOT / "api-data"),
        TORCHYARD_BROKER_URL=NETNS_BROKER_URL,
        TORCHYARD_ARTIFACT_STORE=str(store),
        PYTHONUNBUFFERED="1",
    )
    port = free_port()
    server = start_logged(server_argv("127.0.0.1", port), env, logs / "server.log")
    try:
        with NetnsHosts(2) as hosts:
            t0 = time.monotonic()
            data_dirs = {h.name: ROOT / f"{h.name}-data" for h in hosts.hosts}
            worker_envs = {
                h.name: hosts.worker_env(
                    h,
                    data_dirs[h.name],
                    gpus="0,1",
                    broker_url=NETNS_BROKER_URL,
                    TORCHYARD_ARTIFACT_STORE=str(store),
                    TORCHYARD_RUN_LOST_SECONDS=str(RUN_LOST_SECONDS),
                    TORCHYARD_REAP_INTERVAL_SECONDS="2",  # the suite's is off
                )
                for h in hosts.hosts
            }
            workers = {
                name: _start_worker(hosts, name, worker_envs[name], logs) for name in data_dirs
            }
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(base_url, server, logs / "server.log")
            wait_for_hosts(tuple(data_dirs), t0, timeout=180)
            with LiveStack(base_url, logs, ADMIN_PASSWORD).admin_client() as api:
                yield Cluster(api, hosts, data_dirs, store, worker_envs, workers, logs)
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


def succeeded(api: httpx.Client, run_id: int, timeout: float = 240) -> dict:
    run = ended(api, run_id, timeout)
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


def training_on_both(cluster: Cluster, run_id: int, points: int = 2) -> None:
    """Until the run has processes on both hosts and `points` steps of its curve."""

    def both() -> bool:
        found = cluster.processes(run_id)
        steps = series(cluster.api, run_id).get("train/loss", {}).get("step", [])
        return all(found.values()) and len(steps) >= points

    wait_for(both, timeout=240, every=0.2, what=f"run {run_id} training on both hosts")
