"""A run's limits (``resources.memory_gb``, ``cpus``, ``disk_gb``, ``max_processes``) on its job.

One job must not starve the box: a fork bomb, a leak, a log or a tmp file without end would
take the server, the database and every other run with it. How each limit holds:

- memory, CPUs, processes: a cgroup per run attempt (worker/cgroups.py, v2 or v1) that the
  job's keeper enters before the job's first process exists. Where this worker may create
  none (not root, no writable hierarchy, ``job_cgroups=off``), rlimits instead, said at worker
  start: ``RLIMIT_NPROC`` when the job has a uid of its own (a per-uid count), ``RLIMIT_AS``
  per process for a job without GPUs (CUDA reserves more address space than it uses); the
  CPU is then shared by nice alone.
- disk: the job's ``/tmp`` and ``/dev/shm`` are tmpfs of a size (disk_gb and memory_gb,
  worker/sandbox.py); the watch loop measures the run's folder and ``/tmp`` together every
  ``disk_check_interval_seconds`` and stops the job past disk_gb; ``RLIMIT_FSIZE`` caps any
  one file at disk_gb between two measurements.

A limit hit ends the run failed with an error that names it (`Guard.verdict`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import signal
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker import cgroups

if TYPE_CHECKING:
    from app.experiments.resources import Resources
    from worker.process import JobProcess

log = logging.getLogger(__name__)

GIB = 1024**3
GB = 1000**3


def _number(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class RunLimits:
    """One attempt's limits, and the cgroup folders that hold its job (empty: none)."""

    memory_gb: float
    cpus: float
    disk_gb: float
    max_processes: int
    cgroup: tuple[str, ...] = ()

    @classmethod
    def of(cls, resources: Resources) -> RunLimits:
        return cls(
            memory_gb=resources.memory_gb,
            cpus=resources.cpus,
            disk_gb=resources.disk_gb,
            max_processes=resources.max_processes,
        )

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * GIB)

    @property
    def disk_bytes(self) -> int:
        return int(self.disk_gb * GB)

    def out_of_memory(self) -> str:
        return f"out of memory: the run's limit is {_number(self.memory_gb)} GiB"

    def too_many_processes(self) -> str:
        return f"too many processes: the run's limit is {self.max_processes}"

    def disk_full(self) -> str:
        return f"disk full: the run's limit is {_number(self.disk_gb)} GB"

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, data: dict[str, Any]) -> RunLimits:
        return cls(**{**data, "cgroup": tuple(data.get("cgroup", ()))})


@dataclass(frozen=True)
class Enforcement:
    """How this worker holds jobs to their limits: a cgroup hierarchy, or rlimits (None)."""

    hierarchy: cgroups.Hierarchy | None
    parent: str
    reason: str
    # The installation's CPU weight against the host's other work (settings.job_cpu_weight),
    # and why it could not be set ("" when it was, or without cgroups).
    cpu_weight: int = 0
    weight_failed: str = ""


def data_dir_digest(data_dir: Path) -> str:
    """The installation's mark on what it shares with others on the machine (cgroups)."""
    return hashlib.sha256(str(data_dir.expanduser().resolve()).encode()).hexdigest()[:12]


def installation_parent(base: str, data_dir: Path) -> str:
    """The parent cgroup of this installation's jobs (``torchyard-<digest>``): its own, so its
    CPU weight (`decide`) is this installation's policy, not shared with every other
    installation on the host under one ``torchyard`` (issue 39: jobs starved)."""
    return f"{base}-{data_dir_digest(data_dir)}"


