"""The work of the server-side commands `up` and `db` (their options: torchyard/cli/server.py).

Imported only by those commands, once the server extra is known to be installed, and after
`up` has pointed TORCHYARD_DATA_DIR at its data dir: the settings are read when called.
"""

from __future__ import annotations

import os
import shutil

from app import migrate
from app.broker import declare_default_queue
from app.db import get_engine
from app.prestart import prestart
from app.settings import PRIVATE_UMASK, get_settings
from torchyard.compose.processes import (
    STOP_TIMEOUT_SECONDS,
    server_argv,
    standby_argv,
    worker_argv,
)
from torchyard.compose.supervisor import Child, supervise


def up(host: str, port: int | None) -> int:
    """Prepare the data dir, database and queue, then supervise the server and one worker until
    Ctrl-C; the exit code of the whole."""
    os.umask(PRIVATE_UMASK)  # the data dir 0700, its files 0600; the children inherit it
    get_settings.cache_clear()
    settings = get_settings()
    port = port or settings.port
    credentials = prestart()
    declare_default_queue()
    # /metrics sums the request and stream figures of every server process from here
    # (app/ops/prometheus.py); a dead process's files would count, so it starts empty.
    metrics_dir = settings.resolved_data_dir / "prometheus"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(mode=0o700)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
    children = [
        Child(
            "worker",
            worker_argv(),
            stop_timeout=settings.shutdown_grace_seconds + STOP_TIMEOUT_SECONDS,
        ),
        Child(
            "server",
            server_argv(host, port),
            stop_timeout=STOP_TIMEOUT_SECONDS,
            standby=standby_argv(host, port),
        ),
    ]
    print(f"torchyard is up: http://{host}:{port}  (API docs: /docs)", flush=True)
    print(f"data: {settings.resolved_data_dir}", flush=True)
    # The worker says itself, as it starts, what GPUs it found and whether jobs are sandboxed
    # (and refuses to start when TORCHYARD_JOB_ISOLATION=bwrap cannot be had).
    print(credentials, flush=True)
    print("press Ctrl-C to stop", flush=True)
    return supervise(children)


def db(upgrade: bool) -> None:
    """`upgrade`: the schema to Alembic's head (and the admin account); then the revisions."""
    url = get_settings().resolved_database_url
    if upgrade:
        print(prestart())
    print(f"current: {migrate.current_revision(get_engine())}  head: {migrate.head_revision(url)}")
