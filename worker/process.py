"""Starting a job's processes with their output captured, and stopping every one of them.

torchrun puts each worker in a new session, so signalling the launcher's process group is not
enough; every process of a run carries the run's job token in its environment, and `stop`
signals all processes that carry it (the group first, so torchrun can shut down cleanly).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from torchyard.contract import JOB_TOKEN_VAR
from worker.launcher import Launch

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """The prctl call of the pre-exec hook, loaded here in the parent: the child, between fork
    and exec, only calls it. None off Linux or without libc."""
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _pre_exec(nice: int) -> Callable[[], None]:
    """What the job's first process does before exec, inherited by every process it starts:

    - asks Linux to SIGTERM it when the worker dies. A worker killed with SIGKILL cannot stop
      its jobs; without this they would train on, unwatched, holding GPUs nobody has leased
      any more. SIGTERM (not SIGKILL) lets the job drain its metrics to the spool and lets
      torchrun stop its ranks;
    - lowers its CPU priority by `nice` (settings.job_nice)."""

    def pre_exec() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if nice:
            os.nice(nice)

    return pre_exec


def pids_with_token(token: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries this job token. Linux /proc."""
    marker = f"{JOB_TOKEN_VAR}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X"):
            found.append(int(entry.name))
    return found


class JobProcess:
    """The running job: its launcher process, its log file and its token.

    It owns the job's cleanup from the moment it is spawned: used as a context manager
    (`with JobProcess(...) as job:`, nothing in between), leaving the block stops every process
    of the job that is still alive. So when anything after the spawn raises (recording the pid,
    the watch loop), the job is gone before the caller records the failure and releases the
    GPUs; a job left training on GPUs the scheduler hands to the next run is the worst case."""

    def __init__(
        self,
        launch: Launch,
        *,
        log_path: Path,
        cwd: Path,
        token: str,
        nice: int = 0,
        stop_grace_seconds: float = 10.0,
    ) -> None:
        self.token = token
        self.stop_grace_seconds = stop_grace_seconds
        self._log = open(log_path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the job
        try:
            self.proc = subprocess.Popen(
                launch.argv,
                env=launch.env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_pre_exec(nice),  # a prctl and a nice() call, nothing else
            )
        except BaseException:
            self._log.close()
            raise

    def __enter__(self) -> JobProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Whether the block ended normally or raised: nothing of the job outlives it (a
        process the job left behind would hold GPUs nobody leases any more)."""
        if self.proc.poll() is None or pids_with_token(self.token):
            self.stop(self.stop_grace_seconds)
        else:
            self.wait()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self) -> int:
        code = self.proc.wait()
        self._log.close()
        return code

    def stop(self, grace_seconds: float) -> int:
        """SIGTERM everything of the job, SIGKILL what is left after the grace period."""
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not pids_with_token(self.token):
                break
            time.sleep(0.05)
        for _ in range(50):
            left = pids_with_token(self.token)
            if not left and self.proc.poll() is not None:
                break
            self._signal_all(signal.SIGKILL)
            time.sleep(0.02)
        return self.wait()

    def _signal_all(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        for pid in pids_with_token(self.token):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
