"""Server-side commands: `up` (server + one worker), `worker`, `db upgrade|current`.

These run on the machine that hosts torchyard, so they may import the app's settings and
database code; the imports stay inside the commands so the client commands (which only speak
HTTP, from a laptop) never pay for SQLAlchemy or pydantic-settings, and work in the base
install, which has no server stack at all (that is the `server` extra).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from app.cli.client import CliError

# How long the server may take to stop; the worker gets its shutdown grace plus this.
STOP_TIMEOUT_SECONDS = 20.0
# How long uvicorn lets open responses finish after SIGTERM before it cuts them.
GRACEFUL_SHUTDOWN_SECONDS = 3
# The folder that holds our `app` package: site-packages, or the checkout (editable install).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# One module of each part of the `server` extra these commands cannot start without.
SERVER_STACK = ("fastapi", "uvicorn", "sqlalchemy", "alembic", "celery", "torch")


def require_server_stack() -> None:
    """A clear error instead of an ImportError traceback on a client-only install."""
    missing = [name for name in SERVER_STACK if importlib.util.find_spec(name) is None]
    if missing:
        raise CliError(
            f"this command runs the torchyard server, which needs {', '.join(missing)}: "
            "install the server extra, e.g. pip install 'torchyard[server]'"
        )


def worker_argv(concurrency: int = 0) -> list[str]:
    """Celery's worker on torchyard's app, as its own process (`python -m worker`: app never
    imports the worker). -P: the current directory is not put on sys.path, so a user's own
    `worker.py` or `app/` where `torchyard up` runs cannot stand in for ours (worker/__main__.py
    says why Celery's -A is not used). ``concurrency`` 0: the worker's own default (the
    configured threads, at least its GPUs + 1)."""
    return [
        sys.executable,
        "-P",
        "-m",
        "worker",
        "worker",
        "--pool",
        "threads",
        *(["--concurrency", str(concurrency)] if concurrency > 0 else []),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


# The API of a machine that keeps run directories: app.main's app with this host's view of its
# jobs given to the reaper (worker/api.py says why); named, never imported, from here.
HOST_API_FACTORY = "worker.api:create_app"


def server_argv(host: str, port: int, workers: int = 1) -> list[str]:
    """uvicorn serving the app; `workers` > 1 forks that many server processes (as
    docker-compose.yml's api service does, UVICORN_WORKERS)."""
    return [
        sys.executable,
        "-P",
        "-m",
        "uvicorn",
        HOST_API_FACTORY,
        "--factory",
        # uvicorn puts --app-dir first on sys.path (default: the current directory, where a
        # user's own app/ would shadow ours)
        "--app-dir",
        str(PACKAGE_ROOT),
        "--host",
        host,
        "--port",
        str(port),
        "--log-level",
        "info",
        # uvicorn believes X-Forwarded-For from 127.0.0.1 by default, so any local proxy (or
        # process) could pick its client address; the app does it only for trusted_proxies.
        "--no-proxy-headers",
        # A response still open this long after SIGTERM is cut, so a stop (an upgrade, `up`
        # restarting it) takes seconds; the event streams end at once (app/ops/shutdown.py).
        "--timeout-graceful-shutdown",
        str(GRACEFUL_SHUTDOWN_SECONDS),
        *(["--workers", str(workers)] if workers > 1 else []),
    ]


def standby_argv(host: str, port: int) -> list[str]:
    """The server's spare (app/cli/standby.py): server_argv's uvicorn arguments, served only
    when `up`'s supervisor says so."""
    return [sys.executable, "-P", "-m", "app.cli.standby", *server_argv(host, port)[4:]]


def up(
    host: Annotated[str, typer.Option(help="address the server binds to")] = "127.0.0.1",
    port: Annotated[
        int | None,
        typer.Option(help="port the server listens on [default: TORCHYARD_PORT, else 8000]"),
    ] = None,
    data_dir: Annotated[
        str,
        typer.Option(envvar="TORCHYARD_DATA_DIR", help="database, broker, runs and checkpoints"),
    ] = "torchyard-data",
) -> None:
    """Start the server and one worker (embedded defaults: SQLite, no Redis); either one that
    dies is started again. Ctrl-C stops both."""
    require_server_stack()
    os.environ["TORCHYARD_DATA_DIR"] = os.path.abspath(data_dir)
    from app.cli.supervisor import Child, supervise
    from app.prestart import prestart
    from app.settings import PRIVATE_UMASK, get_settings

    os.umask(PRIVATE_UMASK)  # the data dir 0700, its files 0600; the children inherit it
    get_settings.cache_clear()
    settings = get_settings()
    port = port or settings.port
    credentials = prestart()
    from app.broker import declare_default_queue

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
    raise typer.Exit(supervise(children))


def worker(
    concurrency: Annotated[
        int, typer.Option(help="worker threads (0: the configured value, at least GPUs + 1)")
    ] = 0,
) -> None:
    """Start one Celery worker for this host."""
    require_server_stack()
    raise typer.Exit(subprocess.call(worker_argv(concurrency)))


class DbAction(StrEnum):
    upgrade = "upgrade"
    current = "current"


def db(
    action: Annotated[DbAction, typer.Argument(help="upgrade to the head, or show the revision")],
) -> None:
    """Database schema (Alembic): `upgrade` to the head, or show the `current` revision."""
    require_server_stack()
    from app import migrate
    from app.db import get_engine
    from app.settings import get_settings

    url = get_settings().resolved_database_url
    if action is DbAction.upgrade:
        from app.prestart import prestart

        print(prestart())
    print(f"current: {migrate.current_revision(get_engine())}  head: {migrate.head_revision(url)}")


def register(app: typer.Typer) -> None:
    """Add the server commands to the `torchyard` app, in their own help panel."""
    panel = "Server (on the torchyard host)"
    app.command(rich_help_panel=panel)(up)
    app.command(rich_help_panel=panel)(worker)
    app.command(rich_help_panel=panel)(db)
