"""The multi-node test bed (tests/netns_hosts.py): hosts that are network namespaces, each with
its own address and worker, sharing this suite's database and a broker; everything made is
gone afterwards, also when the test body fails."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from app.db import session_scope
from app.experiments.config.model import run_config
from app.gpus.models import WorkerHost
from tests.conftest import BASE_DIR, BROKER_URL
from tests.netns_hosts import NetnsHosts, ip, python_in, require_netns, sweep_stale
from tests.stack import purge_broker, wait_for_hosts
from torchyard.compose.processes import worker_argv
from worker.launcher import LaunchSpec, NodeSpec, build_launch

pytestmark = pytest.mark.slow

# The broker the namespaces' workers listen on: not the suite's shared worker's, so they take
# none of its tasks (the tests' own Redis database, as tests/test_separate_hosts.py's, or a
# SQLite file of its own).
NETNS_BROKER_URL = (
    os.environ.get("TORCHYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
    if BROKER_URL.startswith("redis")
    else f"sqla+sqlite:///{BASE_DIR / 'netns-broker.db'}"
)
LOG_DIR = BASE_DIR / "logs-netns"

# Listens on its host's address, answers one connection with its host name.
ECHO_SERVER = """
import socket, sys
with socket.create_server((sys.argv[1], 0)) as server:
    print(server.getsockname()[1], flush=True)
    conn, peer = server.accept()
    with conn:
        conn.sendall(sys.argv[2].encode())
"""


@pytest.fixture(scope="module")
def two_hosts(database: str) -> Iterator[NetnsHosts]:
    require_netns()
    with NetnsHosts(2) as hosts:
        yield hosts


def test_each_host_has_its_own_address_as_primary_and_reaches_the_others(
    two_hosts: NetnsHosts,
) -> None:
    a, b = two_hosts.hosts
    probe = "from app.settings import primary_address; print(primary_address())"
    assert python_in(a, probe) == a.address and python_in(b, probe) == b.address
    server = subprocess.Popen(
        b.argv([sys.executable, "-c", ECHO_SERVER, b.address, b.name]),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        got = python_in(
            a,
            "import socket; s = socket.create_connection"
            f"(({b.address!r}, {port}), timeout=10); print(s.recv(100).decode())",
        )
        assert got == b.name
    finally:
        server.kill()
        server.communicate()


def test_two_workers_in_two_namespaces_register_as_two_hosts(two_hosts: NetnsHosts) -> None:
    purge_broker(NETNS_BROKER_URL)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    for host in two_hosts.hosts:
        env = two_hosts.worker_env(
            host, BASE_DIR / f"netns-{host.name}", gpus="0,1", broker_url=NETNS_BROKER_URL
        )
        two_hosts.start(host, worker_argv(2), env, LOG_DIR / f"worker-{host.name}.log")
    names = tuple(h.name for h in two_hosts.hosts)
    try:
        wait_for_hosts(names, t0, timeout=180)
    except Exception:
        for name in names:
            print((LOG_DIR / f"worker-{name}.log").read_text()[-3000:])
        raise
    with session_scope() as session:
        rows = session.scalars(select(WorkerHost).where(WorkerHost.host.in_(names))).all()
        registered = {r.host: (list(r.gpus), r.address) for r in rows}
    # each under its own name, with its fake GPUs and the address the others reach it at
    assert registered == {h.name: ([0, 1], h.address) for h in two_hosts.hosts}


# A DDP step's worth of gloo: each rank says who it is and the sum of all ranks.
ALL_REDUCE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
print("RANK", dist.get_rank(), dist.get_world_size(), os.environ["GROUP_RANK"], total.item())
dist.destroy_process_group()
"""


@pytest.mark.local_only  # the launcher's argv across namespaces: no database or broker in it
def test_the_launchers_two_node_torchrun_runs_one_gloo_job_across_two_hosts(
    two_hosts: NetnsHosts, tmp_path: Path
) -> None:
    """Each host runs the argv build_launch gives its node (the entry point swapped for a
    plain all-reduce script), Gloo on each host's interface: one world of 4, node 1's ranks
    are 2 and 3."""
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    config = run_config({"recipe": "tiny_mlp", "seed": 5, "resources": {"nodes": 2, "nproc": 2}})
    master = two_hosts.hosts[0].address
    nodes = []
    for rank, host in enumerate(two_hosts.hosts):
        node = NodeSpec(rank, master, 29611, interface=host.interface)
        launch = build_launch(
            LaunchSpec(7, tmp_path / host.name, config, sys.executable, "tok", 0, node=node)
        )
        assert launch.argv[-2:] == ["--module", "torchyard.job"]
        assert launch.env["GLOO_SOCKET_IFNAME"] == "eth0"
        argv = [*launch.argv[:-2], str(script)]
        env = {**launch.env, "PATH": os.environ["PATH"]}
        log = tmp_path / f"{host.name}.log"
        nodes.append((two_hosts.start(host, argv, env, log), log))
    ranks = {}
    for proc, log in nodes:
        assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]
        for line in log.read_text().splitlines():
            if "RANK " in line:
                fields = line.split("RANK ", 1)[1].split()
                ranks[int(fields[0])] = (int(fields[1]), int(fields[2]), float(fields[3]))
    assert ranks == {0: (4, 0, 6.0), 1: (4, 0, 6.0), 2: (4, 1, 6.0), 3: (4, 1, 6.0)}


def test_everything_made_is_gone_after_a_failing_body() -> None:
    require_netns()
    with pytest.raises(RuntimeError, match="the body failed"), NetnsHosts(2) as hosts:
        made = [h.netns for h in hosts.hosts]
        bridge = hosts.bridge
        sleeper = hosts.start(hosts.hosts[1], ["sleep", "300"], dict(os.environ), Path(os.devnull))
        raise RuntimeError("the body failed")
    listed = ip("netns", "list").stdout
    assert not [name for name in made if name in listed]
    assert ip("link", "show", bridge, check=False).returncode != 0
    assert sleeper.poll() is not None


def test_what_a_killed_test_process_left_is_swept_at_the_next_start() -> None:
    require_netns()
    # a pid no process can have: past the kernel's largest
    gone = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    left = NetnsHosts(1, pid=gone)
    ip("netns", "add", f"tyns{gone}-{left.number}-0")
    ip("link", "add", left.bridge, "type", "bridge")
    sweep_stale()
    assert f"tyns{gone}-" not in ip("netns", "list").stdout
    assert ip("link", "show", left.bridge, check=False).returncode != 0


def test_ci_fails_rather_than_skips_without_namespaces(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `ip` on it
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the multi-node tests"):
        require_netns()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no network namespaces here"):
        require_netns()
