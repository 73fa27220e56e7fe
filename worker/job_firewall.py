"""The network of a multi-node job: the host's, fenced by firewall rules of its run's uid.

A sandboxed job's own network namespace (worker.job_network: egress, isolated) lets nothing
in, and a node's ranks must accept their peers' connections: torchrun's static rendezvous store
on node 0's address and the run's port, and Gloo's and NCCL's pair connections among all
ranks, on ports each rank binds at run time. So a multi-node job stays in the host's network
namespace, and before it starts the worker adds nftables rules matching its run's own uid
(worker.sandbox.run_uid: a root worker runs each run as a uid of its own) in the host's OUTPUT
hook. For that uid, in order:

0. the job's own listeners answer only the run's own processes (issue 37: the rules let a
   job reach every peer's ephemeral range, where other runs' stores and ranks listen, and a
   2-node job wrote into another run's TCPStore). A connection the uid opens is marked with it
   (``ct mark``); a reply of the uid's sockets to a connection opened on this host passes only
   when the mark is the uid's, and to one opened on a peer only when its source port is in
   the run's own source range (``source_ports``), which every node of the run gives its
   connections to peers (the NAT table's masquerade). A reply of a socket of no run to a
   connection a job opened on this host is dropped (the base chain, by the mark's job bit);
1. replies of connections already made pass (a peer's connection to one of the job's ranks);
2. IPv6 is refused (an egress job has none either), and so is loopback (127.0.0.0/8);
3. the database's and the broker's address:port are refused (the same services the egress
   plan blocks, settings.service_urls);
4. the run's peers (every node's worker address, this host's own included) are reachable on
   the rendezvous port and the ephemeral port range (/proc/sys/net/ipv4/ip_local_port_range,
   where every rank's listening socket lands); any other port of theirs is refused;
5. the host's own addresses, its other attached networks and the service hosts are refused
   (job_network.host_networks and service_hosts, as egress blocks them);
6. the rest of the world is reachable (egress) or refused (isolated).

The rules live in a table of torchyard's own (``inet torchyard``): its output chain jumps, by
a verdict map keyed by the socket's uid, to one chain per run uid (``run_<uid>``), so adding
and removing one run's rules is one atomic nft batch that never touches another run's. The
rules go in before the job's first process and come out once no process of the uid is left;
a worker that starts removes the chains of its uid range that no process uses any more (a
worker killed between the two steps). A leftover chain only ever restricts an idle uid.

No silent fallback: without a run uid (the worker not root, or no sandbox) or without nft, a
multi-node job is refused with the cause (`refusal`), unless TORCHYARD_JOB_NETWORK=host says
jobs share the host's network anyway.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import logging
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from worker import privileged_env

log = logging.getLogger(__name__)

TABLE = "inet torchyard"
NAT_TABLE = "ip torchyard_nat"
MAP = "runs"
# The bit of a connection's mark that says a job opened it (the rest: its run's uid; uids are
# below 2**31: app.settings.job_uid_base).
JOB_MARK = 0x80000000
# Each run's source ports towards its peers: a range of its own, outside the kernel's
# ephemeral range (so no other process's connection has a source port in it by chance), the
# same on every node (from the run id). 128 ports: connections to one peer address and port
# at once (every rank and the agent of a node to node 0's store).
SOURCE_PORT_BASE = 1024
SOURCE_PORTS_EACH = 128
SOURCE_PORT_SLOTS = (32768 - SOURCE_PORT_BASE) // SOURCE_PORTS_EACH
PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# How long the rules wait for the job's last processes to be gone before they come out; a uid
# still in use keeps its rules (safe: they only restrict it) until the next worker start.
GONE_SECONDS = 5.0
NFT_TIMEOUT_SECONDS = 30
# Held while a fence checks the host's source ranges and installs its own (`fence`).
LOCK_FILE = Path("/run/torchyard-firewall.lock")


class FirewallError(RuntimeError):
    """nft refused the rules (said with its own message): the job must not start."""


@dataclass(frozen=True)
class Fence:
    """What one multi-node job's uid may reach (the module's docstring has the order)."""

    uid: int
    peers: tuple[str, ...]  # every node's worker address (IPv4), this host's own included
    port: int  # the run's rendezvous port on node 0
    ephemeral: tuple[int, int]  # where the ranks' own listening sockets land
    services: tuple[tuple[str, int], ...] = ()  # database and broker, (IPv4, port)
    blocked: tuple[str, ...] = ()  # the host's own addresses and networks, the service hosts
    world: bool = True  # egress: the rest of the world; isolated: nothing else
    # the run's own source ports towards its peers (`source_ports`)
    source: tuple[int, int] = (SOURCE_PORT_BASE, SOURCE_PORT_BASE + SOURCE_PORTS_EACH - 1)


def source_ports(run_id: int) -> tuple[int, int]:
    """The run's source port range towards its peers: the same on every node."""
    low = SOURCE_PORT_BASE + (run_id % SOURCE_PORT_SLOTS) * SOURCE_PORTS_EACH
    return low, low + SOURCE_PORTS_EACH - 1


