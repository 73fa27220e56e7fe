"""A cgroup per run attempt: the job's memory, CPU time and process count held to its limits.

The kernel enforces what a job cannot get around from inside: rlimits are per process (a
job that forks escapes RLIMIT_AS) and per uid, a cgroup holds the whole process tree, every
rank and every fork. Two layouts exist and both are handled:

- cgroup v2 (one unified hierarchy, ``cgroup2`` mounted with ``memory``, ``cpu`` and
  ``pids`` in its ``cgroup.controllers``): one folder ``<root>/<parent>/run-<id>-<attempt>``
  with ``memory.max`` (``memory.swap.max`` 0), ``cpu.max`` and ``pids.max``; the controllers
  are enabled in the parents' ``cgroup.subtree_control`` first;
- cgroup v1 (a hierarchy per controller, as on these machines): the same name under each of
  the ``memory``, ``cpu`` and ``pids`` mounts, with ``memory.limit_in_bytes`` (and
  ``memory.memsw.limit_in_bytes``: no way around it through swap), ``cpu.cfs_quota_us`` and
  ``pids.max``.

The job's keeper (worker.keeper) writes its own pid into each folder's ``cgroup.procs``
before it starts the job, so every process of the job is born inside: no fork escapes. What
the job hit is read back from the kernel's counters: ``oom_kill`` (v1 ``memory.oom_control``,
v2 ``memory.events``) and ``max`` (``pids.events``: forks refused at the limit). A folder is
removed when its job has ended (`remove` kills what is still inside first).

Standard library only.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("memory", "cpu", "pids")
# v1's CPU accounting, where it is a hierarchy apart from ``cpu`` (as on these machines): the
# job's folder there too, for its CPU time (`cpu_seconds`); co-mounted with cpu, cpu's folder.
ACCOUNTING = "cpuacct"
CPU_PERIOD_US = 100_000
# The CPU weight of an installation's parent cgroup (`set_weight`), in v2's cpu.weight units
# (100 is what every other group gets by default); v1's cpu.shares are 1024 for 100.
V1_SHARES_PER_WEIGHT = 1024 / 100
MOUNTS_FILE = Path("/proc/self/mounts")
# A fork bomb's hundreds of processes take a while to die on a loaded box.
REMOVE_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Hierarchy:
    """Where this machine's cgroups are: v2's unified root, or v1's root per controller."""

    version: int
    roots: tuple[tuple[str, Path], ...]  # (controller, mount point); v2: (("unified", root),)

    def folders(self, parent: str, name: str) -> tuple[Path, ...]:
        return tuple(root / parent / name for _, root in self.roots)


@dataclass(frozen=True)
class Limits:
    """What one job may use: bytes of memory, CPUs (a quota), processes and threads."""

    memory_bytes: int
    cpus: float
    max_processes: int


def _mounts(mounts_file: Path) -> list[tuple[str, Path, set[str]]]:
    """(type, mount point, options) of every cgroup mount."""
    found = []
    for line in mounts_file.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            point = Path(fields[1].replace("\\040", " "))
            found.append((fields[2], point, set(fields[3].split(","))))
    return found


def find_hierarchy(mounts_file: Path = MOUNTS_FILE) -> Hierarchy | None:
    """v2 when a unified hierarchy offers every controller, else v1 when each controller has
    a hierarchy of its own, else None (a hybrid layout whose v2 part has no controllers, as
    systemd's ``unified`` mount, counts as v1)."""
    mounts = _mounts(mounts_file)
    for kind, point, _ in mounts:
        if kind != "cgroup2":
            continue
        try:
            offered = set((point / "cgroup.controllers").read_text().split())
        except OSError:
            continue
        if offered.issuperset(CONTROLLERS):
            return Hierarchy(2, (("unified", point),))
    roots = {}
    for kind, point, options in mounts:
        if kind == "cgroup":
            for controller in CONTROLLERS:
                if controller in options and controller not in roots:
                    roots[controller] = point
    if set(roots) == set(CONTROLLERS):
        found = tuple((c, roots[c]) for c in CONTROLLERS)
        for kind, point, options in mounts:
            if kind == "cgroup" and ACCOUNTING in options and point != roots["cpu"]:
                found += ((ACCOUNTING, point),)
                break
        return Hierarchy(1, found)
    return None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _enable_controllers(folder: Path) -> None:
    """v2: the controllers offered to folder's children (already enabled: no change)."""
    offered = set((folder / "cgroup.subtree_control").read_text().split())
    for controller in CONTROLLERS:
        if controller not in offered:
            _write(folder / "cgroup.subtree_control", f"+{controller}")


def _make_parent_v2(root: Path, parent: str) -> None:
    """v2: the parent made level by level (it may be nested: ``slice/torchyard-<digest>``,
    as Docker's --cgroup-parent), each level offering the controllers to the one below."""
    _enable_controllers(root)
    folder = root
    for part in Path(parent).parts:
        folder = folder / part
        folder.mkdir(exist_ok=True)
        _enable_controllers(folder)