@lru_cache
def decide(mode: str, parent: str, cpu_weight: int = 100) -> Enforcement:
    """Asked once per process: cgroups when one can be made and joined here, else rlimits;
    with cgroups, the parent's CPU weight set (`cgroups.set_weight`)."""
    if mode == "off":
        return Enforcement(None, parent, "cgroups are off (TORCHYARD_JOB_CGROUPS=off)")
    hierarchy = cgroups.find_hierarchy()
    if hierarchy is None:
        return Enforcement(None, parent, "no cgroup hierarchy with memory, cpu and pids")
    failed = cgroups.probe(hierarchy, parent)
    if failed is not None:
        return Enforcement(None, parent, failed)
    try:
        cgroups.set_weight(hierarchy, parent, cpu_weight)
        weight_failed = ""
    except OSError as exc:
        weight_failed = f"could not set the jobs' CPU weight: {exc}"
    where = ", ".join(str(root / parent) for _, root in hierarchy.roots)
    reason = f"cgroup v{hierarchy.version} under {where}"
    return Enforcement(hierarchy, parent, reason, cpu_weight, weight_failed)


def describe(enforcement: Enforcement) -> str:
    """The line the worker prints at start."""
    if enforcement.hierarchy is not None:
        cpu = enforcement.weight_failed or (
            f"the jobs together weigh {enforcement.cpu_weight} against 100 for each other "
            "busy group of the host (TORCHYARD_JOB_CPU_WEIGHT)"
        )
        return (
            f"job limits: a cgroup per run ({enforcement.reason}): memory, CPUs, processes; {cpu}"
        )
    return (
        f"job limits: rlimits only ({enforcement.reason}): a job's memory is limited per "
        "process and not for GPU runs, its processes only under a uid of its own, its CPUs "
        "not at all (nice)"
    )


def cgroup_name(data_dir: Path, run_id: int, attempt: int) -> str:
    """One attempt's cgroup name: with the data dir's digest (older workers put every
    installation's under one parent, where two deployments number their runs alike)."""
    return f"{data_dir_digest(data_dir)}-run-{run_id}-{attempt}"


def sweep(enforcement: Enforcement, data_dir: Path, legacy_parent: str = "") -> None:
    """At worker start, before any run: this deployment's cgroups that hold no process any
    more (a removal that timed out, a worker killed before it removed one) go, under its own
    parent and under the parent all installations shared before (``legacy_parent``). Never
    later: a cgroup just made for a starting job is empty too until its keeper enters it."""
    if enforcement.hierarchy is not None:
        prefix = cgroup_name(data_dir, 0, 0).removesuffix("0-0")
        for parent in (enforcement.parent, legacy_parent):
            if parent:
                cgroups.remove_empty(enforcement.hierarchy, parent, prefix)


def prepare(enforcement: Enforcement, limits: RunLimits, name: str) -> RunLimits:
    """The attempt's cgroup (`cgroup_name`), made with its limits before the job starts (an
    earlier try's leftovers are removed first); without one the limits go as rlimits
    (`keeper_options`)."""
    if enforcement.hierarchy is None:
        return limits
    folders = enforcement.hierarchy.folders(enforcement.parent, name)
    cgroups.remove(folders)
    made = cgroups.create(
        enforcement.hierarchy,
        enforcement.parent,
        name,
        cgroups.Limits(limits.memory_bytes, limits.cpus, limits.max_processes),
    )
    return RunLimits(**{**asdict(limits), "cgroup": tuple(str(f) for f in made)})


def keeper_options(limits: RunLimits, *, own_uid: bool, gpus: bool) -> list[str]:
    """The keeper's options (worker.keeper) that put the job in its cgroup and set its
    rlimits before its first process starts."""
    options = [f"--cgroup={folder}" for folder in limits.cgroup]
    options.append(f"--rlimit={resource.RLIMIT_FSIZE}={limits.disk_bytes}")
    if not limits.cgroup:
        if own_uid:
            options.append(f"--rlimit={resource.RLIMIT_NPROC}={limits.max_processes}")
        if not gpus:
            options.append(f"--rlimit={resource.RLIMIT_AS}={limits.memory_bytes}")
    return options


def release(limits: RunLimits | None) -> None:
    """The job's cgroup removed once it has ended (repeatable)."""
    if limits is not None and limits.cgroup and not cgroups.remove(limits.cgroup):
        log.warning("could not remove the cgroup %s: processes left in it", limits.cgroup[0])