def chain(uid: int) -> str:
    return f"run_{uid}"


def _set(items: Iterable[str]) -> str:
    return "{ " + ", ".join(items) + " }"


def rules(fence: Fence) -> str:
    """The nft batch that installs (or replaces) `fence`'s uid's rules: pure, so the unit
    tests read exactly what goes to nft."""
    name, uid = chain(fence.uid), fence.uid
    rule = f"add rule {TABLE} {name}"
    mark = f"{JOB_MARK | uid:#x}"
    low, high = fence.source
    peers = _set(sorted(set(fence.peers)))
    lines = [
        f"add table {TABLE}",
        f"add map {TABLE} {MAP} {{ typeof meta skuid : verdict; }}",
        f"add chain {TABLE} output {{ type filter hook output priority 0; policy accept; }}",
        f"flush chain {TABLE} output",
        f"add rule {TABLE} output meta skuid vmap @{MAP}",
        # (a socket's reply only: the kernel's own RST or ICMP answer to a refused connection
        # has none, and must reach the job as "refused")
        f"add rule {TABLE} output ct direction reply ct mark and {JOB_MARK:#x} != 0 "
        "meta skuid >= 0 drop",
        f"add chain {TABLE} {name}",
        f"flush chain {TABLE} {name}",
        f"{rule} ct state new ct mark set {mark}",
        f"{rule} ct direction reply fib daddr type local ct mark {mark} accept",
        f"{rule} ct direction reply fib daddr type local drop",
    ]
    if fence.peers:
        lines.append(
            f"{rule} ct direction reply ip daddr {peers} meta l4proto {{ tcp, udp }} "
            f"th dport != {low}-{high} drop"
        )
    lines += [
        f"{rule} ct state established,related accept",
        f"{rule} meta nfproto ipv6 reject",
        f"{rule} ip daddr 127.0.0.0/8 reject",
    ]
    lines += [f"{rule} ip daddr {host} th dport {port} reject" for host, port in fence.services]
    if fence.peers:
        # the rendezvous port is in the range as a rule (pick_port binds port 0); one outside
        # it gets its own element (overlapping intervals are an error in some nft versions)
        low, high = fence.ephemeral
        ports = _set([f"{low}-{high}", *([] if low <= fence.port <= high else [str(fence.port)])])
        lines.append(f"{rule} ip daddr {peers} meta l4proto {{ tcp, udp }} th dport {ports} accept")
        lines.append(f"{rule} ip daddr {peers} reject")
    if fence.blocked:
        lines.append(f"{rule} ip daddr {_set(sorted(set(fence.blocked)))} reject")
    if not fence.world:
        lines.append(f"{rule} reject")
    lines.append(f"add element {TABLE} {MAP} {{ {uid} : jump {name} }}")
    return "\n".join([*lines, *_nat_rules(fence)]) + "\n"


