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
    lines = job_firewall.rules(fence(source=(1152, 1279))).splitlines()
    chain = [line.removeprefix(f"add rule inet torchyard run_{UID} ") for line in lines]
    mark = f"{0x80000000 | UID:#x}"
    # a reply of a socket of no run to a connection a job opened here is dropped
    assert (
        "add rule inet torchyard output ct direction reply ct mark and 0x80000000 != 0 "
        "meta skuid >= 0 drop"
    ) in lines
    # the uid's listeners answer only its own connections: here by their mark, from a peer
    # by the run's own source ports
    first = chain.index(f"ct state new ct mark set {mark}")
    assert chain[first : first + 5] == [
        f"ct state new ct mark set {mark}",
        f"ct direction reply fib daddr type local ct mark {mark} accept",
        "ct direction reply fib daddr type local drop",
        "ct direction reply ip daddr { 10.0.0.10, 10.0.0.11 } meta l4proto { tcp, udp } "
        "th dport != 1152-1279 drop",
        "ct state established,related accept",
    ]
    body = chain[chain.index("ct state established,related accept") :]
    body = body[: body.index(f"add element inet torchyard runs {{ {UID} : jump run_{UID} }}") + 1]
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
    # its connections to peers on other hosts leave from its own source ports
    nat = lines[lines.index(f"flush chain ip torchyard_nat run_{UID}") + 1 :]
    assert nat == [
        f"add rule ip torchyard_nat run_{UID} ip daddr {{ 10.0.0.10, 10.0.0.11 }} "
        "fib daddr type != local meta l4proto { tcp, udp } masquerade to :1152-1279",
        f"add element ip torchyard_nat runs {{ {UID} : jump run_{UID} }}",
    ]


def test_each_run_has_its_own_source_ports_outside_the_ephemeral_range() -> None:
    ranges = [job_firewall.source_ports(run_id) for run_id in range(job_firewall.SOURCE_PORT_SLOTS)]
    assert ranges[0] == (1024, 1151) and ranges[1] == (1152, 1279)
    assert all(low >= 1024 and high < 32768 and high - low == 127 for low, high in ranges)
    assert len(set(ranges)) == len(ranges)
    assert job_firewall.source_ports(job_firewall.SOURCE_PORT_SLOTS) == ranges[0]


def test_a_rendezvous_port_outside_the_ephemeral_range_is_added() -> None:
    assert "th dport { 32768-60999, 29400 } accept" in job_firewall.rules(fence(port=29400))


def test_isolated_refuses_the_world_and_no_peers_means_no_peer_rule() -> None:
    lines = job_firewall.rules(fence(world=False, peers=())).splitlines()
    element = lines.index(f"add element inet torchyard runs {{ {UID} : jump run_{UID} }}")
    assert lines[element - 1] == f"add rule inet torchyard run_{UID} reject"
    assert not [line for line in lines if "th dport {" in line]


