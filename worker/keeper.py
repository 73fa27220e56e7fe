"""The job's keeper: a tiny parent between the worker and the job, so the job outlives the
worker (`python -I -m worker.keeper [--exit-file F] [--fds 3,4] [--cgroup DIR]... [--rlimit R=N]...
-- ARGV...`).

A worker that stops (Ctrl-C of `torchyard up`, an upgrade, an OOM kill) must not take its
running jobs with it: the next worker on the host re-adopts them (worker.adoption). But only a
process's parent learns its exit status, and the worker that learns it may be gone by then.
So the worker starts this keeper in a session of its own; the keeper starts the job (the
launcher's argv, bwrap's when sandboxed, whose --die-with-parent now watches the keeper),
waits for it, and writes its exit status to the exit file the worker named (in the data
dir, out of the job's sight; its bytes taken at the start, so a job that filled the disk is
still recorded at once) before it exits with the same status: a signal that ended the job
ends the keeper too, so a parent that is still there sees exactly what it saw before.

The keeper ignores SIGTERM, SIGINT and SIGHUP (as Python handlers, so the job starts with
the default ones): stopping a job is the worker's business (worker.process signals the job's
processes), and the keeper must outlive the job to report it. Standard library only; `-I`
keeps a `worker/` folder in the job's working directory from standing in for this package.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

IGNORED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


# The exit file's size: blanks (no number yet, "still running") until the job ends, then its
# status right-aligned in the same bytes.
EXIT_FILE_BYTES = 16


def reserve_exit_file(path: Path) -> int | None:
    """The exit file made at the keeper's start, its bytes allocated: the job's status is later
    written over them, so a job that dies of a full disk (issue 39: ENOSPC) is still recorded
    as it exited, at once, with no byte of disk free. None when it cannot be made now (the
    disk full already): `write_exit_file` then tries the usual way at the end."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        if os.pwrite(fd, b" " * (EXIT_FILE_BYTES - 1) + b"\n", 0) != EXIT_FILE_BYTES:
            raise OSError("short write")
        os.fsync(fd)
    except OSError:
        os.close(fd)
        return None
    return fd


def write_exit_file(path: Path, returncode: int, reserved: int | None = None) -> None:
    """Into the reserved bytes (one write within one page: a reader never sees half a number),
    else atomically by a rename. Never raises: a keeper that cannot record the status still
    exits as the job did, which its parent (the worker that started it) sees."""
    text = f"{returncode}".rjust(EXIT_FILE_BYTES - 1).encode()
    if reserved is not None:
        try:
            os.pwrite(reserved, text, 0)
            os.fsync(reserved)
            return
        except OSError:
            pass
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(text + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        print(f"torchyard: could not record the job's exit status: {exc}", file=sys.stderr)


def read_exit_file(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _end_like(returncode: int) -> None:
    """Exit as the job did: its code, or death by the same signal (no core file)."""
    if returncode >= 0:
        os._exit(returncode)
    sig = -returncode
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL, SIGSTOP: default already
        pass
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def _hold_to_limits(cgroup_folders: list[str], rlimits: list[str]) -> None:
    """This process into the job's cgroups, its rlimits set: the job inherits both."""
    for folder in cgroup_folders:
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    for item in rlimits:
        name, _, value = item.partition("=")
        resource.setrlimit(int(name), (int(value), int(value)))


def _clean_counter(folder: str) -> bool:
    """No limit was hit in this folder: no OOM kill (v1 memory.oom_control, v2 memory.events)
    and no fork refused (pids.events); a file that is not there counts as clean."""
    for name, key in (
        ("memory.oom_control", "oom_kill"),
        ("memory.events", "oom_kill"),
        ("pids.events", "max"),
    ):
        try:
            with open(os.path.join(folder, name)) as f:
                lines = [line.split() for line in f]
        except OSError:
            continue
        if any(len(w) == 2 and w[0] == key and w[1] != "0" for w in lines):
            return False
    return True


def leave_cgroups(cgroup_folders: list[str]) -> None:
    """After the job: this process back at each hierarchy's root and the job's folders removed
    (issue 39: cgroups of finished runs piled up where no worker was left to remove them).
    Only while no limit was hit: the worker reads those counters to name the limit (a folder
    the worker or its start sweep then removes); a folder with a process left in it stays."""
    if not cgroup_folders or not all(_clean_counter(f) for f in cgroup_folders):
        return
    for folder in cgroup_folders:
        try:
            with open(
                os.path.join(os.path.dirname(os.path.dirname(folder)), "cgroup.procs"), "w"
            ) as f:
                f.write(str(os.getpid()))
            os.rmdir(folder)
        except OSError:
            continue


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="worker.keeper")
    parser.add_argument("--exit-file", type=Path)
    parser.add_argument("--fds", default="")
    # The job's cgroup folders (worker.limits) and rlimits ("RESOURCE=VALUE"), entered and
    # set here, before the job's first process exists: every process of it is born inside.
    parser.add_argument("--cgroup", action="append", default=[])
    parser.add_argument("--rlimit", action="append", default=[])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    for sig in IGNORED_SIGNALS:
        signal.signal(sig, lambda *_: None)
    fds = tuple(int(fd) for fd in args.fds.split(",") if fd)
    reserved = reserve_exit_file(args.exit_file) if args.exit_file is not None else None
    try:
        _hold_to_limits(args.cgroup, args.rlimit)
    except (OSError, ValueError) as exc:
        # Never a job without its limits: the run fails with the reason in its log.
        print(f"torchyard: could not apply the run's limits: {exc}", file=sys.stderr, flush=True)
        if args.exit_file is not None:
            write_exit_file(args.exit_file, 126, reserved)
        os._exit(126)
    try:
        job = subprocess.Popen(command, pass_fds=fds)
    except OSError as exc:
        print(f"torchyard: could not start the job: {exc}", file=sys.stderr, flush=True)
        returncode = 127
    else:
        for fd in fds:
            os.close(fd)
        returncode = job.wait()
    if args.exit_file is not None:
        write_exit_file(args.exit_file, returncode, reserved)
    leave_cgroups(args.cgroup)
    _end_like(returncode)


if __name__ == "__main__":
    main(sys.argv[1:])
