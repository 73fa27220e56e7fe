"""The `torchyard` console script: `up` (server + one worker), `worker`, `db upgrade|current`."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

STOP_TIMEOUT_SECONDS = 20.0


def worker_argv(concurrency: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "worker.celery_app",
        "worker",
        "--pool",
        "threads",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def worker_concurrency() -> int:
    """The configured threads, raised to GPUs + 1: with every GPU leased, one thread is left
    for gpus: 0 runs and for re-asking the scheduler about waiting runs."""
    from app.settings import get_settings
    from worker.gpus import detect

    settings = get_settings()
    return max(settings.worker_concurrency, len(detect(settings).gpus) + 1)


def server_argv(host: str, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "app.main:create_app",
        "--factory",
        "--host",
        host,
        "--port",
        str(port),
        "--log-level",
        "info",
    ]


def _up(args: argparse.Namespace) -> int:
    os.environ["TORCHYARD_DATA_DIR"] = os.path.abspath(args.data_dir)
    from app.prestart import prestart
    from app.settings import get_settings

    get_settings.cache_clear()
    settings = get_settings()
    credentials = prestart()
    children = [
        subprocess.Popen(worker_argv(worker_concurrency())),
        subprocess.Popen(server_argv(args.host, args.port)),
    ]
    print(f"torchyard is up: http://{args.host}:{args.port}  (API docs: /docs)", flush=True)
    print(f"data: {settings.resolved_data_dir}", flush=True)
    print(credentials, flush=True)
    print("press Ctrl-C to stop", flush=True)
    return _supervise(children)


def _supervise(children: list[subprocess.Popen[bytes]]) -> int:
    """Wait until Ctrl-C/SIGTERM or a child dies; then stop all children and wait for them."""
    stopping = False

    def _stop(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    while not stopping and all(c.poll() is None for c in children):
        time.sleep(0.2)
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    print("torchyard stopped", flush=True)
    failed = [c.returncode for c in children if c.returncode not in (0, -signal.SIGTERM)]
    return 0 if stopping or not failed else 1


def _worker(args: argparse.Namespace) -> int:
    concurrency = args.concurrency or worker_concurrency()
    return subprocess.call(worker_argv(concurrency))


def _db(args: argparse.Namespace) -> int:
    from app import migrate
    from app.db import get_engine
    from app.settings import get_settings

    url = get_settings().resolved_database_url
    if args.action == "upgrade":
        from app.prestart import prestart

        print(prestart())
    print(f"current: {migrate.current_revision(get_engine())}  head: {migrate.head_revision(url)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchyard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the server and one worker (embedded defaults)")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8000)
    up.add_argument("--data-dir", default=os.environ.get("TORCHYARD_DATA_DIR", "torchyard-data"))
    up.set_defaults(func=_up)
    worker = sub.add_parser("worker", help="start one Celery worker for this host")
    worker.add_argument("--concurrency", type=int, default=0)
    worker.set_defaults(func=_worker)
    db = sub.add_parser("db", help="database schema (Alembic)")
    db.add_argument("action", choices=["upgrade", "current"])
    db.set_defaults(func=_db)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
