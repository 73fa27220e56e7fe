"""The work of the server-side commands `up` and `db` (their options: torchyard/cli/server.py).

Imported only by those commands, once the server extra is known to be installed, and after
`up` has pointed TORCHYARD_DATA_DIR at its data dir: the settings are read when called.
"""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from app import migrate
from app.broker import declare_default_queue
from app.db import get_engine
from app.prestart import prestart
from app.settings import PRIVATE_UMASK, get_settings
from torchyard.compose.farewell import farewell, left_running
from torchyard.compose.processes import (
    API_FACTORY,
    HOST_API_FACTORY,
    STOP_TIMEOUT_SECONDS,
    serving_argv,
    spare_argv,
    worker_argv,
)
from torchyard.compose.supervisor import Child, Spare, supervise

# The listening socket's queue: connections wait here while a server restarts (uvicorn's own
# default).
BACKLOG = 2048


@dataclass
class Servers:
    """The API's serving processes on one listening socket, their spare and the notice pipe
    (torchyard/compose/supervisor.py says why the supervisor holds the socket)."""

    children: list[Child]
    listener: socket.socket
    notices: int

    def close(self) -> None:
        self.listener.close()
        os.close(self.notices)


def listen(host: str, port: int) -> socket.socket:
    """The port, bound here once: a port already taken fails `up` at once, with its reason."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as e:
        raise SystemExit(f"torchyard: cannot listen on {host}:{port}: {e.strerror}") from e


def servers(host: str, port: int, processes: int, app: str) -> Servers:
    """`processes` servers of `app` on host:port and one spare for them all."""
    listener = listen(host, port)
    notices, notify = os.pipe()
    os.set_blocking(notices, False)
    fd = listener.fileno()
    spare = Spare(spare_argv(app, notify), listener=fd, pass_fds=(notify,))
    children = [
        Child(
            "server" if processes == 1 else f"server {i + 1}",
            serving_argv(app, fd, notify),
            stop_timeout=STOP_TIMEOUT_SECONDS,
            pass_fds=(fd, notify),
            standby=spare,
        )
        for i in range(processes)
    ]
    return Servers(children, listener, notices)


def metrics_dir_for(settings_dir: Path) -> None:
    """/metrics sums the request and stream figures of every server process from here
    (app/ops/prometheus.py); a dead process's files would count, so it starts empty."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        return
    metrics_dir = settings_dir / "prometheus"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(mode=0o700)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)


def up(host: str, port: int | None) -> int:
    """Prepare the data dir, database and queue, then supervise the server and one worker until
    Ctrl-C; the exit code of the whole."""
    os.umask(PRIVATE_UMASK)  # the data dir 0700, its files 0600; the children inherit it
    get_settings.cache_clear()
    settings = get_settings()
    port = port or settings.port
    credentials = prestart()
    declare_default_queue()
    metrics_dir_for(settings.resolved_data_dir)
    pool = servers(host, port, 1, HOST_API_FACTORY)
    worker = Child(
        "worker",
        worker_argv(),
        stop_timeout=settings.shutdown_grace_seconds + STOP_TIMEOUT_SECONDS,
    )
    print(f"torchyard is up: http://{host}:{port}  (API docs: /docs)", flush=True)
    print(f"data: {settings.resolved_data_dir}", flush=True)
    # The worker says itself, as it starts, what GPUs it found and whether jobs are sandboxed
    # (and refuses to start when TORCHYARD_JOB_ISOLATION=bwrap cannot be had).
    print(credentials, flush=True)
    print("press Ctrl-C to stop", flush=True)
    try:
        code = supervise([worker, *pool.children], pool.notices)
    finally:
        pool.close()
    for line in farewell(left_running(), kept=settings.keep_jobs_on_worker_stop):
        print(line, flush=True)
    return code


def serve(host: str, port: int | None, processes: int | None) -> int:
    """The API alone (docker-compose.yml's api; the schema is upgraded before, by `torchyard db
    upgrade`): `processes` servers and their spare, supervised like `up`'s until SIGTERM."""
    os.umask(PRIVATE_UMASK)
    settings = get_settings()
    port = port or settings.port
    processes = processes or settings.api_processes
    settings.make_data_dir()
    metrics_dir_for(settings.resolved_data_dir)
    pool = servers(host, port, processes, API_FACTORY)
    print(f"torchyard serves the API on http://{host}:{port} ({processes} processes)", flush=True)
    try:
        return supervise(pool.children, pool.notices)
    finally:
        pool.close()


def db(upgrade: bool) -> None:
    """`upgrade`: the schema to Alembic's head (and the admin account); then the revisions."""
    url = get_settings().resolved_database_url
    if upgrade:
        print(prestart())
    print(f"current: {migrate.current_revision(get_engine())}  head: {migrate.head_revision(url)}")
