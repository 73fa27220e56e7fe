"""One multi-node test cluster (docs/multi-node.md, "Tests"): the API in this namespace, two
worker hosts that are network namespaces (tests/netns_hosts.py) with 2 fake GPUs each, one
database, one broker and one artifact store (the hosts share no run directory with the API,
as two GPU boxes would not).

The broker is a service the hosts reach over the network and a multi-node job must not
(worker/job_firewall.py): the tests' own Redis database (TORCHYARD_TEST_REDIS_URL, not the
suite's broker, so the hosts take none of the shared worker's tasks), on either pass, reached
through a proxy on the bridge as PostgreSQL is. `Cluster.services` names what the hosts reach
that way, the targets the job network's test probes.

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
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import select

from app.db import session_scope
from app.gpus.models import GpuLease
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, WORKSPACE_DIR, processes_in, wait_for_status
from tests.netns_hosts import NetnsHost, NetnsHosts, python_in, require_netns
from tests.stack import (
    LiveStack,
    free_port,
    start_logged,
    stop_process,
    wait_for_hosts,
    wait_healthy,
)
from tests.waits import wait_for
from torchyard.compose.processes import server_argv, worker_argv

ROOT = BASE_DIR / "multi-node"
SCRIPT = Path(__file__).parent / "workspace_scripts" / "ddp_multi_node.py"
# Short enough that a lost node is noticed within a test, long enough for a busy box (a
# fresh data dir builds its job base without a heartbeat) and for a killed worker to be
# restarted before its node counts as lost.
RUN_LOST_SECONDS = 30.0  # a restart took 21 s at load 27 (75 s at load 35: such a box fails it)
ENDED = {"succeeded", "failed", "cancelled"}
TWO_BY_TWO = {"nodes": 2, "nproc": 2, "gpus": 2}
BROKER_URL = os.environ.get("TORCHYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
# Listens on each address given (a host's loopback, its own address) and accepts every
# connection: what a job of that host must not reach and root there can.
LISTENER = """
import selectors, socket, sys
chooser = selectors.DefaultSelector()
for host in sys.argv[2:]:
    chooser.register(socket.create_server((host, int(sys.argv[1]))), selectors.EVENT_READ)
while True:
    for key, _ in chooser.select():
        key.fileobj.accept()[0].close()
"""
# Prints each target it could not connect to (none: all reached).
REACH = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as exc:
        print(f"{target} ({exc})")
"""


@dataclass
class Cluster:
    api: httpx.Client
    hosts: NetnsHosts
    data_dirs: dict[str, Path]
    store: Path  # the artifact store every worker uploads to and the API reads
    worker_envs: dict[str, dict[str, str]]
    workers: dict[str, subprocess.Popen[bytes]]  # each host's current worker
    logs: Path
    # host:port of the database (PostgreSQL; none for a SQLite file) and the broker as the
    # hosts reach them: the proxies on the bridge
    services: tuple[str, ...]

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

    @contextlib.contextmanager
    def listening(self, port: int) -> Iterator[None]:
        """A listener on `port` of each host's loopback and own address while the block runs."""
        listeners = [
            self.hosts.start(
                host,
                [sys.executable, "-c", LISTENER, str(port), "127.0.0.1", host.address],
                dict(os.environ),
                self.logs / f"listen-{host.name}.log",
            )
            for host in self.hosts.hosts
        ]
        try:
            yield
        finally:
            for listener in listeners:
                stop_process(listener, timeout=10)

    def unreached(self, targets: list[str]) -> list[str]:
        """The targets that root (not a run's uid) fails to connect to in each host's
        namespace: what a job gets refused beyond these is the fence's doing."""
        code = f"import sys; sys.argv = ['reach', *{targets!r}]\n{REACH}"
        return [
            f"{host.name}: {line}"
            for host in self.hosts.hosts
            for line in python_in(host, code).splitlines()
        ]

    def run_rules(self) -> list[str]:
        """Each host's nftables ruleset that still jumps to a run's chain (job_firewall)."""
        return [
            f"{host.name}: {listed}"
            for host in self.hosts.hosts
            if "jump run_" in (listed := _ruleset(host))
        ]


def _ruleset(host: NetnsHost) -> str:
    return subprocess.run(
        host.argv(["nft", "list", "ruleset"]), capture_output=True, text=True, check=True
    ).stdout


def _host_port(url: str) -> str | None:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.hostname and parts.port else None


def _start_worker(
    hosts: NetnsHosts, name: str, env: dict[str, str], logs: Path
) -> subprocess.Popen[bytes]:
    host = next(h for h in hosts.hosts if h.name == name)
    return hosts.start(host, worker_argv(2), env, logs / f"worker-{name}.log")


def require_nft() -> None:
    """A multi-node job is refused without nft (worker/job_firewall.py): skip where it is not
    installed, except on CI."""
    if shutil.which("nft") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run the multi-node tests, but nft (nftables) is not installed")
        pytest.skip("nft (nftables) is not installed: `make sandbox`")


@contextlib.contextmanager
def running_cluster() -> Iterator[Cluster]:
    """The cluster, torn down (workers, namespaces, API) however the block ends."""
    require_netns()
    require_nft()
    import redis

    redis.Redis.from_url(BROKER_URL).flushdb()  # the tests' own database: its hosts' queues
    logs = ROOT / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    store = ROOT / "store"
    store.mkdir(parents=True, exist_ok=True)
    (WORKSPACE_DIR / "multi_node").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "multi_node" / "ddp.py")
    env = dict(
        os.environ,
        TORCHYARD_DATA_DIR=str(ROOT / "api-data"),
        TORCHYARD_BROKER_URL=BROKER_URL,
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
                    broker_url=BROKER_URL,
                    TORCHYARD_ARTIFACT_STORE=str(store),
                    TORCHYARD_RUN_LOST_SECONDS=str(RUN_LOST_SECONDS),
                    # Below the lost limit, as the settings require on PostgreSQL.
                    TORCHYARD_DB_IDLE_TRANSACTION_SECONDS=str(RUN_LOST_SECONDS / 3),
                    TORCHYARD_REAP_INTERVAL_SECONDS="2",  # the suite's is off
                )
                for h in hosts.hosts
            }
            workers = {
                name: _start_worker(hosts, name, worker_envs[name], logs) for name in data_dirs
            }
            reached = (worker_envs["host-0"]["TORCHYARD_DATABASE_URL"], hosts.reach(BROKER_URL))
            services = tuple(found for url in reached if (found := _host_port(url)))
            base_url = f"http://127.0.0.1:{port}"
            wait_healthy(base_url, server, logs / "server.log")
            wait_for_hosts(tuple(data_dirs), t0, timeout=180)
            with LiveStack(base_url, logs, ADMIN_PASSWORD).admin_client() as api:
                yield Cluster(api, hosts, data_dirs, store, worker_envs, workers, logs, services)
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
