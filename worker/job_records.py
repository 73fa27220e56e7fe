"""What a worker remembers about each job it launched, so the next worker on the host can
take the job over (worker.adoption) or know that it is gone.

One JSON file per run in ``<data_dir>/jobs/`` (the worker's, never inside a run folder and out
of every sandbox's sight, so a job cannot forge it), written once the keeper is spawned
(worker.keeper), and the keeper's exit file beside it. A record names the job exactly: the
host, the kernel's boot id, the keeper's pid and its start time in clock ticks since boot. A
pid alone is not enough: after a reboot or a container restart the number may belong to
anyone, and signalling that process would be a bug with a victim.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.settings import get_settings
from worker.keeper import read_exit_file
from worker.process import keeper_start_ticks

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    try:
        return BOOT_ID_FILE.read_text().strip()
    except OSError:
        return ""


def jobs_dir() -> Path:
    return get_settings().data_dir.expanduser().resolve() / "jobs"


@dataclass(frozen=True)
class JobRecord:
    run_id: int
    attempt: int
    host: str
    boot_id: str
    keeper_pid: int
    keeper_start: int
    token: str
    sandboxed: bool
    # The attempt's limits and cgroup (worker.limits.RunLimits as a dict): the next worker
    # keeps watching them and removes the cgroup when the job ends.
    limits: dict[str, Any] | None = None
    # A multi-node run's node on this host (worker.node_run) and how many nodes the run has:
    # node k > 0's job is re-adopted as that node's (app.runs.nodes.readopt_node), never as
    # the run's own. 0 and 1: a single-host run's job, or node 0's (older records too).
    node: int = 0
    nodes: int = 1
    # The GPUs its job runs on: a run requeued while no worker watched is taken back on them
    # (app.runs.state.recovery.readopt).
    gpus: tuple[int, ...] = ()

    @property
    def path(self) -> Path:
        return record_path(self.run_id)

    @property
    def exit_path(self) -> Path:
        return exit_path(self.run_id)

    def alive(self) -> bool:
        """The keeper this record names is still running on this boot of this machine."""
        same_boot = self.boot_id == boot_id()
        return same_boot and keeper_start_ticks(self.keeper_pid) == self.keeper_start

    def exit_code(self) -> int | None:
        """The job's exit status as its keeper wrote it; None if it never did (still
        running, or the keeper died with the machine)."""
        return read_exit_file(self.exit_path)

    def save(self) -> None:
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, self.path)

    def remove(self) -> None:
        for path in (self.path, self.exit_path):
            path.unlink(missing_ok=True)


def record_path(run_id: int) -> Path:
    return jobs_dir() / f"{run_id}.json"


def exit_path(run_id: int) -> Path:
    """Where the keeper writes the job's exit status; cleared before a new attempt starts."""
    return jobs_dir() / f"{run_id}.exit"


def prepare_exit_path(run_id: int) -> Path:
    path = exit_path(run_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    return path


def load(path: Path) -> JobRecord | None:
    try:
        data = json.loads(path.read_text())
        return JobRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def records(host: str) -> Iterator[JobRecord]:
    """This host's records (a data dir shared between hosts holds the others' too)."""
    folder = jobs_dir()
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        found = load(path)
        if found is None:
            path.unlink(missing_ok=True)  # half a record from a crash: names no job
        elif found.host == host:
            yield found


def find(run_id: int, host: str) -> JobRecord | None:
    """The run's own job on `host` (a single-host run's, or node 0's): what the reaper asks
    about the run (worker.liveness). Node k > 0's job speaks for its node only: a run whose
    node 0 is lost is not kept alive, nor ended, by node k's job."""
    found = load(record_path(run_id))
    return found if found is not None and found.host == host and not found.node else None


def forget(run_id: int) -> None:
    record_path(run_id).unlink(missing_ok=True)
    exit_path(run_id).unlink(missing_ok=True)


def forget_attempt(run_id: int, attempt: int) -> None:
    """The job's record goes only while it is still this attempt's: the next attempt may run
    on this host already, after a hand-over."""
    record = load(record_path(run_id))
    if record is None or record.attempt == attempt:
        forget(run_id)
