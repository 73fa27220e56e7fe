"""What a member's job reaches over the network (worker/job_network.py), on the real stack in
its default mode (egress): nothing of the host's services, nor another run's listener; its
own loopback and its user-mode stack's default route; a 2-process DDP (gloo) run trains."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import BROKER_URL, DATA_DIR, DATABASE_URL, wait_for_status
from tests.stack import LiveStack
from tests.test_e2e_isolation import copy_script, launch, member  # noqa: F401 (a fixture)
from tests.test_e2e_runs import series
from tests.waits import wait_for
from worker import job_etc, job_network, sandbox
from worker.launcher import Launch

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

    def found() -> str | None:
        match = re.search(pattern, log_of(api, run_id), re.MULTILINE)
        if match:
            return match.group(1)
        run = api.get(f"/api/runs/{run_id}").json()
        assert run["status"] not in FINISHED, (run, log_of(api, run_id)[-2000:])
        return None

    return str(
        wait_for(
            found, timeout=timeout, what=lambda: f"{pattern!r} in {log_of(api, run_id)[-2000:]}"
        )
    )


def service_ports() -> set[int]:
    """The real database's and broker's ports where they are network services (the
    PostgreSQL + Redis pass), else the usual ones (a service of the machine all the same)."""
    ports = {5432, 6379}
    for url in (DATABASE_URL, BROKER_URL):
        parts = urlsplit(url)
        if parts.hostname:
            ports.add(parts.port or 0)
    return ports - {0}


@pytest.mark.slow
def test_a_members_job_reaches_no_host_service_nor_another_run(
    live_stack: LiveStack,
    member: httpx.Client,  # noqa: F811
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
        targets += ["169.254.169.254:80"]  # a cloud's metadata service (issue 37)
        probe = launch(member, {"script": copy_script("net_probe.py"), "args": targets}, "probe")
        done = wait_for_status(member, probe["id"], FINISHED)
        log = log_of(member, probe["id"])
        admin.post(f"/api/runs/{listener['id']}/cancel")
        assert done["status"] == "succeeded", (done["error"], log[-3000:])
        for target in targets:
            assert f"FAILED {target} " in log, (target, log)
        assert "REACHED" not in log, log
        # Refused inside the job's namespace, not left to the host's routes (e30f233: slirp
        # carried it out of the host).
        assert "FAILED 169.254.169.254:80 [Errno 113] No route to host" in log, log
        assert "OWN LOOPBACK OK" in log
        # Its own network: loopback and the user-mode stack's tap, the default route through it.
        assert "INTERFACES lo,tap0" in log, log
        assert "DEFAULT ROUTE tap0" in log, log
        wait_for_status(admin, listener["id"], FINISHED)
        assert "ACCEPTED" not in log_of(admin, listener["id"])


@pytest.mark.slow
def test_a_two_process_ddp_run_trains_in_its_own_network(
    live_stack: LiveStack,
    member: httpx.Client,  # noqa: F811
) -> None:
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


@pytest.mark.slow
def test_a_jobs_etc_holds_its_own_account_and_nothing_else_of_the_hosts(
    live_stack: LiveStack,
    member: httpx.Client,  # noqa: F811
) -> None:
    run = launch(member, {"script": copy_script("etc_probe.py")}, "etc")
    done = wait_for_status(member, run["id"], FINISHED)
    log = log_of(member, run["id"])
    assert done["status"] == "succeeded", (done["error"], log[-3000:])
    listed = re.search(r"^.*ETC (\S+)$", log, re.MULTILINE)
    assert listed, log
    names = set(listed.group(1).split(","))
    assert {"passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "ld.so.cache"} <= names
    assert names <= {*job_etc.BOUND, "passwd", "group", "hosts", "nsswitch.conf"}, names
    assert not names & {"shadow", "pip.conf", "postgresql", "ssh", "environment"}
    # getpass with no USER in the environment: the job's own passwd entry, its uid, its home.
    assert "GETUSER torchyard" in log, log
    home = DATA_DIR / "runs" / str(run["id"]) / "home"
    assert re.search(rf"PASSWD torchyard \d+ {re.escape(str(home))}$", log, re.MULTILINE), log
    assert "PASSWD LINES 3" in log


def test_a_job_whose_network_cannot_start_never_runs(tmp_path: Path) -> None:
    """slirp4netns that fails (here: `false`): the helper kills the sandbox before the job is
    let go (bwrap's child reads the block pipe's end as "go on"), and says why."""
    isolation = sandbox.decide("auto", 200_000)
    if not isolation.enabled:
        pytest.skip(isolation.reason)
    spec = sandbox.SandboxSpec(
        run_dir=tmp_path,
        home=tmp_path,
        read_only=sandbox.interpreter_paths(),
        uid=200_000 if isolation.as_root else None,
        bwrap=isolation.bwrap,
        setpriv=isolation.setpriv,
    )
    sandbox.own_run_dir(tmp_path, tmp_path, spec.uid)
    job = Launch(argv=["/bin/sh", "-c", "echo RAN"], env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    failing = job_network.Plan("egress", "/bin/false", "/usr/bin/nsenter", "/usr/sbin/ip")
    launch = job_network.attach(sandbox.wrap(job, spec), failing)
    try:
        done = subprocess.run(
            launch.argv, env=launch.env, capture_output=True, timeout=60, pass_fds=launch.pass_fds
        )
    finally:
        for fd in launch.pass_fds:
            os.close(fd)
    assert b"RAN" not in done.stdout
    assert done.returncode == -9
    assert b"the job's network could not start: slirp4netns did not bring" in done.stderr


def test_many_jobs_starting_at_once_all_get_their_network(tmp_path: Path) -> None:
    """bwrap's child sets up its namespace's loopback after the info fd names it; the helper
    configuring the namespace meanwhile made bwrap die ("loopback: Failed RTM_NEWADDR") for
    about one job in ten when 30 started together (a two-host test's run failed with -9).
    Started at once, every job of 16 gets its network and runs."""
    isolation = sandbox.decide("auto", 200_000)
    plan = job_network.plan("egress", ())
    assert isolation.enabled and plan.egress, (isolation.reason, plan)
    started = []
    for i in range(16):
        run_dir = tmp_path / str(i)
        run_dir.mkdir()
        spec = sandbox.SandboxSpec(
            run_dir=run_dir,
            home=run_dir,
            read_only=sandbox.interpreter_paths(),
            uid=200_000 + i if isolation.as_root else None,
            bwrap=isolation.bwrap,
            setpriv=isolation.setpriv,
        )
        sandbox.own_run_dir(run_dir, run_dir, spec.uid)
        job = Launch(argv=["/bin/sh", "-c", "echo UP"], env={"PATH": "/usr/bin:/bin"}, cwd=run_dir)
        launch = job_network.attach(sandbox.wrap(job, spec), plan)
        proc = subprocess.Popen(
            launch.argv,
            env=launch.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=launch.pass_fds,
        )
        for fd in launch.pass_fds:
            os.close(fd)
        started.append(proc)
    ended = [(proc.wait(timeout=120), *proc.communicate()) for proc in started]
    failed = [(code, err.decode()) for code, out, err in ended if code != 0 or out != b"UP\n"]
    assert not failed, failed


# --- the pure parts: the argv each mode gets, the start lines ------------------------------

SANDBOX = Launch(argv=["bwrap", "--unshare-pid", "--", "python", "-m", "x"], env={}, cwd=Path("/"))
EGRESS = job_network.Plan("egress", "/s/slirp4netns", "/s/nsenter", "/s/ip", ("192.0.2.2/32",))


def test_host_mode_leaves_the_sandbox_on_the_hosts_network() -> None:
    assert job_network.attach(SANDBOX, job_network.Plan("host")) == SANDBOX


def test_isolated_mode_and_egress_without_slirp4netns_unshare_the_network_only() -> None:
    for plan in (job_network.Plan("isolated"), job_network.Plan("egress")):
        argv = job_network.attach(SANDBOX, plan).argv
        assert argv == ["bwrap", "--unshare-net", "--unshare-pid", "--", "python", "-m", "x"]


def test_egress_puts_the_network_helper_in_front_of_bwrap() -> None:
    argv = job_network.attach(SANDBOX, EGRESS).argv
    assert argv == [
        sys.executable,
        "-I",
        "-m",
        "worker.job_network",
        "--slirp4netns=/s/slirp4netns",
        "--nsenter=/s/nsenter",
        "--ip=/s/ip",
        "--block=192.0.2.2/32",
        "--",
        "bwrap",
        "--unshare-net",
        "--unshare-pid",
        "--",
        "python",
        "-m",
        "x",
    ]


def test_host_mode_warns_for_each_service_url_without_a_password() -> None:
    urls = (
        "postgresql+psycopg://postgres@127.0.0.1:5432/ty",
        "redis://:secret@127.0.0.1:6379/0",
        "sqlite:////data/torchyard.db",
        "redis://10.1.2.3:6380/1",
    )
    lines = job_network.describe(job_network.Plan("host"), urls, sandboxed=True)
    assert lines[0].startswith("job network: host (TORCHYARD_JOB_NETWORK=host): ")
    assert lines[1:] == [
        "WARNING: postgresql+psycopg://127.0.0.1:5432 has no password in its URL: any job "
        "can use it in host network mode",
        "WARNING: redis://10.1.2.3:6380 has no password in its URL: any job can use it in "
        "host network mode",
    ]
    unsandboxed = job_network.describe(EGRESS, urls, sandboxed=False)
    assert unsandboxed[0].startswith("job network: host (no sandbox): ") and len(unsandboxed) == 3


def test_the_other_modes_say_what_a_job_reaches() -> None:
    assert job_network.describe(EGRESS, (), sandboxed=True)[0].startswith("job network: egress: ")
    missing = job_network.describe(job_network.Plan("egress"), (), sandboxed=True)
    assert "each job has its own loopback only" in missing[0]
    isolated = job_network.describe(job_network.Plan("isolated"), (), sandboxed=True)
    assert isolated == ["job network: isolated: each job has its own loopback and nothing else"]


def test_service_hosts_are_blocked_by_address_loopback_left_to_the_job() -> None:
    urls = ("redis://127.0.0.1:6379/0", "postgresql://u:p@192.0.2.7/db", "sqlite:///x.db")
    assert job_network.service_hosts(urls) == {"192.0.2.7/32"}


def test_link_local_and_metadata_addresses_are_blocked_unless_the_operator_allows_them() -> None:
    job_network.plan.cache_clear()
    try:
        egress = job_network.plan("egress", ())
        assert egress.egress, egress  # slirp4netns, nsenter, ip: installed by make sandbox
        assert {"169.254.0.0/16", "100.100.100.200/32"} <= set(egress.blocked)
        allowed = job_network.plan("egress", (), link_local=True)
        assert not {"169.254.0.0/16", "100.100.100.200/32"} & set(allowed.blocked)
    finally:
        job_network.plan.cache_clear()
