"""A multi-node job's network for real (worker/job_firewall.py, docs/security.md): two worker
hosts that are network namespaces (tests/netns_hosts.py), a 2-node x 2-process gloo run whose
every rank first tries to connect to the database's and the broker's address:port (PostgreSQL
and Redis, as the workers reach them: through proxies on the bridge; on the embedded pass the
database is a file and only Redis is there), to a listener on each host's loopback, one on
the host's own address and one on the peer's, all reachable from the hosts themselves, and
fails each time, while the DDP training across the nodes succeeds. Once the run has ended no
rule of its uid is left on either host.

Its own cluster rather than tests/test_multi_node.py's: there the broker is a SQLite file on the
embedded pass, and here it must be a service the job could reach (Redis, both passes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from app.cli import server_argv, worker_argv
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, DATABASE_URL, WORKSPACE_DIR, wait_for_status
from tests.netns_hosts import NetnsHost, NetnsHosts, python_in, require_netns
from tests.stack import LiveStack, free_port, start_logged, stop_process, wait_for_hosts
from tests.waits import wait_for
from torchyard.contract import RunPaths

pytestmark = pytest.mark.slow

ROOT = BASE_DIR / "multi-node-network"
SCRIPT = Path(__file__).parent / "workspace_scripts" / "ddp_multi_node.py"
REDIS_URL = os.environ.get("TORCHYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
# A port below every ephemeral range (and not a rendezvous port): each host listens on it on
# its loopback and on its own address.
LISTEN_PORT = 24_117
LISTENER = """
import socket, sys
servers = [socket.create_server((host, int(sys.argv[1]))) for host in sys.argv[2:]]
print("listening", flush=True)
import selectors
chooser = selectors.DefaultSelector()
for server in servers:
    chooser.register(server, selectors.EVENT_READ)
while True:
    for key, _ in chooser.select():
        conn, _ = key.fileobj.accept()
        conn.close()
"""


@dataclass
class Cluster:
    api: httpx.Client
    hosts: NetnsHosts
    data_dirs: dict[str, Path]
    services: list[str]  # host:port of the database (PostgreSQL) and the broker, as reached


def _host_port(url: str) -> str | None:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.hostname and parts.port else None


@pytest.fixture(scope="module")
def cluster(database: str) -> Iterator[Cluster]:
    require_netns()
    if shutil.which("nft") is None and os.environ.get("CI") != "true":
        pytest.skip("nft (nftables) is not installed: `make sandbox`")
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()  # the tests' own database: its hosts' queues
    logs = ROOT / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (WORKSPACE_DIR / "multi_node").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "multi_node" / "ddp.py")
    env = dict(
        os.environ,
        TORCHYARD_DATA_DIR=str(ROOT / "api-data"),
        TORCHYARD_BROKER_URL=REDIS_URL,
        PYTHONUNBUFFERED="1",
    )
    port = free_port()
    server = start_logged(server_argv("127.0.0.1", port), env, logs / "server.log")
    try:
        with NetnsHosts(2) as hosts:
            t0 = time.monotonic()
            data_dirs, services = {}, []
            for host in hosts.hosts:
                data_dirs[host.name] = ROOT / f"{host.name}-data"
                worker_env = hosts.worker_env(
                    host, data_dirs[host.name], gpus="0,1", broker_url=REDIS_URL
                )
                services = [
                    found
                    for url in (worker_env["TORCHYARD_DATABASE_URL"], REDIS_URL)
                    if (found := _host_port(hosts.reach(url)))
                ]
                hosts.start(host, worker_argv(2), worker_env, logs / f"worker-{host.name}.log")
                listener = [sys.executable, "-c", LISTENER, str(LISTEN_PORT)]
                hosts.start(
                    host, [*listener, "127.0.0.1", host.address], env, logs / f"listen-{host.name}"
                )
            base_url = f"http://127.0.0.1:{port}"
            # under load the API's start competes with both workers' (import torch and all)
            wait_for(lambda: _healthy(base_url, server, logs), timeout=240, every=0.2, what="API")
            wait_for_hosts(tuple(data_dirs), t0, timeout=240)
            with LiveStack(base_url, logs, ADMIN_PASSWORD).admin_client() as api:
                yield Cluster(api, hosts, data_dirs, services)
    finally:
        stop_process(server)


def _healthy(base_url: str, server: subprocess.Popen[bytes], logs: Path) -> bool:
    if server.poll() is not None:
        pytest.fail(f"the API exited:\n{(logs / 'server.log').read_text()}")
    try:
        return httpx.get(f"{base_url}/api/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


REACH = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=10).close()
print("reached")
"""


