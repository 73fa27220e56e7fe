"""Worker "hosts" that are network namespaces of this machine: the test bed of multi-node runs
(issue 30, docs/multi-node.md).

Each host is a namespace (`ip netns`, iproute2) joined to one bridge of the root namespace by a
veth pair: its own address and interface (`eth0`), a route to the others, and its own worker
process (own host name, address, data dir and fake GPU inventory). The disk is shared (a
namespace separates the network only), so a SQLite database or broker works as it is; a
service that listens on loopback (PostgreSQL, Redis) is reached through a TcpProxy on the
bridge's address, the worker's URL rewritten to it.

Cleanup is guaranteed: `NetnsHosts` is a context manager whose exit (also on an exception)
stops the workers, kills whatever still runs in the namespaces and deletes them and the bridge;
namespaces left by a test process that was killed outright are swept at the next start (their
names carry the pid). Without `ip netns` (not root, no iproute2, a sandbox) `require_netns`
skips, except on CI (CI=true), where it fails: the multi-node tests must not silently vanish.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests import nvml_standin
from tests.stack import REPO, start_logged, stop_process
from tests.tcp_proxy import TcpProxy

# The names every object of one test process carries, by its pid and the set's number s (0-3):
# namespaces tyns<pid>-<s>-<k>, bridge tybr<pid>-<s>, veth ends tyv/tyi<pid>-<s>-<k> (an
# interface name has at most 15 characters).
NETNS_PREFIX = "tyns"
_NETNS_NAME = re.compile(rf"^{NETNS_PREFIX}(\d+)-\d-\d+$")
_SETS = itertools.count()
INTERFACE = "eth0"  # each host's one interface, inside its namespace
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def why_no_netns() -> str | None:
    """Why namespaces cannot be made here (None: they can): tried, not guessed."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"{NETNS_PREFIX}{os.getpid()}-probe"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
    ip("netns", "del", probe, check=False)
    return None


def require_netns() -> None:
    """Skip a test that needs namespaces where there are none; on CI fail it instead."""
    reason = why_no_netns()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the multi-node tests, but network namespaces fail: {reason}")
    pytest.skip(f"no network namespaces here: {reason}")


def subnet_of(pid: int, number: int) -> str:
    """A /24 of 10.200.0.0/13 by the pid and set number (its first three octets), so that two
    test processes at once, or two sets of one, get different ones."""
    return f"10.{200 + (pid >> 6) % 50}.{((pid & 63) << 2) | number}"


@dataclass(frozen=True)
class NetnsHost:
    name: str  # its worker's TORCHYARD_WORKER_HOST
    netns: str
    address: str  # its eth0's, on the bridge: TORCHYARD_WORKER_ADDRESS
    interface: str = INTERFACE

    def argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def pids(self) -> list[int]:
        found = ip("netns", "pids", self.netns, check=False).stdout.split()
        return [int(p) for p in found if p.isdigit()]


