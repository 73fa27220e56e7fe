"""The rules that fence a multi-node job's uid (worker/job_firewall.py): what the builder writes
for which uid, peers and services; the refusals; and the rules for real, applied by nft in a
network namespace of their own, with connections made as the run's uid and as another."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker import job_firewall
from worker.job_firewall import Fence

UID = 1_234_567


def fence(**changes: object) -> Fence:
    base: dict[str, object] = dict(
        uid=UID,
        peers=("10.0.0.11", "10.0.0.10"),
        port=41000,
        ephemeral=(32768, 60999),
        services=(("10.0.0.1", 5432), ("10.0.0.1", 6379)),
        blocked=("10.0.0.10/32", "172.17.0.0/16"),
    )
    return Fence(**{**base, **changes})  # type: ignore[arg-type]


def test_the_rules_of_one_uid_in_their_order() -> None:
    lines = job_firewall.rules(fence()).splitlines()
    chain = [line.removeprefix(f"add rule inet torchyard run_{UID} ") for line in lines]
    body = chain[chain.index("ct state established,related accept") :]
    assert body == [
        "ct state established,related accept",
        "meta nfproto ipv6 reject",
        "ip daddr 127.0.0.0/8 reject",
        "ip daddr 10.0.0.1 th dport 5432 reject",
        "ip daddr 10.0.0.1 th dport 6379 reject",
        "ip daddr { 10.0.0.10, 10.0.0.11 } meta l4proto { tcp, udp } "
        "th dport { 32768-60999 } accept",
        "ip daddr { 10.0.0.10, 10.0.0.11 } reject",
        "ip daddr { 10.0.0.10/32, 172.17.0.0/16 } reject",
        f"add element inet torchyard runs {{ {UID} : jump run_{UID} }}",
    ]
    # the run's chain is replaced, never appended to; nothing else's is touched
    assert f"flush chain inet torchyard run_{UID}" in lines
    assert not [line for line in lines if "run_" in line and f"run_{UID}" not in line]


def test_a_rendezvous_port_outside_the_ephemeral_range_is_added() -> None:
    assert "th dport { 32768-60999, 29400 } accept" in job_firewall.rules(fence(port=29400))


def test_isolated_refuses_the_world_and_no_peers_means_no_peer_rule() -> None:
    lines = job_firewall.rules(fence(world=False, peers=())).splitlines()
    assert lines[-2] == f"add rule inet torchyard run_{UID} reject"
    assert not [line for line in lines if "th dport {" in line]


def test_removal_only_of_the_chains_that_are_there() -> None:
    assert job_firewall.removal([5, 6], {6, 7}) == (
        "delete element inet torchyard runs { 6 }\ndelete chain inet torchyard run_6\n"
    )
    assert job_firewall.removal([5], {6}) == ""


def test_refusals_name_the_cause() -> None:
    no_uid = job_firewall.refusal(nft="/usr/sbin/nft", run_uid=False, why_no_uid="not root")
    assert no_uid is not None and "not root" in no_uid and "TORCHYARD_JOB_NETWORK=host" in no_uid
    no_nft = job_firewall.refusal(nft=None, run_uid=True, why_no_uid="")
    assert no_nft is not None and "nft is not installed" in no_nft
    assert job_firewall.refusal(nft="/usr/sbin/nft", run_uid=True, why_no_uid="") is None


def test_service_endpoints_and_peers() -> None:
    urls = ("postgresql+psycopg://u:p@127.0.0.1:5433/db", "redis://localhost/0", "sqlite:///x.db")
    assert job_firewall.service_endpoints(urls) == (("127.0.0.1", 5433), ("127.0.0.1", 6379))
    assert job_firewall.peer_addresses(["10.0.0.2", "10.0.0.3", "10.0.0.2"]) == (
        "10.0.0.2",
        "10.0.0.3",
    )
    with pytest.raises(job_firewall.FirewallError, match="loopback"):  # refused by its rules
        job_firewall.peer_addresses(["10.0.0.2", "localhost"])
    with pytest.raises(job_firewall.FirewallError, match="does not resolve"):
        job_firewall.peer_addresses(["no-such-host.invalid"])


def test_ephemeral_ports_read_from_the_kernel_file(tmp_path: Path) -> None:
    (tmp_path / "range").write_text("32768\t60999\n")
    assert job_firewall.ephemeral_ports(tmp_path / "range") == (32768, 60999)


# -- the rules for real: nft in a namespace of the test's own ---------------------------------

NETNS = f"tyfw{os.getpid()}"
ADDRESS = "10.251.0.2"  # the namespace's own address (on its loopback: no dummy module here)
PEER = "10.251.0.3"  # a "peer" address, also its own, so that something answers there

CONNECT = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, int(port)))
        print(target, "open")
    except OSError as exc:
        print(target, "refused" if exc.errno == 111 else f"error {exc}")
    finally:
        s.close()
"""


