"""The command lines of the processes `torchyard up` starts: the API server (uvicorn on the
host API's factory) and the Celery worker, each its own process. Standard library only: the
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
    """The server's spare (torchyard/compose/standby.py): server_argv's uvicorn arguments,
    served only when `up`'s supervisor says so."""
    return [sys.executable, "-P", "-m", "torchyard.compose.standby", *server_argv(host, port)[4:]]
