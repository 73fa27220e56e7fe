"""A real torchyard stack in subprocesses (uvicorn server + Celery worker), for end-to-end
tests and benchmarks. The caller's environment decides database, broker and data dir."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from app.db import session_scope
from app.gpus.models import WorkerHost
from app.timeutil import as_utc, utcnow
from tests.waits import wait_for
from torchyard.compose.processes import server_argv, worker_argv

REPO = Path(__file__).resolve().parent.parent
# How long a test's client waits for one answer of a live stack. The untimed slow tests run in
# the idle cgroup (bench/cpu_idle.py), where a stack may get no CPU for tens of seconds while
# the timed tests keep both cores busy: a status GET took over 30 s there (stop 52's CI).
# Their waits' own deadlines are minutes; one slow answer is not a failure.
CLIENT_TIMEOUT = 120.0

# Debian's chromium, driven by Playwright for Python (`playwright install` cannot download
# browsers here); without the background-networking flags it floods the closed network.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


class LiveStack:
    def __init__(self, base_url: str, log_dir: Path, admin_password: str) -> None:
        self.base_url = base_url
        self.log_dir = log_dir
        self.admin_password = admin_password

    def client(self, headers: dict[str, str] | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=headers or {}, timeout=CLIENT_TIMEOUT)

    def admin_token(self) -> str:
        r = httpx.post(
            f"{self.base_url}/api/auth/token",
            data={"username": "admin", "password": self.admin_password},
        )
        r.raise_for_status()
        return str(r.json()["access_token"])

    def admin_client(self) -> httpx.Client:
        return self.client({"Authorization": f"Bearer {self.admin_token()}"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_logged(argv: list[str], env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    with open(log_file, "ab") as out:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def own_broker_url(sqlite_file: Path) -> str:
    """A module's own broker, so that the suite's shared worker (no GPUs) never takes its
    tasks: with the pass on Redis, the pass's own test database (TORCHYARD_TEST_REDIS_URL,
    which `purge_broker` empties; a fixed number could be another pass's or session's), else
    a SQLite file of the module's."""
    if os.environ.get("TORCHYARD_BROKER_URL", "").startswith("redis"):
        return os.environ.get("TORCHYARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/3")
    return f"sqla+sqlite:///{sqlite_file}"


def purge_broker(broker_url: str) -> None:
    """Messages left in a shared Redis by an earlier session name runs of another database."""
    if broker_url.startswith("redis"):
        import redis

        redis.Redis.from_url(broker_url).delete("celery")


def wait_healthy(
    base_url: str, server: subprocess.Popen[Any], log_file: Path, timeout: float = 180
) -> None:
    """Until the server answers /api/health. The limit only ends a wait that would never end:
    on a 2-core box at load ~40 (side-by-side streams and other sessions) a server's imports
    alone took over 60 s, failing every test of a stack that was merely slow to start."""

    def healthy() -> bool:
        if server.poll() is not None:
            raise RuntimeError(f"server exited:\n{log_file.read_text()}")
        try:
            return httpx.get(f"{base_url}/api/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(
        healthy, timeout=timeout, every=0.1, what=lambda: f"server up:\n{log_file.read_text()}"
    )


@contextmanager
def running_stack(
    env: dict[str, str], log_dir: Path, *, admin_password: str, concurrency: int = 2
) -> Iterator[LiveStack]:
    """Database must already be at head (prestart). Stops both processes on exit."""
    purge_broker(env.get("TORCHYARD_BROKER_URL", ""))
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    worker = start_logged(worker_argv(concurrency), env, log_dir / "worker.log")
    server = start_logged(server_argv("127.0.0.1", port), env, log_dir / "server.log")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base_url, server, log_dir / "server.log")
        yield LiveStack(base_url, log_dir, admin_password)
    finally:
        stop_process(server)
        stop_process(worker)


def wait_for_hosts(names: tuple[str, ...], since: float, timeout: float = 60) -> None:
    """Until each named worker host has heartbeated (in the suite's database) after `since` (a
    time.monotonic()): the scheduler, and a GPU request's check, see it live from then on."""
    started = utcnow() - timedelta(seconds=time.monotonic() - since)
    seen: set[str] = set()

    def all_seen() -> bool:
        with session_scope() as session:
            seen.clear()
            seen.update(
                h.host
                for h in session.scalars(select(WorkerHost).where(WorkerHost.host.in_(names)))
                if as_utc(h.heartbeat_at) >= started
            )
        return seen == set(names)

    wait_for(
        all_seen, timeout=timeout, every=0.2, what=lambda: f"heartbeats of {set(names) - seen}"
    )


@contextmanager
def fake_gpu_stack(
    env: dict[str, str],
    log_dir: Path,
    *,
    host: str,
    gpus: str,
    concurrency: int,
    admin_password: str,
) -> Iterator[LiveStack]:
    """A server, then one worker host `host` with fake GPUs `gpus` (TORCHYARD_FAKE_GPUS), live
    once it has heartbeated: the GPU scheduling tests' stack (sessions, fair share). The server
    starts first so the host's heartbeat lands in a database at head."""
    purge_broker(env.get("TORCHYARD_BROKER_URL", ""))
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_logged(server_argv("127.0.0.1", port), env, log_dir / "server.log")
    worker = None
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server, log_dir / "server.log")
        since = time.monotonic()
        worker_env = dict(env, TORCHYARD_WORKER_HOST=host, TORCHYARD_FAKE_GPUS=gpus)
        worker = start_logged(worker_argv(concurrency), worker_env, log_dir / "worker.log")
        wait_for_hosts((host,), since)
        yield LiveStack(f"http://127.0.0.1:{port}", log_dir, admin_password)
    finally:
        stop_process(server)
        if worker is not None:
            stop_process(worker)