def folder_bytes(folder: Path) -> int:
    """Bytes a folder takes on disk (allocated blocks, links not followed)."""
    total = 0
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                continue
    return total


def tmp_bytes(pid: int) -> int:
    """What the job's own /tmp (a tmpfs in its mount namespace) holds, seen through one of
    its processes; 0 when it is gone, or while that process's root is still the host's.

    bwrap's init exists before it has moved into the sandbox's root: measured then,
    ``/proc/<pid>/root/tmp`` is the host's /tmp, and its file system's use (the host's whole
    disk, 51 GB once) failed a run that wrote nothing "disk full" (issue 37). So /tmp counts
    only once the process's root is not this process's own and its /tmp is a tmpfs mount."""
    try:
        if _same_file(os.stat(f"/proc/{pid}/root"), os.stat("/")):
            return 0
        if not _tmp_is_a_tmpfs(pid):
            return 0
        stat = os.statvfs(f"/proc/{pid}/root/tmp")
    except OSError:
        return 0
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _tmp_is_a_tmpfs(pid: int) -> bool:
    """Whether /tmp, as the process sees its mounts, is a tmpfs of its own (mountinfo: the
    mount point is field 5, the file system type follows the " - " separator)."""
    with open(f"/proc/{pid}/mountinfo") as mounts:
        found = False
        for line in mounts:
            fields, _, after = line.partition(" - ")
            parts = fields.split()
            if len(parts) > 4 and parts[4] == "/tmp":
                found = after.split()[:1] == ["tmpfs"]  # the last mount on /tmp is in force
        return found


class Guard:
    """Watches one job against its limits while it runs and says which one ended it."""

    def __init__(self, limits: RunLimits, run_dir: Path, *, disk_interval: float) -> None:
        self.limits = limits
        self.run_dir = run_dir
        self.disk_interval = disk_interval
        self._next_disk = 0.0
        self.disk_used = 0
        # Wall times the job was last seen within its limits: the disk as last measured, the
        # cgroup's counters (OOM kills, refused forks) as last read.
        self._disk_below_at = self._clear_at = time.time()

    def _hit(self) -> str | None:
        if self.limits.cgroup and cgroups.oom_kills(self.limits.cgroup):
            return self.limits.out_of_memory()
        if self.limits.cgroup and cgroups.forks_refused(self.limits.cgroup):
            return self.limits.too_many_processes()
        if self.disk_used >= self.limits.disk_bytes:
            return self.limits.disk_full()
        return None

    def check(self, job: JobProcess) -> str | None:
        """The limit the job hit so far, None while within them (the disk measured every
        disk_interval seconds, with /tmp seen through one of the job's processes)."""
        now = time.monotonic()
        if now >= self._next_disk:
            self._next_disk = now + self.disk_interval
            members = job.members()
            # A sandboxed job's /tmp is its own tmpfs; an unsandboxed one's is the host's.
            tmp = tmp_bytes(members[0]) if members and job.sandboxed else 0
            used = folder_bytes(self.run_dir) + tmp
            self.disk_used = max(self.disk_used, used)
            if self.disk_used < self.limits.disk_bytes:
                self._disk_below_at = time.time()
        hit = self._hit()
        if hit is None:
            self._clear_at = time.time()
        return hit

    def hit_after(self, hit: str) -> float:
        """When the job was last seen within the limit ``hit`` names (epoch seconds): it was
        passed after that, so whatever it caused (a multi-node run's peers failing on their
        broken process group) came later, and a node's record dated so sorts first."""
        return self._disk_below_at if hit == self.limits.disk_full() else self._clear_at

    def verdict(self, code: int | None) -> str | None:
        """After the job ended: the limit that ended it, if one did (a file cut at
        RLIMIT_FSIZE fails its writer's write with EFBIG, or kills a writer that does not
        ignore SIGXFSZ as Python does; either way the folder is then at the limit)."""
        self.disk_used = max(self.disk_used, folder_bytes(self.run_dir))
        hit = self._hit()
        if hit is None and code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
            return self.limits.disk_full()
        return hit