def test_removal_only_of_the_chains_that_are_there() -> None:
    assert job_firewall.removal([5, 6], {6, 7}) == (
        "delete element inet torchyard runs { 6 }\ndelete chain inet torchyard run_6\n"
        "delete element ip torchyard_nat runs { 6 }\ndelete chain ip torchyard_nat run_6\n"
    )
    # rules of before the NAT table: only the filter's chain is there to remove
    assert job_firewall.removal([6], {6}, set()) == (
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


LISTEN = """
import socket, sys
servers = []
for item in sys.argv[1:]:
    name, host, port = item.split(":")
    servers.append((name, socket.create_server((host, int(port)), backlog=64)))
print(" ".join(f"{n}={s.getsockname()[0]}:{s.getsockname()[1]}" for n, s in servers), flush=True)
sys.stdin.read()
"""
OTHER = UID + 1  # another multi-node run's uid on the same host, with rules of its own


def _listen(uid: int, *items: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Listeners (name:host:port, port 0: an ephemeral one) owned by `uid` in the namespace."""
    as_uid = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid else []
    server = subprocess.Popen(
        ["ip", "netns", "exec", NETNS, *as_uid, sys.executable, "-I", "-c", LISTEN, *items],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    return server, dict(item.split("=") for item in server.stdout.readline().split())


def test_the_rules_let_the_uid_reach_its_peers_and_nothing_of_the_host(namespace: str) -> None:
    """Listeners in the namespace: root's on loopback, on a 'service' port of the host's
    address, on a low and an ephemeral port of a peer (a daemon of the host); the run's own
    store on a peer's ephemeral port; another run's store there too (issue 37: the rules let a
    job reach every peer's ephemeral range, and a 2-node job wrote into another run's store).
    The run's uid reaches its own store only; a uid of no run reaches everything but the two
    stores; once removed, the run's uid reaches everything but the other run's store."""
    servers = []
    try:
        root, ports = _listen(0, "lo:127.0.0.1:0", f"service:{ADDRESS}:5999", f"low:{PEER}:2999")
        servers.append(root)
        daemon, more = _listen(0, f"daemon:{PEER}:0")
        servers.append(daemon)
        own, store = _listen(UID, f"rdzv:{PEER}:0")
        servers.append(own)
        other, other_store = _listen(OTHER, f"other:{PEER}:0")
        servers.append(other)
        ports |= more | store | other_store
        rdzv_port = int(ports["rdzv"].rsplit(":", 1)[1])

        def wanted(uid: int, run_id: int) -> Fence:
            return Fence(
                uid=uid,
                peers=(PEER,),
                port=rdzv_port,
                ephemeral=job_firewall.ephemeral_ports(),
                services=((ADDRESS, 5999),),
                blocked=(f"{ADDRESS}/32",),
                source=job_firewall.source_ports(run_id),
            )

        def reach(uid: int) -> dict[str, str]:
            argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            done = _netns(*argv, sys.executable, "-I", "-c", CONNECT, *ports.values())
            assert done.returncode == 0, done.stderr
            by_target = dict(line.split(" ", 1) for line in done.stdout.splitlines())
            return {name: by_target[target] for name, target in ports.items()}

        everything = {name: "open" for name in ports}
        assert reach(UID) == everything  # before the rules: the host's network as it is
        for uid, run_id in ((UID, 7), (OTHER, 8)):
            done = _netns(namespace, "-f", "-", input=job_firewall.rules(wanted(uid, run_id)))
            assert done.returncode == 0, done.stderr
        silent = "error timed out"  # a store's answer to a connection not of its run is dropped
        assert reach(UID) == {
            "lo": "refused",
            "service": "refused",
            "low": "refused",
            "daemon": silent,
            "rdzv": "open",
            "other": silent,
        }
        assert reach(UID + 2) == {**everything, "rdzv": silent, "other": silent}
        listed = _netns(namespace, "list", "ruleset").stdout
        assert f"run_{UID}" in listed
        done = _netns(namespace, "-f", "-", input=job_firewall.removal([UID], {UID}))
        assert done.returncode == 0, done.stderr
        assert reach(UID) == {**everything, "other": silent}
    finally:
        for server in servers:
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


def test_a_fence_whose_source_ports_another_fence_holds_is_refused(namespace: str) -> None:
    """The CI's run 55 reached another run's store on its peer: that run's id, 99,999, is 55
    modulo the source port slots, so both runs' connections left from one range and the
    store's host let the stranger's through. A fence whose range another fence of the host
    holds is refused, naming that uid; another range goes in beside it."""
    slots = job_firewall.SOURCE_PORT_SLOTS
    held = fence(source=job_firewall.source_ports(55))
    done = _netns(namespace, "-f", "-", input=job_firewall.rules(held))
    assert done.returncode == 0, done.stderr
    attempt = f"""
from worker import job_firewall
from worker.job_firewall import Fence
for uid, run in (({UID + 1}, {55 + slots}), ({UID + 2}, 56)):
    wanted = Fence(uid=uid, peers=("10.0.0.11",), port=41000, ephemeral=(32768, 60999),
        source=job_firewall.source_ports(run))
    try:
        with job_firewall.fence({namespace!r}, wanted):
            print(uid, "fenced", job_firewall.source_ranges({namespace!r})[uid])
    except job_firewall.FirewallError as exc:
        print(uid, "refused:", exc)
"""
    done = _netns(sys.executable, "-c", attempt, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr
    refused, fenced = done.stdout.strip().splitlines()
    assert refused.startswith(f"{UID + 1} refused: this run's source ports"), refused
    assert f"multi-node run of uid {UID}," in refused and f"modulo {slots}" in refused
    assert fenced == f"{UID + 2} fenced {job_firewall.source_ports(56)}", fenced
    listed = _netns(namespace, "list", "ruleset").stdout
    assert f"chain run_{UID + 1} " not in listed  # the refused one left nothing