def _nat_rules(fence: Fence) -> list[str]:
    """The run's connections to its peers on other hosts leave from its own source ports."""
    name = chain(fence.uid)
    lines = [
        f"add table {NAT_TABLE}",
        f"add map {NAT_TABLE} {MAP} {{ typeof meta skuid : verdict; }}",
        f"add chain {NAT_TABLE} postrouting "
        "{ type nat hook postrouting priority srcnat; policy accept; }",
        f"flush chain {NAT_TABLE} postrouting",
        f"add rule {NAT_TABLE} postrouting meta skuid vmap @{MAP}",
        f"add chain {NAT_TABLE} {name}",
        f"flush chain {NAT_TABLE} {name}",
    ]
    if fence.peers:
        low, high = fence.source
        lines.append(
            f"add rule {NAT_TABLE} {name} ip daddr {_set(sorted(set(fence.peers)))} "
            f"fib daddr type != local meta l4proto {{ tcp, udp }} masquerade to :{low}-{high}"
        )
    lines.append(f"add element {NAT_TABLE} {MAP} {{ {fence.uid} : jump {name} }}")
    return lines


def removal(uids: Iterable[int], present: set[int], present_nat: set[int] | None = None) -> str:
    """The nft batch removing `uids`' rules, for those whose chain is there (`present`, and
    `present_nat` in the NAT table: None, the same uids)."""
    lines = []
    nat = present if present_nat is None else present_nat
    for table, there in ((TABLE, present), (NAT_TABLE, nat)):
        for uid in sorted(set(uids) & there):
            lines.append(f"delete element {table} {MAP} {{ {uid} }}")
            lines.append(f"delete chain {table} {chain(uid)}")
    return "\n".join(lines) + ("\n" if lines else "")


def ephemeral_ports(path: Path = PORT_RANGE_FILE) -> tuple[int, int]:
    low, high = path.read_text().split()[:2]
    return int(low), int(high)


