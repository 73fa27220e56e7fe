"""A run's system series, sampled by the worker while the job trains: what the job's whole
process tree costs the host (torchrun, every rank, dataloader workers, whatever they started)
and what its leased GPUs do.

    sys/cpu_percent      CPU time of every process of the job over wall time; 100 = one core
                         (from the job's cgroup where it has one: every process counted)
    sys/rss_mb           resident memory of every process of the job, summed (MiB)
    sys/gpu<i>/util      NVML utilization of leased GPU i (%)
    sys/gpu<i>/mem_mb    memory used on leased GPU i (MiB; every process on it, as NVML says)
    sys/gpu<i>/power_w   power draw of leased GPU i (W)

The worker writes the points straight into the run's metrics (never into the spool, which is
the job's alone; a job's line with a sys/ key is refused: worker.spool_lines). A point's step
is whole seconds since the run's `started_at` (a later attempt's after the earlier attempts'
seconds): a watch loop that starts again for the same attempt continues the same axis, and
the run page charts them in their own group ("System") below the training charts.

CPU and memory come from psutil (one read of /proc/<pid>/stat and statm per process), GPU
stats from the NVML edge (worker.gpus.read_gpu_stats), so settings.nvml_module's stand-in
gives a fake inventory GPU series on CPU. RSS is summed as each process reports it: pages
that forked dataloader workers share with their parent count once per process (PSS would
not, at the price of reading every process's smaps).

On a multi-node run each node's worker samples its own host's job and its own leased GPUs,
stored under ``sys/node<k>/`` (app.metrics.system_series says why); ``node``/``host`` say
which it is.

The pids are the worker's view of the job (worker.process.JobProcess.members: the sandbox's
PID namespace, or the processes carrying the job's token), asked anew every sample.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psutil

from app.db import Session
from app.metrics import gpu_efficiency
from app.metrics.ingest import Point, ingest_points
from app.metrics.system_series import SeriesStart, series_start
from torchyard.contract import SYSTEM_KEY_PREFIX
from worker import cgroups, gpus

log = logging.getLogger(__name__)

PREFIX = SYSTEM_KEY_PREFIX
CPU_PERCENT = f"{PREFIX}cpu_percent"
RSS_MB = f"{PREFIX}rss_mb"
MB = 1024 * 1024


def gpu_key(index: int, what: str) -> str:
    """`sys/gpu<i>/<what>`, `what` one of util, mem_mb, power_w."""
    return f"{PREFIX}gpu{index}/{what}"


@dataclass(frozen=True)
class ProcSample:
    """One process as psutil shows it now."""

    key: tuple[int, float]  # (pid, start time): a reused pid is another process
    cpu_seconds: float  # utime + stime
    started: float  # seconds since boot (CLOCK_BOOTTIME, as /proc counts)
    rss_bytes: int


def read_proc(pid: int, boot_time: float | None = None) -> ProcSample | None:
    """The process's CPU time, start and RSS; None once it is gone (or a zombie).
    ``boot_time``: psutil.boot_time(), read once per sample by the caller. psutil gives the
    start in seconds since the epoch (boot time plus the kernel's ticks since boot); less the
    boot time it is on the boot clock again, as the sampler compares it."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                return None
            times = proc.cpu_times()
            created = proc.create_time()
            rss = proc.memory_info().rss
    except psutil.Error:  # gone, or not ours to read
        return None
    started = created - (psutil.boot_time() if boot_time is None else boot_time)
    return ProcSample(
        key=(pid, created),
        cpu_seconds=times.user + times.system,
        started=started,
        rss_bytes=rss,
    )


def boot_clock() -> float:
    """Seconds since boot on the clock /proc's start times use (suspend included)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class ProcessTreeSampler:
    """CPU percent and RSS of a changing set of processes, from one sample to the next.

    CPU percent is the CPU seconds every process used since the last sample over the wall
    seconds between the two. A process that started since then counts whole (all its CPU time
    is in the window); one seen for the first time that is older (the first sample, or a pid
    the job's listing missed before) counts at its average since it started. A process that
    lived and died between two samples is not seen at all: its share is lost, which at a
    10 s interval is a short-lived helper, not a rank."""

    def __init__(self, clock: Callable[[], float] = boot_clock) -> None:
        self._clock = clock
        self._last: float | None = None
        self._cpu: dict[tuple[int, float], float] = {}

    def sample(self, pids: Iterable[int]) -> dict[str, float]:
        """CPU percent and RSS MiB of these processes now; nothing when none is alive."""
        now = self._clock()
        boot = psutil.boot_time()
        procs = [p for p in (read_proc(pid, boot) for pid in set(pids)) if p is not None]
        rate = 0.0  # CPU seconds per wall second
        for proc in procs:
            previous = self._cpu.get(proc.key)
            if previous is not None and self._last is not None and now > self._last:
                rate += max(0.0, proc.cpu_seconds - previous) / (now - self._last)
            elif self._last is not None and proc.started >= self._last and now > self._last:
                rate += proc.cpu_seconds / (now - self._last)
            elif now > proc.started:
                rate += proc.cpu_seconds / (now - proc.started)
        self._cpu = {p.key: p.cpu_seconds for p in procs}
        self._last = now
        if not procs:  # the job's processes are gone (it is ending): no 0 MiB point
            return {}
        return {
            CPU_PERCENT: round(100.0 * rate, 2),
            RSS_MB: round(sum(p.rss_bytes for p in procs) / MB, 2),
        }


def gpu_values(indices: Iterable[int], nvml: Any = None) -> dict[str, float]:
    """The leased GPUs' utilization, memory and power from NVML (or the stand-in); nothing
    for a GPU NVML does not list or a stat it does not support, nothing without NVML."""
    wanted = set(indices)
    if not wanted:
        return {}
    values: dict[str, float] = {}
    for stat in gpus.read_gpu_stats(nvml) or []:
        index = stat.get("index")
        if index not in wanted:
            continue
        if "utilization" in stat:
            values[gpu_key(index, "util")] = float(stat["utilization"])
        if "memory_used" in stat:
            values[gpu_key(index, "mem_mb")] = round(stat["memory_used"] / MB, 2)
        if "power_w" in stat:
            values[gpu_key(index, "power_w")] = round(float(stat["power_w"]), 2)
    return values


class CgroupCpu:
    """CPU percent of a cgroup between two samples, from its CPU time (worker.cgroups
    .cpu_seconds): the share the kernel's scheduler gave the job (the run page says when it
    was starved: app.metrics.cpu_share). None on the first sample, or where nothing accounts."""

    def __init__(self, folders: tuple[str, ...], clock: Callable[[], float] = time.monotonic):
        self.folders, self._clock = folders, clock
        self._last: tuple[float, float] | None = None

    def percent(self) -> float | None:
        used, now = cgroups.cpu_seconds(self.folders), self._clock()
        if used is None:
            return None
        last, self._last = self._last, (now, used)
        if last is None or now <= last[0]:
            return None
        return round(100.0 * max(0.0, used - last[1]) / (now - last[0]), 2)


class SystemSeries:
    """One run attempt's system series for the watch loop: `due()` says when the interval has
    passed (the first time at once), `record(session, pids)` samples the job and the run's
    leased GPUs and stores the points at whole seconds since the run started."""

    def __init__(
        self,
        run_id: int,
        *,
        interval: float,
        summary_interval: float = 60.0,
        nvml: Any = None,
        node: int = 0,
        host: str | None = None,
        cgroup: tuple[str, ...] = (),
    ) -> None:
        self.run_id = run_id
        # The job's cgroup folders (worker.limits): its CPU percent from the cgroup's own CPU
        # time, which counts every process of it, short-lived ones too (`CgroupCpu`).
        self.cgroup_cpu = CgroupCpu(cgroup) if cgroup else None
        self.node = node  # this host's node of a multi-node run (0: node 0 or a single host)
        self.host = host  # this host's name: where node k's leased GPUs are
        self.interval = interval
        self.nvml = nvml  # None: worker.gpus's NVML (pynvml or settings.nvml_module)
        self.tree = ProcessTreeSampler()
        self._next = 0.0
        self._run: SeriesStart | None = None
        # The run's GPU efficiency figures (app.metrics.gpu_efficiency), refreshed this often.
        self.summary_interval = summary_interval
        self._next_summary = time.monotonic() + summary_interval

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        return True

    def run_facts(self, session: Session) -> SeriesStart | None:
        """The Unix time of step 0, this host's leased GPU indices and the keys' prefix, read
        once (app.metrics.system_series.series_start); None when the run has no start."""
        if self._run is None:
            self._run = series_start(
                session,
                run_id=self.run_id,
                keys=(CPU_PERCENT, RSS_MB),
                node=self.node,
                host=self.host,
            )
        return self._run

    def sample(self, pids: Iterable[int], gpu_indices: Iterable[int] = ()) -> dict[str, float]:
        values = self.tree.sample(pids)
        rate = self.cgroup_cpu.percent() if self.cgroup_cpu is not None else None
        if rate is not None and CPU_PERCENT in values:
            values[CPU_PERCENT] = rate
        try:
            values.update(gpu_values(gpu_indices, self.nvml))
        except Exception as exc:  # a GPU series is never worth the watch loop
            log.warning("run %s: reading GPU stats failed (%s)", self.run_id, exc)
        return values

    def record(self, session: Session, pids: Iterable[int]) -> int:
        """Sample now and store the points; how many were new (a second already stored, as
        after a watch loop restarted within it, keeps its first point)."""
        facts = self.run_facts(session)
        if facts is None:
            return 0
        values = self.sample(pids, facts.gpu_indices)
        now = time.time()
        step = max(0, int(now - facts.at))
        points: list[Point] = [
            (facts.key(key), step, value, now) for key, value in sorted(values.items())
        ]
        stored = ingest_points(session, run_id=self.run_id, points=points)
        if facts.gpu_indices and time.monotonic() >= self._next_summary:
            self._next_summary = time.monotonic() + self.summary_interval
            gpu_efficiency.refresh(session, run_id=self.run_id)
        return stored
