"""Starting a job's processes with their output captured, and stopping every one of them.

torchrun puts each worker in a new session, so signalling the launcher's process group is not
enough. A sandboxed job (worker/sandbox.py) has a PID namespace of its own: its processes are
exactly that namespace's, whatever they did to detach (double fork, setsid, a clean
environment), and killing the namespace's first process (bwrap's init) makes the kernel kill
all of them. `stop` SIGTERMs every process in it but the init (torchrun and the job drain and
shut down cleanly), then SIGKILLs the init.

Without isolation (job_isolation off, or no bubblewrap on the machine), the fallback: every
process of a run carries the run's job token in its environment, and `stop` signals all
processes that carry it. A process that re-execs with a clean environment escapes that scan:
one more reason isolation is the default.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import psutil

from app.runs.files.job_files import open_job_file_for_append
from torchyard.contract import JOB_TOKEN_VAR
from worker.keeper import read_exit_file
from worker.launcher import Launch

# A sandboxed job's umask. Its run folder is 0700 and its own, so 022 opens nothing on the
# host; it lets the run of another uid that resumes from one of its checkpoints read the file
# that run's sandbox binds in (the worker's own 077 would make it 0600, the old run's uid's).
# 002, not 022: the user's shared cache (worker/user_cache.py) is its group's, so what one run
# of the user writes there the next can add to; the run's own files have its own gid.
SANDBOXED_UMASK = 0o002

# The job's exit status when its keeper vanished without writing one (killed with its job).
KEEPER_LOST = -int(signal.SIGKILL)


def _pre_exec(nice: int, umask: int | None = None) -> Callable[[], None]:
    """What the keeper does before exec, inherited by the job and every process it starts:
    a CPU priority lowered by `nice` (settings.job_nice), and a sandboxed job's umask
    (SANDBOXED_UMASK instead of the worker's). No death signal: the job outlives its worker
    (worker.keeper), and the next worker on the host re-adopts it."""

    def pre_exec() -> None:
        if nice:
            os.nice(nice)
            _autogroup_nice(nice)
        if umask is not None:
            os.umask(umask)

    return pre_exec


def _autogroup_nice(nice: int) -> None:
    """The same nice for the job's autogroup. The keeper starts a session of its own, and
    with the kernel's autogroups (sched_autogroup_enabled, on by default) a new session is a
    scheduling group of its own: a process's nice then only ranks it inside its group, and
    the groups share the CPU equally, so six jobs at nice 10 took six shares to the worker's
    one and logged 20x faster than it could ingest (issue 27, tests/test_ingest_gate.py).
    Lowering one's own group's priority needs no privilege; without autogroups there is no
    file. Only os calls: this runs between fork and exec."""
    try:
        fd = os.open("/proc/self/autogroup", os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, str(nice).encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def keeper_argv(launch: Launch, exit_file: Path | None) -> list[str]:
    """The keeper (worker.keeper) in front of the launcher's argv."""
    argv = [sys.executable, "-I", "-m", "worker.keeper"]
    if exit_file is not None:
        argv += ["--exit-file", str(exit_file)]
    if launch.pass_fds:
        argv += ["--fds", ",".join(str(fd) for fd in launch.pass_fds)]
    return [*argv, *launch.keeper_options, "--", *launch.argv]


def keeper_start_ticks(pid: int) -> int | None:
    """A live process's start time (clock ticks after boot, /proc/<pid>/stat field 22): with
    the pid, it names one process for good. None once it is gone or a zombie. Read by hand:
    the number is stored in job records, and psutil gives only seconds since the epoch (boot
    time plus these ticks, moved by every step of the wall clock)."""
    try:
        fields = _stat_fields(pid)
    except OSError:
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def is_live(proc: psutil.Process) -> bool:
    """Running or sleeping, not a zombie or gone (psutil.Error: gone, or not ours to read)."""
    try:
        return proc.status() not in _GONE
    except psutil.Error:
        return False


def pids_with_token(token: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries this job token."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(JOB_TOKEN_VAR) != token:
                continue
        except psutil.Error:  # gone, or another user's
            continue
        if is_live(proc):
            found.append(proc.pid)
    return found


def _stat_fields(pid: int | str) -> list[bytes]:
    """/proc/<pid>/stat after the command name: [state, ppid, ...]."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def pid_namespace(pid: int) -> str | None:
    """The PID namespace's identity (``pid:[4026532...]``), None once the process is gone.
    By hand: psutil knows no namespaces."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid`` ([] once it is gone)."""
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def pids_in_namespace(namespace: str) -> list[int]:
    """Live (non-zombie) processes of this PID namespace, as the worker's /proc numbers them."""
    return [pid for pid in psutil.pids() if pid_namespace(pid) == namespace and _pid_live(pid)]


def _pid_live(pid: int) -> bool:
    try:
        return is_live(psutil.Process(pid))
    except psutil.Error:  # gone since it was listed
        return False


class JobProcess:
    """The running job: its keeper (worker.keeper, the job's parent), its log file and token.

    It owns the job's cleanup from the moment it is spawned: used as a context manager
    (`with JobProcess(...) as job:`, nothing in between), leaving the block stops every process
    of the job that is still alive, unless the job was handed on with `detach()` (a worker
    that stops leaves its jobs to the next one). So when anything after the spawn raises
    (recording the pid, the watch loop), the job is gone before the caller records the failure
    and releases the GPUs; a job left training on GPUs the scheduler hands to the next run is
    the worst case. `JobProcess.adopt` takes over a job another worker launched."""

    def __init__(
        self,
        launch: Launch,
        *,
        log_path: Path,
        cwd: Path,
        token: str,
        nice: int = 0,
        stop_grace_seconds: float = 10.0,
        sandboxed: bool = False,
        exit_file: Path | None = None,
    ) -> None:
        self.token = token
        # launch.argv is bwrap's: the job's processes are those of the PID namespace whose
        # init is bwrap's child (found when first needed, kept while the init lives).
        self.sandboxed = sandboxed
        self.exit_file = exit_file
        self._init: tuple[int, str] | None = None
        self._code: int | None = None
        self._detached = False
        self._keeper_start: int | None = None
        self.stop_grace_seconds = stop_grace_seconds
        self._log: IO[bytes] | None = open_job_file_for_append(log_path)  # while the job runs
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                keeper_argv(launch, exit_file),
                env=launch.env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=launch.pass_fds,
                # a nice() and a umask() call, nothing else
                preexec_fn=_pre_exec(nice, SANDBOXED_UMASK if sandboxed else None),
            )
        except BaseException:
            self._log.close()
            raise
        finally:
            for fd in launch.pass_fds:  # the job's now (a sandbox's bind sources)
                os.close(fd)
        self._pid = self.proc.pid

    @classmethod
    def adopt(
        cls,
        *,
        keeper_pid: int,
        keeper_start: int,
        token: str,
        sandboxed: bool,
        exit_file: Path,
        stop_grace_seconds: float = 10.0,
    ) -> JobProcess:
        """A job another worker launched, whose keeper still runs (worker.adoption checked
        that it is that keeper: same boot, same start time)."""
        job = cls.__new__(cls)
        job.token = token
        job.sandboxed = sandboxed
        job.exit_file = exit_file
        job._init = None
        job._code = None
        job._detached = False
        job._keeper_start = keeper_start
        job.stop_grace_seconds = stop_grace_seconds
        job._log = None
        job.proc = None
        job._pid = keeper_pid
        return job

    def __enter__(self) -> JobProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Whether the block ended normally or raised: nothing of the job outlives it (a
        process the job left behind would hold GPUs nobody leases any more), unless the
        job was detached on purpose."""
        if self._detached:
            return
        if self.poll() is None or self._members():
            self.stop(self.stop_grace_seconds)
        else:
            self.wait()

    @property
    def pid(self) -> int:
        """The keeper's: the job's first process as the worker sees it."""
        return self._pid

    def start_ticks(self) -> int | None:
        """The keeper's start time, recorded so the next worker knows it is the same one."""
        if self._keeper_start is None:
            self._keeper_start = keeper_start_ticks(self._pid)
        return self._keeper_start

    def poll(self) -> int | None:
        """The job's exit status once it ended (its keeper's record of it), else None."""
        if self._code is not None:
            return self._code
        if self.proc is not None:
            keeper_code = self.proc.poll()
            if keeper_code is None:
                return None
        elif keeper_start_ticks(self._pid) == self._keeper_start:
            return None
        else:
            keeper_code = KEEPER_LOST
        written = read_exit_file(self.exit_file) if self.exit_file is not None else None
        self._code = written if written is not None else keeper_code
        return self._code

    def wait(self) -> int:
        if self.proc is not None:
            self.proc.wait()
        while (code := self.poll()) is None:
            time.sleep(0.1)
        self._close_log()
        return code

    def detach(self) -> None:
        """Leave the job running for the next worker (its keeper is in a session of its own
        and outlives this process): the block's end no longer stops it."""
        self._detached = True
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self, grace_seconds: float) -> int:
        """SIGTERM everything of the job, SIGKILL what is left after the grace period."""
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline:
            if self.poll() is not None and not self._members():
                break
            time.sleep(0.05)
        for _ in range(50):
            left = self._members()
            if not left and self.poll() is not None:
                break
            self._signal_all(signal.SIGKILL)
            time.sleep(0.02)
        return self.wait()

    def _namespace_init(self) -> tuple[int, str] | None:
        """(pid, namespace) of bwrap's init for this job; None before it exists or once the
        namespace is gone (its init's death took every process in it along). The init is the
        first process below the keeper (keeper -> bwrap -> init) in another PID namespace."""
        if self._init is not None:
            pid, namespace = self._init
            if pid_namespace(pid) == namespace:
                return self._init
            return None
        if self.poll() is not None:
            return None
        ours = pid_namespace(os.getpid())
        level = [self._pid]
        for _ in range(3):
            below = [child for pid in level for child in children_of(pid)]
            for child in below:
                found = pid_namespace(child)
                if found is not None and found != ours:
                    self._init = (child, found)
                    return self._init
            level = below
        return None

    def members(self) -> list[int]:
        """Every live process of the job, as the worker's /proc numbers them (its system
        series sample exactly these: worker.system_metrics)."""
        return self._members()

    def _members(self) -> list[int]:
        """Every live process of the job."""
        if not self.sandboxed:
            return pids_with_token(self.token)
        init = self._namespace_init()
        return pids_in_namespace(init[1]) if init is not None else []

    def _signal_all(self, sig: signal.Signals) -> None:
        if self.sandboxed:
            self._signal_namespace(sig)
            return
        try:
            os.killpg(self._pid, sig)  # the keeper's session: it and the launcher
        except ProcessLookupError:
            pass
        for pid in pids_with_token(self.token):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def _signal_namespace(self, sig: signal.Signals) -> None:
        """SIGTERM: each process of the namespace but its init (which would take the rest
        down with SIGKILL at once). SIGKILL: the init, and the kernel kills the namespace."""
        init = self._namespace_init()
        if init is None:
            targets = [self._pid] if sig == signal.SIGKILL else []
        elif sig == signal.SIGKILL:
            targets = [init[0], self._pid]
        else:
            targets = [pid for pid in pids_in_namespace(init[1]) if pid != init[0]]
        for pid in targets:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
