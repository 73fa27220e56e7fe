"""What a sandboxed job reaches over the network (``TORCHYARD_JOB_NETWORK``).

Jobs shared the host's network namespace, so a member's code could talk to every service on
the box that trusts local connections: the broker (empty or stop the team's queue), the
database (make itself admin), another run's torchrun store. The modes:

- ``egress`` (default): bwrap's ``--unshare-net`` gives the job a namespace of its own (its
  loopback up, so torchrun's store and its ranks stay inside), and slirp4netns (Debian's,
  user-mode TCP/IP) attached to it carries outbound traffic from the host. slirp4netns'
  ``--disable-host-loopback`` refuses its gateway's mapping to the host's 127.0.0.1; the
  host's own addresses, its other attached networks (a compose bridge) and the database's and
  broker's hosts get ``unreachable`` routes inside the job's namespace before the job starts,
  so a connection there fails at once. The rest of the world is reachable as from the host.
- ``isolated``: the job's own loopback only.
- ``host``: the host's network, as before; the worker says so at start and warns for each
  service URL without credentials (anyone who can run a job can use it).

slirp4netns needs the pid of a process in the job's namespace, which exists only once bwrap
cloned it, and the job must not run before the routes are in place. So the sandbox's argv is
prefixed with this module (``python -I -m worker.job_network ... -- bwrap ...``): it makes
bwrap's ``--info-fd`` (the child's pid) and ``--block-fd`` (the child waits for a byte before
it execs the job) pipes, forks a helper and execs bwrap in its own place, so the keeper's
child is still bwrap (worker.process finds the job's init below it). The helper starts
slirp4netns, adds the routes, unblocks the job and exits; slirp4netns ends when bwrap and the
job have closed its ``--exit-fd``. If anything fails the helper kills bwrap: the run fails
with the reason in its log rather than running with a network other than the one asked for.
Standard library only: it runs before the job, in the keeper's interpreter.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from worker import privileged_env

if TYPE_CHECKING:  # the helper runs before every job: no more imports than it needs
    from worker.launcher import Launch

Mode = Literal["egress", "isolated", "host"]
# slirp4netns' largest MTU: fewer, bigger packets through the user-mode stack.
SLIRP_MTU = 65520
TAP_NAME = "tap0"
TUN_DEVICE = "/dev/net/tun"
READY_TIMEOUT_SECONDS = 20.0
STOP_TIMEOUT_SECONDS = 10.0
# Link-local addresses, where clouds serve an instance's metadata and credentials
# (169.254.169.254 on AWS, GCP, Azure, OpenStack), and Alibaba Cloud's metadata address:
# unreachable from an egress job unless the operator allows them
# (TORCHYARD_JOB_ALLOW_LINK_LOCAL). IPv6 (fd00:ec2::254) needs no route: slirp4netns runs
# without IPv6 here, so the job has no IPv6 route out at all.
METADATA_NETWORKS = ("169.254.0.0/16", "100.100.100.200/32")
# After 127.0.0.1 is on the job's loopback, how long to wait for ``lo`` to show ::1 (it is up)
# before taking it that IPv6 is off in the namespace.
LOOPBACK_UP_SECONDS = 1.0


@dataclass(frozen=True)
class Plan:
    """How this worker's jobs get their network: the mode, and for egress the tools and the
    networks made unreachable inside each job."""

    mode: Mode
    slirp4netns: str | None = None
    nsenter: str | None = None
    ip: str | None = None
    blocked: tuple[str, ...] = ()

    @property
    def egress(self) -> bool:
        return self.mode == "egress" and self.slirp4netns is not None


def _ip_json(ip: str, *args: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [ip, "-j", "-4", *args],
        capture_output=True,
        text=True,
        check=False,
        env=privileged_env.scratch(),
    )
    if done.returncode != 0:
        return []
    parsed = json.loads(done.stdout or "[]")
    return parsed if isinstance(parsed, list) else []


def host_networks(ip: str) -> set[str]:
    """The host's own IPv4 addresses (/32) and the subnets attached to it through any
    interface but the one its default route leaves by (a Docker or compose bridge, where
    the database may listen); loopback left out (inside the job it is the job's own)."""
    found: set[str] = set()
    for link in _ip_json(ip, "addr", "show"):
        for info in link.get("addr_info", []) or []:  # type: ignore[attr-defined]
            local = info.get("local")
            if local and not ipaddress.ip_address(local).is_loopback:
                found.add(f"{local}/32")
    routes = _ip_json(ip, "route", "show")
    default_devs = {r.get("dev") for r in routes if r.get("dst") == "default"}
    for route in routes:
        dst, dev = route.get("dst"), route.get("dev")
        if route.get("scope") == "link" and dst != "default" and dev not in default_devs:
            network = ipaddress.ip_network(str(dst), strict=False)
            if not network.is_loopback:
                found.add(str(network))
    return found


def service_hosts(urls: Iterable[str]) -> set[str]:
    """The IPv4 addresses the service URLs (database, broker) name, as /32: blocked even
    when they are on another machine."""
    found: set[str] = set()
    for url in urls:
        host = urlsplit(url).hostname
        if not host:
            continue
        try:
            infos = socket.getaddrinfo(host, None, socket.AF_INET)
        except OSError:
            continue
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not address.is_loopback:
                found.add(f"{address}/32")
    return found


@lru_cache
def plan(mode: Mode, service_urls: tuple[str, ...], *, link_local: bool = False) -> Plan:
    """What this machine allows for `mode`, asked once per process. Egress without
    slirp4netns (or iproute2, nsenter, the tun device) falls back to the job's own loopback:
    never to the host's network. Link-local and metadata addresses are blocked unless
    `link_local` (METADATA_NETWORKS)."""
    if mode != "egress":
        return Plan(mode)
    slirp, nsenter, ip = shutil.which("slirp4netns"), shutil.which("nsenter"), shutil.which("ip")
    # slirp4netns opens the tun device with this process's uid (0600 root's on some hosts).
    tun = os.access(TUN_DEVICE, os.R_OK | os.W_OK)
    if slirp is None or nsenter is None or ip is None or not tun:
        return Plan("egress")
    blocked = host_networks(ip) | service_hosts(service_urls)
    if not link_local:
        blocked |= set(METADATA_NETWORKS)
    return Plan("egress", slirp, nsenter, ip, tuple(sorted(blocked)))


def attach(launch: Launch, network: Plan) -> Launch:
    """The sandboxed launch (bwrap's argv first) with the job's network: unchanged for
    host; a namespace of its own otherwise, and for egress this module in front of bwrap."""
    if network.mode == "host":
        return launch
    bwrap, *rest = launch.argv
    argv = [bwrap, "--unshare-net", *rest]
    if network.egress:
        argv = [
            sys.executable,
            "-I",
            "-m",
            "worker.job_network",
            f"--slirp4netns={network.slirp4netns}",
            f"--nsenter={network.nsenter}",
            f"--ip={network.ip}",
            f"--block={','.join(network.blocked)}",
            "--",
            *argv,
        ]
    return replace(launch, argv=argv)


def describe(network: Plan, service_urls: Sequence[str], *, sandboxed: bool) -> list[str]:
    """The lines the worker and `torchyard up` print at start: the mode in force, and in host
    mode (or without the sandbox, whose namespaces the others need) a warning for each
    service URL that carries no credentials."""
    if network.mode == "host" or not sandboxed:
        why = "TORCHYARD_JOB_NETWORK=host" if network.mode == "host" else "no sandbox"
        lines = [
            f"job network: host ({why}): jobs share this machine's network "
            "and reach every service on it that listens, the database and the broker included"
        ]
        for url in service_urls:
            parts = urlsplit(url)
            if parts.hostname and not parts.password:  # sqlite:///..., memory://: no host
                lines.append(
                    f"WARNING: {parts.scheme}://{parts.hostname}:{parts.port or ''} has no "
                    "password in its URL: any job can use it in host network mode"
                )
        return lines
    if network.mode == "isolated":
        return ["job network: isolated: each job has its own loopback and nothing else"]
    if network.egress:
        return [
            "job network: egress: each job has its own network namespace (its ranks over its "
            "own loopback) and outbound traffic through slirp4netns; the host's addresses "
            "the service hosts and link-local (cloud metadata) addresses are unreachable "
            f"({len(network.blocked)} networks)"
        ]
    return [
        "job network: egress asked, but slirp4netns, nsenter or ip is missing (apt-get install "
        "slirp4netns iproute2), or this user cannot open /dev/net/tun: each job has its own "
        "loopback only"
    ]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _has_loopback(pid: int) -> bool | None:
    """Whether bwrap's child has set up the namespace's loopback (127.0.0.1, then up): None
    while it has not, or without IPv6 (``lo`` gets ::1 as it comes up) once 127.0.0.1 is there."""
    try:
        with open(f"/proc/{pid}/net/if_inet6") as inet6:
            if any(line.split()[-1:] == ["lo"] for line in inet6):
                return True
        ipv6 = True
    except OSError:
        ipv6 = False
    try:
        with open(f"/proc/{pid}/net/fib_trie") as fib:
            addressed = "127.0.0.1" in fib.read()
    except OSError:
        return None
    return (False if ipv6 else True) if addressed else None


def _wait_for_loopback(pid: int) -> None:
    """bwrap's child sets up its namespace's loopback itself, just after it is cloned: the info
    fd gives its pid before that is done. slirp4netns configuring the namespace at the same
    time made bwrap die now and then ("loopback: Failed RTM_NEWADDR") when several jobs
    started at once, so the helper touches the namespace only once the loopback is up."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    addressed_at: float | None = None
    while time.monotonic() < deadline:
        if _gone(pid):
            raise RuntimeError("the sandbox ended before its loopback was up")
        state = _has_loopback(pid)
        if state:
            return
        if state is False:  # addressed, not up yet: IPv6 may be off in the namespace only
            addressed_at = addressed_at or time.monotonic()
            if time.monotonic() - addressed_at > LOOPBACK_UP_SECONDS:
                return
        time.sleep(0.005)
    raise RuntimeError("the sandbox's loopback did not come up")


def _connect(args: argparse.Namespace, pid: int, block_w: int, exit_r: int) -> None:
    """The helper: slirp4netns on the job's namespace, the routes, then the job goes on."""
    _wait_for_loopback(pid)
    ready_r, ready_w = os.pipe()
    slirp = [args.slirp4netns, "--configure", f"--mtu={SLIRP_MTU}", "--disable-host-loopback"]
    slirp += [f"--exit-fd={exit_r}", f"--ready-fd={ready_w}"]
    enter = [args.nsenter, f"--net=/proc/{pid}/ns/net"]
    if os.geteuid() != 0:  # bwrap's user namespace owns the job's network namespace
        slirp.append(f"--userns-path=/proc/{pid}/ns/user")
        enter += [f"--user=/proc/{pid}/ns/user", "--preserve-credentials"]
    subprocess.Popen(
        [*slirp, str(pid), TAP_NAME],
        pass_fds=(exit_r, ready_w),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(ready_w)
    os.close(exit_r)
    readable, _, _ = select.select([ready_r], [], [], READY_TIMEOUT_SECONDS)
    if not readable or not os.read(ready_r, 1):
        raise RuntimeError("slirp4netns did not bring the job's network up")
    routes = "".join(f"route add unreachable {cidr}\n" for cidr in args.block.split(",") if cidr)
    if routes:
        subprocess.run(
            [*enter, args.ip, "-batch", "-"], input=routes.encode(), check=True, timeout=30
        )
    os.write(block_w, b"1")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _stop(bwrap_pid: int, sandbox_pid: int | None) -> None:
    """Kills bwrap and the sandbox's first process, and returns once that one is gone: the
    job is held on the block pipe, which this process's exit closes, and bwrap's child reads
    that as "go on"."""
    for pid in (sandbox_pid, bwrap_pid):
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if sandbox_pid is None:
        return
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while not _gone(sandbox_pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="worker.job_network")
    for option in ("--slirp4netns", "--nsenter", "--ip", "--block"):
        parser.add_argument(option, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    exit_r, exit_w = os.pipe()
    bwrap_pid = os.getpid()
    first = os.fork()
    if first == 0:
        # Twice forked: the helper is nobody's child once it is done (bwrap reaps its own).
        if os.fork() != 0:
            os._exit(0)
        for fd in (info_w, block_r, exit_w):
            os.close(fd)
        sandbox_pid = None
        try:
            info = _read_all(info_r)
            if not info:  # bwrap ended before it made the sandbox, and says why in the log
                os._exit(0)
            sandbox_pid = int(json.loads(info)["child-pid"])
            _connect(args, sandbox_pid, block_w, exit_r)
        except Exception as exc:  # noqa: BLE001 - any failure stops the job, said in its log
            print(f"torchyard: the job's network could not start: {exc}", file=sys.stderr)
            sys.stderr.flush()
            _stop(bwrap_pid, sandbox_pid)
            os._exit(1)
        os._exit(0)
    os.waitpid(first, 0)
    for fd in (info_r, block_w, exit_r):
        os.close(fd)
    for fd in (info_w, block_r, exit_w):
        os.set_inheritable(fd, True)
    bwrap, *rest = command
    os.execvp(bwrap, [bwrap, "--info-fd", str(info_w), "--block-fd", str(block_r), *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