@dataclass
class NetnsHosts:
    """`count` hosts named host-0.. on one bridge; `with NetnsHosts(2) as hosts:`."""

    count: int
    pid: int = field(default_factory=os.getpid)
    number: int = field(default_factory=lambda: next(_SETS) % 4)
    hosts: list[NetnsHost] = field(default_factory=list)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    proxies: dict[tuple[str, int], TcpProxy] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"tybr{self.pid}-{self.number}"

    @property
    def bridge_address(self) -> str:
        return f"{subnet_of(self.pid, self.number)}.1"

    def __enter__(self) -> NetnsHosts:
        sweep_stale()
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()

    def _make(self) -> None:
        net = subnet_of(self.pid, self.number)
        tag = f"{self.pid}-{self.number}"
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.bridge_address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for k in range(self.count):
            host = NetnsHost(f"host-{k}", f"{NETNS_PREFIX}{tag}-{k}", f"{net}.{10 + k}")
            self.hosts.append(host)  # before it exists: close() deletes what was made
            outer, inner = f"tyv{tag}-{k}", f"tyi{tag}-{k}"
            ip("netns", "add", host.netns)
            _resolver_refusing_at_once(host.netns)
            ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            ip("link", "set", inner, "netns", host.netns)
            ip("link", "set", outer, "master", self.bridge)
            ip("link", "set", outer, "up")
            ip("-n", host.netns, "link", "set", inner, "name", INTERFACE)
            ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", INTERFACE)
            ip("-n", host.netns, "link", "set", INTERFACE, "up")
            ip("-n", host.netns, "link", "set", "lo", "up")
            # The primary address (app.settings.primary_address) is the one of this route.
            ip("-n", host.netns, "route", "add", "default", "via", self.bridge_address)

    def reach(self, url: str) -> str:
        """`url` as the namespaces reach it: a service on loopback through a proxy on the
        bridge's address (one per service); any other URL (a SQLite file) as it is."""
        parts = urlsplit(url)
        if parts.hostname not in _LOOPBACK:
            return url
        target = (str(parts.hostname), int(parts.port or _default_port(parts.scheme)))
        if target not in self.proxies:
            proxy = TcpProxy(target, listen_host=self.bridge_address)
            proxy.start()
            self.proxies[target] = proxy
        netloc = f"{self.bridge_address}:{self.proxies[target].port}"
        if parts.username:
            auth = parts.username + (f":{parts.password}" if parts.password else "")
            netloc = f"{auth}@{netloc}"
        return urlunsplit(parts._replace(netloc=netloc))

    def worker_env(
        self, host: NetnsHost, data_dir: Path, *, gpus: str, broker_url: str, **extra: str
    ) -> dict[str, str]:
        """The environment of `host`'s worker: its own name, address, interface, data dir and
        fake GPU inventory (with NVML's stand-in, so it reports GPU stats), this process's
        database and `broker_url` reached from its namespace."""
        return dict(
            os.environ,
            TORCHYARD_WORKER_HOST=host.name,
            TORCHYARD_WORKER_ADDRESS=host.address,
            TORCHYARD_WORKER_INTERFACE=host.interface,
            TORCHYARD_DATA_DIR=str(data_dir),
            TORCHYARD_FAKE_GPUS=gpus,
            TORCHYARD_NVML_MODULE=str(Path(nvml_standin.__file__)),
            TORCHYARD_DATABASE_URL=self.reach(os.environ["TORCHYARD_DATABASE_URL"]),
            TORCHYARD_BROKER_URL=self.reach(broker_url),
            PYTHONUNBUFFERED="1",
            # This checkout's code: `python -P -m worker` (compose.processes.worker_argv)
            # leaves the working directory off sys.path, so without it a git worktree's worker
            # would run the package the editable install points at (another checkout).
            PYTHONPATH=str(REPO),
            **extra,
        )

    def start(
        self, host: NetnsHost, argv: list[str], env: dict[str, str], log_file: Path
    ) -> subprocess.Popen[bytes]:
        """`argv` in `host`'s namespace, stopped by close() if the test does not stop it; it
        sees this machine's cgroup hierarchies (`WITH_CGROUPS`)."""
        proc = start_logged(host.argv([sys.executable, "-c", WITH_CGROUPS, *argv]), env, log_file)
        self.workers.append(proc)
        return proc

    def close(self) -> None:
        """Everything made, undone, each step whatever the others did."""
        for proc in self.workers:
            with contextlib.suppress(Exception):
                stop_process(proc, timeout=15)
        for host in self.hosts:
            _delete_netns(host.netns)
        ip("link", "del", self.bridge, check=False)
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()


# `ip netns exec` mounts a sysfs of its own over /sys, which hides the cgroup hierarchies
# mounted below /sys/fs/cgroup: a worker there found none and held its jobs to rlimits only (no
# memory limit for a GPU run, no OOM kill to report). Each cgroup mount of the machine (PID 1's)
# is mounted again in the namespace's own mount table, the same hierarchy, before `argv` runs.
WITH_CGROUPS = """
import os, subprocess, sys
for line in open("/proc/1/mounts"):
    source, point, kind, options = line.split()[:4]
    if (kind == "tmpfs" and point == "/sys/fs/cgroup") or kind in ("cgroup", "cgroup2"):
        os.makedirs(point, exist_ok=True)
        subprocess.run(["mount", "-t", kind, "-o", options, source, point], check=True)
os.execvp(sys.argv[1], sys.argv[1:])
"""


def _default_port(scheme: str) -> int:
    return 6379 if scheme.startswith("redis") else 5432


# `ip netns exec NAME` binds each file of /etc/netns/NAME over its namesake in /etc.
NETNS_ETC = Path("/etc/netns")
# The machine's resolver is out of a namespace's reach: its packets leave by the bridge and
# are dropped, and every lookup (torch's c10d looks up each peer socket's name, rank by rank)
# waited 5 s x 2 tries for nothing: two 10 s stalls in each multi-node run's start, measured
# in the worker logs (stop 37). Pointed at the namespace's own loopback, where nothing listens,
# a lookup fails at once, as on a host whose job fence rejects DNS (worker/job_firewall.py).
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"


def _resolver_refusing_at_once(netns: str) -> None:
    folder = NETNS_ETC / netns
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "resolv.conf").write_text(RESOLV_CONF)


def _delete_netns(name: str) -> None:
    """Kill what still runs in it (processes this test started there, by pid), then delete
    it and its /etc/netns folder: its veth goes with it, the root end too."""
    for pid in NetnsHost("", name, "").pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ip("netns", "del", name, check=False)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def sweep_stale() -> None:
    """Namespaces and bridges of test processes that no longer exist (killed outright)."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = _NETNS_NAME.match(name)
        if match and not _alive(int(match[1])):
            _delete_netns(name)
    for line in ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        found = re.match(r"^\d+:\s+(tybr(\d+)-\d)[:@]", line)
        if found and not _alive(int(found[2])):
            ip("link", "del", found[1], check=False)
    for folder in NETNS_ETC.glob(f"{NETNS_PREFIX}*") if NETNS_ETC.is_dir() else ():
        match = _NETNS_NAME.match(folder.name)
        if match and not _alive(int(match[1])):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def python_in(host: NetnsHost, code: str, timeout: float = 60) -> str:
    """Run `code` with this interpreter inside `host`'s namespace; its stdout."""
    done = subprocess.run(
        host.argv([sys.executable, "-c", code]),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()
