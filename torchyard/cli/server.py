"""Server-side commands: `up` (server + one worker), `serve` (the API alone), `worker`,
`db upgrade|current`.

These run on the machine that hosts torchyard. Only their options are declared here: their
work is the composition root's (torchyard.compose), imported inside each command after
`require_server_stack`, so the client commands (which only speak HTTP, from a laptop) never
import the server, and a base install (no `server` extra, no server stack at all) says what to
install instead of failing with an ImportError.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from enum import StrEnum
from typing import Annotated

import typer

from torchyard.cli.client import CliError

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
    os.environ["TORCHYARD_DATA_DIR"] = os.path.abspath(data_dir)  # before app reads settings
    from torchyard.compose import stack

    stack.up(host, port)  # becomes the supervisor: never returns


def serve(
    host: Annotated[str, typer.Option(help="address the API binds to")] = "127.0.0.1",
    port: Annotated[
        int | None,
        typer.Option(help="port the API listens on [default: TORCHYARD_PORT, else 8000]"),
    ] = None,
    processes: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=64,
            help="API server processes on the one port, plus a warmed spare "
            "[default: TORCHYARD_API_PROCESSES, else 1]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the API alone (docker-compose.yml's api; run `torchyard db upgrade` first): its
    server processes and their spare, supervised as `up` does; SIGTERM stops them."""
    require_server_stack()
    from torchyard.compose import stack

    stack.serve(host, port, processes)  # becomes the supervisor: never returns


def worker(
    concurrency: Annotated[
        int, typer.Option(help="worker threads (0: the configured value, at least GPUs + 1)")
    ] = 0,
) -> None:
    """Start one Celery worker for this host."""
    require_server_stack()
    from torchyard.compose.processes import worker_argv

    raise typer.Exit(subprocess.call(worker_argv(concurrency)))


class DbAction(StrEnum):
    upgrade = "upgrade"
    current = "current"


def db(
    action: Annotated[DbAction, typer.Argument(help="upgrade to the head, or show the revision")],
) -> None:
    """Database schema (Alembic): `upgrade` to the head, or show the `current` revision."""
    require_server_stack()
    from torchyard.compose import stack

    stack.db(upgrade=action is DbAction.upgrade)


def register(app: typer.Typer) -> None:
    """Add the server commands to the `torchyard` app, in their own help panel."""
    panel = "Server (on the torchyard host)"
    app.command(rich_help_panel=panel)(up)
    app.command(rich_help_panel=panel)(serve)
    app.command(rich_help_panel=panel)(worker)
    app.command(rich_help_panel=panel)(db)