def reachable_from_host(cluster: Cluster, targets: list[str]) -> None:
    """Each target answers a connection made in each host's namespace by root (not the run's
    uid): whatever the job gets refused is the fence's doing."""
    for host in cluster.hosts.hosts:
        code = f"import sys; sys.argv = ['x', *{targets!r}]\n{REACH}"
        assert python_in(host, code) == "reached", host


def test_a_multi_node_job_reaches_its_peers_and_none_of_the_hosts_services(
    cluster: Cluster,
) -> None:
    a, b = cluster.hosts.hosts
    targets = [
        *cluster.services,
        f"127.0.0.1:{LISTEN_PORT}",
        f"{a.address}:{LISTEN_PORT}",  # node a's own address, and its peer's for node b
        f"{b.address}:{LISTEN_PORT}",
    ]
    if DATABASE_URL.startswith("postgresql"):
        assert len(cluster.services) == 2, cluster.services  # the database and the broker
    wait_for(lambda: _listening(cluster), timeout=60, every=0.2, what="the listeners up")
    reachable_from_host(cluster, targets)
    config = {
        "script": "multi_node/ddp.py",
        "params": {"epochs": 1, "probe": ",".join(targets)},
        "seed": 7,
        "resources": {"nodes": 2, "nproc": 2, "gpus": 2},
    }
    api = cluster.api
    exp = api.post("/api/experiments", json={"name": "mn-network", "config": config})
    assert exp.status_code == 201, exp.text
    created = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert created.status_code == 201, created.text
    run_id = int(created.json()["id"])
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=300)
    node_1 = api.get(f"/api/runs/{run_id}/logs", params={"node": 1}).text
    assert run["status"] == "succeeded", f"{run['error']}\nnode 1's log:\n{node_1}"
    # the training went across the nodes: one world of 4
    world = api.get(f"/api/runs/{run_id}/metrics").json()["series"]["world_size"]["value"]
    assert set(world) == {4.0}, world
    # every rank tried every target and was refused (the script raises if one answers)
    node_0_host = run["worker_host"]
    node_0 = RunPaths(cluster.data_dirs[node_0_host] / "runs" / str(run_id)).log.read_text()
    for log in (node_0, node_1):
        for target in targets:
            assert log.count(f"probe {target}: not reached") == 2, (target, log)
    assert "Connection refused" in node_1

    # and no rule of the run's uid is left on either host once its worker is done with the
    # node (node k's may still be stopping its job when node 0 has ended the run)
    def rules_left() -> list[str]:
        return [
            f"{host.name}: {listed}"
            for host in cluster.hosts.hosts
            if "jump run_" in (listed := _ruleset(host))
        ]

    wait_for(lambda: not rules_left(), timeout=60, every=0.5, what=rules_left)


def _ruleset(host: NetnsHost) -> str:
    return subprocess.run(
        host.argv(["nft", "list", "ruleset"]), capture_output=True, text=True, check=True
    ).stdout


def _listening(cluster: Cluster) -> bool:
    files = [ROOT / "logs" / f"listen-{h.name}" for h in cluster.hosts.hosts]
    return all(f.exists() and "listening" in f.read_text() for f in files)