def _netns(
    *argv: str, input: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", NETNS, *argv],
        input=input,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def namespace() -> Iterator[str]:
    nft, setpriv = shutil.which("nft"), shutil.which("setpriv")
    if os.geteuid() != 0 or nft is None or setpriv is None or shutil.which("ip") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must test the firewall rules: needs root, nft, setpriv and ip")
        pytest.skip("needs root, nft (nftables), setpriv and ip")
    subprocess.run(["ip", "netns", "add", NETNS], check=True, timeout=30)
    try:
        for step in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{ADDRESS}/32", "dev", "lo"],
            ["ip", "addr", "add", f"{PEER}/32", "dev", "lo"],
        ):
            assert _netns(*step).returncode == 0, step
        yield nft
    finally:
        subprocess.run(["ip", "netns", "del", NETNS], check=False, timeout=30)


def test_the_rules_let_the_uid_reach_its_peers_and_nothing_of_the_host(namespace: str) -> None:
    """Listeners as root in the namespace: on loopback, on a 'service' port of the host's
    address, on the rendezvous port and an ephemeral one of a peer, on another peer port. The
    run's uid reaches only the peer's two; another uid reaches all (the rules are its run's
    only); once removed, the uid reaches all too."""
    listen = f"""
import socket, sys, time
ports = {{}}
servers = []
for name, host, port in [("lo", "127.0.0.1", 0), ("service", "{ADDRESS}", 5999),
                         ("rdzv", "{PEER}", 0), ("low", "{PEER}", 2999)]:
    s = socket.create_server((host, port), backlog=64)
    servers.append(s)
    ports[name] = f"{{host}}:{{s.getsockname()[1]}}"
print(" ".join(f"{{k}}={{v}}" for k, v in ports.items()), flush=True)
sys.stdin.read()
"""
    server = subprocess.Popen(
        ["ip", "netns", "exec", NETNS, sys.executable, "-c", listen],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        ports = dict(item.split("=") for item in server.stdout.readline().split())
        rdzv_port = int(ports["rdzv"].rsplit(":", 1)[1])
        wanted = Fence(
            uid=UID,
            peers=(PEER,),
            port=rdzv_port,
            ephemeral=job_firewall.ephemeral_ports(),
            services=((ADDRESS, 5999),),
            blocked=(f"{ADDRESS}/32",),
        )

        def reach(uid: int) -> dict[str, str]:
            argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            done = _netns(*argv, sys.executable, "-I", "-c", CONNECT, *ports.values())
            assert done.returncode == 0, done.stderr
            by_target = dict(line.split(" ", 1) for line in done.stdout.splitlines())
            return {name: by_target[target] for name, target in ports.items()}

        everything = {"lo": "open", "service": "open", "rdzv": "open", "low": "open"}
        assert reach(UID) == everything  # before the rules: the host's network as it is
        done = _netns(namespace, "-f", "-", input=job_firewall.rules(wanted))
        assert done.returncode == 0, done.stderr
        assert reach(UID) == {
            "lo": "refused",
            "service": "refused",
            "rdzv": "open",
            "low": "refused",
        }
        assert reach(UID + 1) == everything
        listed = _netns(namespace, "list", "ruleset").stdout
        assert f"run_{UID}" in listed
        done = _netns(namespace, "-f", "-", input=job_firewall.removal([UID], {UID}))
        assert done.returncode == 0, done.stderr
        assert reach(UID) == everything
    finally:
        server.kill()
        server.communicate()  # its pipes closed


def test_a_starting_worker_sweeps_the_chains_no_process_uses(namespace: str) -> None:
    """A worker killed while its multi-node job ran left its rules: the next start removes
    them, but never those of a uid a process still runs as (a job left to train on)."""
    for uid in (UID, UID + 2, UID + 20):  # UID + 20: outside the swept range
        done = _netns(namespace, "-f", "-", input=job_firewall.rules(fence(uid=uid)))
        assert done.returncode == 0, done.stderr
    argv = ["setpriv", f"--reuid={UID + 2}", f"--regid={UID + 2}", "--clear-groups", "sleep", "60"]
    busy = subprocess.Popen(argv)
    try:
        sweep = (
            f"from worker import job_firewall; print(job_firewall.sweep({namespace!r}, {UID}, 10))"
        )
        done = _netns(sys.executable, "-c", sweep, cwd=Path(__file__).parent.parent)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"[{UID}]"
        listed = _netns(namespace, "list", "ruleset").stdout
        assert f"run_{UID + 2}" in listed and f"run_{UID + 20}" in listed
        assert f"chain run_{UID} " not in listed
    finally:
        busy.kill()
        busy.wait()
