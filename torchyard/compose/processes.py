"""The command lines of the processes `torchyard up` and `torchyard serve` start: the API servers
and their spare (uvicorn on an API factory, torchyard/compose/serving.py) and the Celery
worker, each its own process. Standard library only: the
test stacks and benchmarks build the same processes from here."""

from __future__ import annotations

import sys
from pathlib import Path

# How long the server may take to stop; the worker gets its shutdown grace plus this.
STOP_TIMEOUT_SECONDS = 20.0
# How long uvicorn lets open responses finish after SIGTERM before it cuts them.
GRACEFUL_SHUTDOWN_SECONDS = 3
# The folder that holds our packages: site-packages, or the checkout (editable install).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# The API of a machine that keeps run directories: app.main's app with this host's view of its
# jobs given to the reaper (torchyard/compose/api.py says why); named, never imported, here.
HOST_API_FACTORY = "torchyard.compose.api:create_app"
# The word on a spare's stdin that makes it serve (torchyard/compose/standby.py).
SPARE_WORD = "serve"
# The API of a machine without run directories (docker-compose.yml's api, `torchyard serve`).
API_FACTORY = "app.main:create_app"


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


def server_argv(host: str, port: int, workers: int = 1) -> list[str]:
    """uvicorn's CLI serving the host API on its own port, unsupervised: what the test stacks
    start as "a server process". `workers` > 1: uvicorn's own multi-process supervisor, as
    docker-compose.yml's api ran it before issue 39 (bench/api_cpu_hog.py's baseline); the
    product serves through torchyard/compose/supervisor.py instead (serving_argv)."""
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


def serving_argv(app: str, fd: int, notify_fd: int) -> list[str]:
    """One server of the supervised path (torchyard/compose/serving.py): `app`'s factory on the
    supervisor's listening socket `fd`, telling the supervisor on `notify_fd` when it stops."""
    return [*_serving(app, notify_fd, "serving"), "--fd", str(fd)]


def spare_argv(app: str, notify_fd: int) -> list[str]:
    """The servers' spare (torchyard/compose/standby.py): serving_argv without the socket,
    which the supervisor's word brings."""
    return _serving(app, notify_fd, "standby")


def _serving(app: str, notify_fd: int, module: str) -> list[str]:
    return [
        sys.executable,
        "-P",
        "-m",
        f"torchyard.compose.{module}",
        "--app",
        app,
        "--app-dir",
        str(PACKAGE_ROOT),
        "--notify-fd",
        str(notify_fd),
    ]