def service_endpoints(urls: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """The (IPv4, port) of each service URL (database, broker); a URL without a host (a
    SQLite file) has none. Loopback ones are refused by the loopback rule anyway."""
    found: set[tuple[str, int]] = set()
    for url in urls:
        parts = urlsplit(url)
        if not parts.hostname:
            continue
        port = parts.port or (6379 if parts.scheme.startswith("redis") else 5432)
        try:
            infos = socket.getaddrinfo(parts.hostname, port, socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            continue
        found.update((str(info[4][0]), port) for info in infos)
    return tuple(sorted(found))


def peer_addresses(names: Iterable[str]) -> tuple[str, ...]:
    """Every node's worker address as IPv4 (a host name resolved here): an unknown one is an
    error, since a peer the rules would not let through could only hang the rendezvous."""
    found: set[str] = set()
    for name in names:
        try:
            found.add(str(ipaddress.IPv4Address(name)))
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(name, None, socket.AF_INET)
        except OSError as exc:
            raise FirewallError(f"the node address {name!r} does not resolve: {exc}") from exc
        found.update(str(info[4][0]) for info in infos)
    if looped := sorted(a for a in found if ipaddress.IPv4Address(a).is_loopback):
        raise FirewallError(
            f"a node's worker address is loopback ({', '.join(looped)}), which a multi-node "
            "job may not reach: set TORCHYARD_WORKER_ADDRESS to an address the hosts share"
        )
    return tuple(sorted(found))


def refusal(*, nft: str | None, run_uid: bool, why_no_uid: str) -> str | None:
    """Why this worker cannot fence a multi-node job (None: it can)."""
    if not run_uid:
        return (
            "a multi-node job runs in the host's network fenced by firewall rules of its run's "
            f"own uid, and this worker gives runs no uid of their own ({why_no_uid}); "
            "TORCHYARD_JOB_NETWORK=host would run it unfenced (docs/security.md)"
        )
    if nft is None:
        return (
            "a multi-node job runs in the host's network fenced by nftables rules, and nft is "
            "not installed on this host (apt-get install nftables, `make sandbox`)"
        )
    return None


def nft_path() -> str | None:
    return shutil.which("nft")


def _nft(nft: str, *args: str, script: str | None = None) -> str:
    done = subprocess.run(
        [nft, *args],
        input=script,
        env=privileged_env.scratch(),
        capture_output=True,
        text=True,
        check=False,
        timeout=NFT_TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        raise FirewallError(f"nft {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def install(nft: str, fence: Fence) -> None:
    _nft(nft, "-f", "-", script=rules(fence))


def source_ranges(nft: str) -> dict[int, tuple[int, int]]:
    """Each fenced uid's source port range towards its peers, as its NAT chain masquerades
    its connections (none: no table yet)."""
    found: dict[int, tuple[int, int]] = {}
    for item in _listed(nft, NAT_TABLE):
        rule = item.get("rule") or {}
        if (uid := _run_uid(str(rule.get("chain", "")))) is None:
            continue
        for expr in rule.get("expr", []):
            ports = (expr.get("masquerade") or {}).get("port") or {}
            if isinstance(ports.get("range"), list) and len(ports["range"]) == 2:
                found[uid] = (int(ports["range"][0]), int(ports["range"][1]))
    return found


def _listed(nft: str, table: str) -> list[dict[str, Any]]:
    """The table's items as `nft -j` lists them (none: no table yet)."""
    try:
        listed = json.loads(_nft(nft, "-j", "list", "table", *table.split()) or "{}")
    except FirewallError:
        return []
    return list(listed.get("nftables", []))


def _run_uid(chain_name: str) -> int | None:  # a run's chain (`chain`): its uid
    digits = chain_name.removeprefix("run_")
    return int(digits) if chain_name.startswith("run_") and digits.isdigit() else None


def clash(nft: str, wanted: Fence) -> str | None:
    """Why `wanted` may not go in beside the host's other fences (None: it may). Two runs with
    one source range would pass each other's listeners' replies (rule 0): a run's id picks its
    range, so run ids equal modulo SOURCE_PORT_SLOTS share one, and the second is refused."""
    others = sorted(
        uid
        for uid, ports in source_ranges(nft).items()
        if ports == wanted.source and uid != wanted.uid
    )
    if not others:
        return None
    low, high = wanted.source
    return (
        f"this run's source ports towards its peers ({low}-{high}) are those of the "
        f"multi-node run of uid {others[0]}, fenced on this host (run ids equal modulo "
        f"{SOURCE_PORT_SLOTS}): their connections could not be told apart, so this one may "
        "not start beside it; start it again once that run has ended"
    )


@contextmanager
def _host_lock(path: Path = LOCK_FILE) -> Iterator[None]:
    """Two workers' (or one's two slots') check and install must not interleave."""
    with path.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def fenced_uids(nft: str, table: str = TABLE) -> set[int]:
    """The uids that have a chain in torchyard's table (none: no table yet)."""
    uids = (_run_uid(str(item.get("chain", {}).get("name", ""))) for item in _listed(nft, table))
    return {uid for uid in uids if uid is not None}


def remove(nft: str, uids: Iterable[int]) -> None:
    script = removal(uids, fenced_uids(nft), fenced_uids(nft, NAT_TABLE))
    if script:
        _nft(nft, "-f", "-", script=script)


def uids_in_use() -> set[int]:
    """The real uids of this host's live processes (any pid namespace's: /proc shows all)."""
    found = set()
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]  # None when it went away while listed
        if uids is not None:
            found.add(uids.real)
    return found


def sweep(nft: str, base: int, count: int) -> list[int]:
    """At worker start: this worker's uid range's chains that no live process uses."""
    stale = [u for u in fenced_uids(nft) if base <= u < base + count]
    stale = [u for u in stale if u not in uids_in_use()]
    if stale:
        remove(nft, stale)
    return stale


@contextmanager
def fence(nft: str, wanted: Fence) -> Iterator[None]:
    """The uid's rules from here to the block's end (the job's end); they come out once no
    process of the uid is left, else stay (they only restrict it) until the next sweep.
    A run whose source ports another fence of this host holds is refused (`clash`)."""
    with _host_lock():
        if (why := clash(nft, wanted)) is not None:
            raise FirewallError(why)
        install(nft, wanted)
    try:
        yield
    finally:
        deadline = time.monotonic() + GONE_SECONDS
        while wanted.uid in uids_in_use() and time.monotonic() < deadline:
            time.sleep(0.05)
        if wanted.uid not in uids_in_use():
            try:
                remove(nft, [wanted.uid])
            except FirewallError as exc:  # left: it only restricts an idle uid (next sweep)
                log.warning(
                    "could not remove the job firewall rules of uid %s: %s", wanted.uid, exc
                )
        else:
            log.warning("uid %s still has processes: its job firewall rules stay", wanted.uid)
