"""Run a command where it takes nothing from the timed tests: an idle cgroup, scratch files in
memory, and a PostgreSQL and a Redis of its own inside that cgroup.

`make test` (issue 38: CI under 40 minutes on 2 cores) runs its timed tests, whose bounds are
the product's promises ("gone within 5 s of a cancel", "answers within a second beside a fork
bomb"), at the normal priority, and the untimed tests beside them through this:

- CPU: the kernel's idle scheduling class for a group (cgroup `cpu.idle`, Linux 5.15) runs the
  group's processes only on a core nobody else wants, and any other process that wakes preempts
  them at once. A timed pass keeps about one of 2 cores busy (it mostly waits on heartbeats,
  TTLs and process starts); the rest of the suite computes in the time it leaves. Where
  `cpu.idle` is missing, the group gets the smallest weight there is.
- The command's jobs would escape the group (a worker makes its jobs' cgroups at the
  hierarchy's root): `TORCHYARD_JOB_CGROUP_PARENT` puts their parent inside it.
- Disk: the timed flood test (12 jobs writing 3 GB of spools against SQLite's lock) failed
  beside the untimed tests' writes (a commit stalled 44 s in the first try: docs/testing.md),
  and disks have no idle class here (mq-deadline). `TMPDIR` is a tmpfs of its own (memory),
  where every test's data dir, database file and venv go.
- Services: the PostgreSQL and Redis servers of the box run at the normal priority whoever
  asks; the untimed services tests get their own, started inside the group (PostgreSQL with
  fsync off on the tmpfs), through `POSTGRES_URL` and `REDIS_BASE` (the Makefile's).

Usage: python bench/cpu_idle.py [--postgres-port P] [--redis-port R] COMMAND [ARG ...]; exits
with the command's status, or 2 when the group cannot be made (not root, no cgroup hierarchy):
running the rest beside the timed tests at the same priority breaks their bounds, so it is not
done silently.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from worker import cgroups

# The tmpfs's size: a limit, not a reservation (pages are taken as files are written); the
# untimed tests leave about 2 GB of files by the end.
SCRATCH_SIZE = "50%"
# As the box's cluster is made (its autovacuum is off too: a test's counters are its own).
LOCALE = ("-E", "UTF8", "--locale=C.UTF-8")


def make_group(name: str) -> Path:
    """The idle group under the cpu controller's root, this process moved into it."""
    hierarchy = cgroups.find_hierarchy()
    if hierarchy is None:
        raise OSError("no cgroup hierarchy with the memory, cpu and pids controllers")
    roots = dict(hierarchy.roots)
    root = roots["unified"] if hierarchy.version == 2 else roots["cpu"]
    group = root / name
    group.mkdir(exist_ok=True)
    if (group / "cpu.idle").exists():
        (group / "cpu.idle").write_text("1")
    elif hierarchy.version == 2:
        (group / "cpu.weight").write_text("1")
    else:
        (group / "cpu.shares").write_text("2")
    (group / "cgroup.procs").write_text(str(os.getpid()))
    return group


def remove_empty(name: str) -> None:
    """The group and the jobs' parents made inside it under every controller, deepest first;
    a folder a process outlived its command in stays."""
    hierarchy = cgroups.find_hierarchy()
    for _, root in hierarchy.roots if hierarchy else ():
        top = root / name
        for folder in sorted(top.rglob("*"), key=lambda f: len(f.parts), reverse=True):
            if folder.is_dir():
                with contextlib.suppress(OSError):
                    folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def wait_until(check: str, what: str, timeout: float = 60) -> None:
    """Until the shell command `check` succeeds (a server answering)."""
    deadline = time.monotonic() + timeout
    quiet = subprocess.DEVNULL
    while subprocess.call(check, shell=True, stdout=quiet, stderr=quiet) != 0:
        if time.monotonic() > deadline:
            raise OSError(f"{what} did not answer within {timeout:.0f} s")
        time.sleep(0.2)


@contextlib.contextmanager
def postgres(scratch: Path, port: int) -> Iterator[str]:
    """A PostgreSQL cluster of its own (the box's binaries, run as `postgres`), with a `test`
    database; its URL."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[4]))
    bindir = Path(found[-1]) if found else Path(shutil.which("initdb") or "initdb").parent
    data = scratch / "postgres"
    data.mkdir()
    shutil.chown(data, "postgres", "postgres")
    as_postgres = ["runuser", "-u", "postgres", "--"]
    initdb = [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", *LOCALE]
    subprocess.run([*as_postgres, *initdb], check=True, stdout=subprocess.DEVNULL)
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={data}"
    options += " -c fsync=off -c full_page_writes=off -c max_connections=300 -c autovacuum=off"
    ctl = [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data)]
    subprocess.run([*ctl, "-o", options, "-l", str(data / "log"), "-w", "start"], check=True)
    try:
        createdb = [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres"]
        subprocess.run([*createdb, "test"], check=True)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"
    finally:
        subprocess.run([*ctl, "-m", "immediate", "stop"], check=False)


@contextlib.contextmanager
def redis(scratch: Path, port: int) -> Iterator[str]:
    """A Redis server of its own, nothing saved; its URL without a database number."""
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(scratch),
        ],  # fmt: skip
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until(f"redis-cli -p {port} ping", f"redis-server on port {port}")
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-port", type=int)
    parser.add_argument("--redis-port", type=int)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if not args.command:
        parser.error("no command")
    name = f"torchyard-ci-idle-{os.getpid()}"
    try:
        group = make_group(name)
    except OSError as exc:
        print(f"cpu_idle: cannot run {args.command[0]} in an idle cgroup: {exc}", file=sys.stderr)
        return 2
    scratch = Path(tempfile.gettempdir()) / name
    scratch.mkdir(mode=0o755)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={SCRATCH_SIZE},mode=0755", "tmpfs", str(scratch)]
    if subprocess.call(mount) != 0:
        print(f"cpu_idle: cannot mount a tmpfs at {scratch}", file=sys.stderr)
        scratch.rmdir()
        remove_empty(name)
        return 2
    env = dict(os.environ, TORCHYARD_JOB_CGROUP_PARENT=f"{name}/torchyard", TMPDIR=str(scratch))
    # torch sets its compile cache's folder in os.environ from TMPDIR when a test process imports
    # torch._dynamo, and the live stacks it starts hand it on to their jobs, whose sandbox has
    # its own /tmp but only a root-owned path to the tmpfs: a job failed creating it (stop 51).
    env["TORCHINDUCTOR_CACHE_DIR"] = "/tmp/torchinductor-ci"
    try:
        with contextlib.ExitStack() as services:
            if args.postgres_port:
                env["POSTGRES_URL"] = services.enter_context(postgres(scratch, args.postgres_port))
            if args.redis_port:
                env["REDIS_BASE"] = services.enter_context(redis(scratch, args.redis_port))
            print(f"cpu_idle: {' '.join(args.command)} in {group} (idle), files in {scratch}")
            sys.stdout.flush()
            status = subprocess.call(args.command, env=env)
    finally:
        with contextlib.suppress(OSError):
            (group.parent / "cgroup.procs").write_text(str(os.getpid()))
        remove_empty(name)
        subprocess.call(["umount", "--lazy", str(scratch)])
        with contextlib.suppress(OSError):
            scratch.rmdir()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
