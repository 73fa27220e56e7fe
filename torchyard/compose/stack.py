"""The work of the server-side commands `up` and `db` (their options: torchyard/cli/server.py).

Imported only by those commands, once the server extra is known to be installed, and after
`up` has pointed TORCHYARD_DATA_DIR at its data dir: the settings are read when called.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

from app import migrate
from app.broker import declare_default_queue
from app.db import get_engine
from app.prestart import prestart
from app.settings import PRIVATE_UMASK, get_settings
from torchyard.compose.processes import API_FACTORY, HOST_API_FACTORY, STOP_TIMEOUT_SECONDS
from torchyard.compose.supervising import become, listen


def metrics_dir_for(settings_dir: Path) -> None:
    """/metrics sums the request and stream figures of every server process from here
    (app/ops/prometheus.py); a dead process's files would count, so it starts empty."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        return
    metrics_dir = settings_dir / "prometheus"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(mode=0o700)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)


def up(host: str, port: int | None) -> NoReturn:
    """Prepare the data dir, database and queue, then become the supervisor of the server and
    one worker (torchyard/compose/supervising.py), which runs until Ctrl-C."""
    os.umask(PRIVATE_UMASK)  # the data dir 0700, its files 0600; the children inherit it
    get_settings.cache_clear()
    settings = get_settings()
    port = port or settings.port
    credentials = prestart()
    declare_default_queue()
    metrics_dir_for(settings.resolved_data_dir)
    listener = listen(host, port)
    print(f"torchyard is up: http://{host}:{port}  (API docs: /docs)", flush=True)
    print(f"data: {settings.resolved_data_dir}", flush=True)
    # The worker says itself, as it starts, what GPUs it found and whether jobs are sandboxed
    # (and refuses to start when TORCHYARD_JOB_ISOLATION=bwrap cannot be had).
    print(credentials, flush=True)
    print("press Ctrl-C to stop", flush=True)
    become(
        listener,
        app=HOST_API_FACTORY,
        processes=1,
        worker_stop=settings.shutdown_grace_seconds + STOP_TIMEOUT_SECONDS,
        farewell=True,
    )


def serve(host: str, port: int | None, processes: int | None) -> NoReturn:
    """The API alone (docker-compose.yml's api; the schema is upgraded before, by `torchyard db
    upgrade`): `processes` servers and their spare, supervised like `up`'s until SIGTERM by
    the lean supervisor this process becomes."""
    os.umask(PRIVATE_UMASK)
    settings = get_settings()
    port = port or settings.port
    processes = processes or settings.api_processes
    settings.make_data_dir()
    metrics_dir_for(settings.resolved_data_dir)
    listener = listen(host, port)
    print(f"torchyard serves the API on http://{host}:{port} ({processes} processes)", flush=True)
    become(listener, app=API_FACTORY, processes=processes, worker_stop=None, farewell=False)


def db(upgrade: bool) -> None:
    """`upgrade`: the schema to Alembic's head (and the admin account); then the revisions."""
    url = get_settings().resolved_database_url
    if upgrade:
        print(prestart())
    print(f"current: {migrate.current_revision(get_engine())}  head: {migrate.head_revision(url)}")