def create(hierarchy: Hierarchy, parent: str, name: str, limits: Limits) -> tuple[Path, ...]:
    """The job's folders, made (again: a folder an earlier attempt left is reused) with
    its limits written; raises OSError when this process may not (the caller falls back)."""
    folders = hierarchy.folders(parent, name)
    if hierarchy.version == 2:
        _make_parent_v2(hierarchy.roots[0][1], parent)
        folder = folders[0]
        folder.mkdir(exist_ok=True)
        _write(folder / "memory.max", str(limits.memory_bytes))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
        quota = max(1000, int(limits.cpus * CPU_PERIOD_US))
        _write(folder / "cpu.max", f"{quota} {CPU_PERIOD_US}")
        _write(folder / "pids.max", str(limits.max_processes))
        return folders
    by_controller = dict(zip((c for c, _ in hierarchy.roots), folders, strict=True))
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    memory = by_controller["memory"]
    # memsw is memory + swap, and never below memory's own limit: lowered in the order that
    # keeps it so, raised in the other.
    memsw = memory / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        try:
            _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
            _write(memsw, str(limits.memory_bytes))
        except OSError:
            _write(memsw, str(limits.memory_bytes))
            _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
    else:
        _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
    cpu = by_controller["cpu"]
    _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
    _write(cpu / "cpu.cfs_quota_us", str(max(1000, int(limits.cpus * CPU_PERIOD_US))))
    _write(by_controller["pids"] / "pids.max", str(limits.max_processes))
    return folders


def set_weight(hierarchy: Hierarchy, parent: str, weight: int) -> None:
    """The parent's CPU weight against the other groups at the hierarchy's root (the host's
    other work): v2 cpu.weight, v1 cpu.shares. The parent is made if it is not there yet."""
    if hierarchy.version == 2:
        root = hierarchy.roots[0][1]
        _make_parent_v2(root, parent)
        _write(root / parent / "cpu.weight", str(max(1, min(10_000, weight))))
        return
    cpu = dict(hierarchy.roots)["cpu"] / parent
    cpu.mkdir(parents=True, exist_ok=True)
    shares = max(2, min(262_144, round(weight * V1_SHARES_PER_WEIGHT)))
    _write(cpu / "cpu.shares", str(shares))


def cpu_seconds(folders: Iterable[Path | str]) -> float | None:
    """CPU time the cgroup's processes used so far, exited ones included (v1 cpuacct.usage,
    v2 cpu.stat's usage_usec); None where no folder accounts for it."""
    for folder in map(Path, folders):
        try:
            return int((folder / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            pass
        usage = _counter(folder / "cpu.stat", "usage_usec")
        if usage:
            return usage / 1e6
    return None


def join(folders: Iterable[Path | str], pid: int | None = None) -> None:
    """Moves a process (this one by default) into each folder: its children are born there."""
    for folder in folders:
        _write(Path(folder) / "cgroup.procs", str(pid if pid is not None else os.getpid()))


def _counter(path: Path, key: str) -> int:
    """A ``key value`` line's value in a flat keyed file; 0 when absent or unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


def oom_kills(folders: Iterable[Path | str]) -> int:
    """Processes the kernel killed at the memory limit (v1 memory.oom_control, v2
    memory.events)."""
    total = 0
    for folder in map(Path, folders):
        total += _counter(folder / "memory.oom_control", "oom_kill")
        total += _counter(folder / "memory.events", "oom_kill")
    return total


def forks_refused(folders: Iterable[Path | str]) -> int:
    """Forks (and threads) refused at pids.max."""
    return sum(_counter(Path(folder) / "pids.events", "max") for folder in folders)


def pids(folders: Iterable[Path | str]) -> set[int]:
    found: set[int] = set()
    for folder in map(Path, folders):
        try:
            found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            continue
    return found


def remove(folders: Iterable[Path | str], timeout: float = REMOVE_TIMEOUT_SECONDS) -> bool:
    """Each folder gone, its child cgroups first, after killing what is still inside (a job's
    leftovers): True when none is left. Safe to repeat; a folder already gone counts."""
    left = []
    for folder in map(Path, folders):  # the deepest first: a cgroup with children stays
        nested = [Path(p) for p, _, _ in os.walk(folder)]
        left += sorted(nested, key=lambda p: -len(p.parts)) or [folder]
    deadline = time.monotonic() + timeout
    while left:
        for pid in pids(left):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        still = []
        for folder in left:
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise
                still.append(folder)
        left = still
        if left:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
    return True


# A cgroup younger than this is never a leftover: another worker on the same data dir (a
# second worker of one deployment, the test suite's stacks) may have just made it for a job
# whose keeper has not entered it yet.
LEFTOVER_AGE_SECONDS = 600.0


def remove_empty(hierarchy: Hierarchy, parent: str, prefix: str) -> None:
    """The parent's cgroups named ``prefix...`` that hold no process any more and were made
    over LEFTOVER_AGE_SECONDS ago, removed without killing anything (an earlier worker's
    leftovers; a live job's cgroup is busy and stays)."""
    for _, root in hierarchy.roots:
        try:
            entries = [entry for entry in os.scandir(root / parent) if entry.is_dir()]
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith(prefix):
                continue
            try:
                if time.time() - entry.stat().st_mtime < LEFTOVER_AGE_SECONDS:
                    continue
                (root / parent / entry.name).rmdir()
            except OSError:
                continue


def probe(hierarchy: Hierarchy, parent: str) -> str | None:
    """Makes, joins and removes a cgroup of a child process: None when it all works, else
    why not (said at worker start: the worker then falls back to rlimits)."""
    name = f"probe-{os.getpid()}"
    limits = Limits(memory_bytes=256 * 1024**2, cpus=1.0, max_processes=16)
    try:
        folders = create(hierarchy, parent, name, limits)
    except OSError as exc:
        return f"cannot create a cgroup under {hierarchy.roots[0][1] / parent}: {exc}"
    try:
        child = subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL)
    except OSError as exc:
        remove(folders)
        return f"cannot start a process to probe cgroups: {exc}"
    try:
        join(folders, child.pid)
    except OSError as exc:
        return f"cannot move a process into a cgroup: {exc}"
    finally:
        child.kill()
        child.wait()
        remove(folders)
    return None
