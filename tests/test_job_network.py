"""What a member's job reaches over the network (worker/job_network.py), on the real stack in
its default mode (egress): nothing of the host's services, nor another run's listener; its
own loopback and its user-mode stack's default route; a 2-process DDP (gloo) run trains."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import BROKER_URL, DATABASE_URL, wait_for_status
from tests.test_e2e_isolation import copy_script, launch, member  # noqa: F401 (a fixture)
from tests.test_e2e_runs import series

pytestmark = pytest.mark.slow

FINISHED = {"succeeded", "failed", "cancelled"}


def host_address() -> str:
    """One of this machine's own addresses (where a service on 0.0.0.0 answers too)."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout
    found = re.search(r"\binet ([0-9.]+)/", out)
    assert found, f"this machine has no global IPv4 address: {out!r}"
    return found.group(1)


@pytest.fixture
def host_service() -> Iterator[int]:
    """A listener on every host interface, standing in for a service that trusts local
    connections; the test's own connection to it shows it answers from the host."""
    with socket.create_server(("0.0.0.0", 0)) as server:
        port = server.getsockname()[1]
        socket.create_connection((host_address(), port), timeout=3).close()
        yield port


def log_of(api: httpx.Client, run_id: int) -> str:
    return api.get(f"/api/runs/{run_id}/logs").text


def wait_for_line(api: httpx.Client, run_id: int, pattern: str, timeout: float = 60) -> str:
    """The first match of `pattern` in the run's log, once it is there."""
    wait_for_status(api, run_id, {"running", *FINISHED}, timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log_of(api, run_id), re.MULTILINE)
        if found:
            return found.group(1)
        run = api.get(f"/api/runs/{run_id}").json()
        assert run["status"] not in FINISHED, (run, log_of(api, run_id)[-2000:])
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} in run {run_id}'s log: {log_of(api, run_id)[-2000:]}")


def service_ports() -> set[int]:
    """The real database's and broker's ports where they are network services (the
    PostgreSQL + Redis pass), else the usual ones (a service of the machine all the same)."""
    ports = {5432, 6379}
    for url in (DATABASE_URL, BROKER_URL):
        parts = urlsplit(url)
        if parts.hostname:
            ports.add(parts.port or 0)
    return ports - {0}


def test_a_members_job_reaches_no_host_service_nor_another_run(
    live_stack,  # type: ignore[no-untyped-def]
    member,  # noqa: F811
    host_service: int,
) -> None:
    api_port = urlsplit(live_stack.base_url).port
    with live_stack.admin_client() as admin:
        listener = launch(admin, {"script": copy_script("net_listen.py")}, "listener")
        other_port = int(wait_for_line(admin, listener["id"], r"^LISTENING (\d+)$"))
        host = host_address()
        targets = [f"127.0.0.1:{p}" for p in (*service_ports(), api_port, host_service)]
        targets += [f"10.0.2.2:{p}" for p in (api_port, host_service)]  # slirp's gateway
        targets += [f"{host}:{p}" for p in (api_port, host_service, other_port)]
        targets += [f"127.0.0.1:{other_port}"]
        probe = launch(member, {"script": copy_script("net_probe.py"), "args": targets}, "probe")
        done = wait_for_status(member, probe["id"], FINISHED)
        log = log_of(member, probe["id"])
        admin.post(f"/api/runs/{listener['id']}/cancel")
        assert done["status"] == "succeeded", (done["error"], log[-3000:])
        for target in targets:
            assert f"FAILED {target} " in log, (target, log)
        assert "REACHED" not in log, log
        assert "OWN LOOPBACK OK" in log
        # Its own network: loopback and the user-mode stack's tap, the default route through it.
        assert "INTERFACES lo,tap0" in log, log
        assert "DEFAULT ROUTE tap0" in log, log
        wait_for_status(admin, listener["id"], FINISHED)
        assert "ACCEPTED" not in log_of(admin, listener["id"])


def test_a_two_process_ddp_run_trains_in_its_own_network(live_stack, member) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 2, "steps_per_epoch": 3},
        "resources": {"nproc": 2, "gpus": 0},
        "seed": 3,
    }
    run = launch(member, config, "ddp in egress")
    done = wait_for_status(member, run["id"], FINISHED, timeout=180)
    log = log_of(member, run["id"])
    assert done["status"] == "succeeded", (done["error"], log[-3000:])
    assert "[rank0]: " in log and "[rank1]: " in log
    assert len(series(member, run["id"], "train/loss")["step"]) == 6
