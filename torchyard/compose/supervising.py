"""The process that supervises `torchyard up`'s and `torchyard serve`'s children, lean.

`up` prepares in the CLI's process: the settings, the schema (Alembic), the admin account, the
broker's queue, the port. Those imports (SQLAlchemy, Alembic, pydantic, kombu, typer) stayed in
the supervisor for as long as it ran: 93 MiB of an idle `torchyard up`'s 382 MiB (PSS, bench/
idle_memory.py), in a process that only starts children, waits and restarts them. Python gives
no import back, so once prepared the CLI's process replaces itself (exec: the same pid, its
terminal, its environment and umask) with this module, which imports the standard library and
the compose modules that are standard library only. The port is bound before the exec, so a
port already taken still fails `up` at once; the socket comes here as an inherited descriptor.

What `up` says as it stops (torchyard/compose/farewell.py) reads the database: it runs in a
short child of its own after the others stopped.

    python -P -m torchyard.compose.supervising --listen-fd N --app FACTORY [--processes 1]
        [--worker-stop SECONDS] [--farewell]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from torchyard.compose.processes import (
    STOP_TIMEOUT_SECONDS,
    serving_argv,
    spare_argv,
    worker_argv,
)
from torchyard.compose.supervisor import Child, Spare, supervise

# The listening socket's queue: connections wait here while a server restarts (uvicorn's own
# default).
BACKLOG = 2048


def listen(host: str, port: int) -> socket.socket:
    """The port, bound here once: a port already taken fails `up` at once, with its reason."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as e:
        raise SystemExit(f"torchyard: cannot listen on {host}:{port}: {e.strerror}") from e


@dataclass
class Servers:
    """The API's serving processes on one listening socket, their spare and the notice pipe
    (torchyard/compose/supervisor.py says why the supervisor holds the socket)."""

    children: list[Child]
    notices: int


def servers(listener: int, processes: int, app: str) -> Servers:
    """`processes` servers of `app` on the listening socket `listener` and one spare for them."""
    notices, notify = os.pipe()
    os.set_blocking(notices, False)
    spare = Spare(spare_argv(app, notify), listener=listener, pass_fds=(notify,))
    children = [
        Child(
            "server" if processes == 1 else f"server {i + 1}",
            serving_argv(app, listener, notify),
            stop_timeout=STOP_TIMEOUT_SECONDS,
            pass_fds=(listener, notify),
            standby=spare,
        )
        for i in range(processes)
    ]
    return Servers(children, notices)


def become(
    listener: socket.socket,
    *,
    app: str,
    processes: int,
    worker_stop: float | None,
    farewell: bool,
) -> NoReturn:
    """Replace this process with the lean supervisor of the servers on `listener` (and of a
    worker given `worker_stop`, its stop timeout)."""
    fd = listener.fileno()
    os.set_inheritable(fd, True)
    argv = [
        sys.executable,
        "-P",
        "-m",
        "torchyard.compose.supervising",
        "--listen-fd",
        str(fd),
        "--app",
        app,
        "--processes",
        str(processes),
        *(["--worker-stop", str(worker_stop)] if worker_stop is not None else []),
        *(["--farewell"] if farewell else []),
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


def run(
    listener: int, *, app: str, processes: int, worker_stop: float | None, farewell: bool
) -> int:
    """Supervise until stopped; the exit code of the whole."""
    pool = servers(listener, processes, app)
    worker = (
        [Child("worker", worker_argv(), stop_timeout=worker_stop)]
        if worker_stop is not None
        else []
    )
    try:
        code = supervise([*worker, *pool.children], pool.notices)
    finally:
        os.close(pool.notices)
        os.close(listener)
    if farewell:
        # Its own lines, or its error: the data is safe either way, `up` has stopped.
        subprocess.run([sys.executable, "-P", "-m", "torchyard.compose.farewell"], check=False)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchyard.compose.supervising")
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--worker-stop", type=float, default=None)
    parser.add_argument("--farewell", action="store_true")
    args = parser.parse_args(argv)
    return run(
        args.listen_fd,
        app=args.app,
        processes=args.processes,
        worker_stop=args.worker_stop,
        farewell=args.farewell,
    )


if __name__ == "__main__":
    sys.exit(main())
