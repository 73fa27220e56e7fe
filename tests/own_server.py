"""A server process of its own, with no worker, over a SQLite database and data dir of its own:
for what the API and the pages say when no worker is alive (the suite's shared stack has one),
and when the server itself goes away and comes back (killed, then started on the same port)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import create_user, issue_token
from app.db import make_engine
from tests.databases import sqlite_at_head
from tests.stack import CLIENT_TIMEOUT, free_port, start_logged, stop_process, wait_healthy
from torchyard.compose.processes import server_argv


class OwnServer:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        url = f"sqlite:///{directory / 'own.db'}"
        sqlite_at_head(directory / "own.db")
        self.engine: Engine = make_engine(url)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")} | {
            "TORCHYARD_DATA_DIR": str(directory / "data"),
            "TORCHYARD_DATABASE_URL": url,
            # Runs are enqueued nowhere: no worker takes them (and none heartbeats).
            "TORCHYARD_BROKER_URL": "memory://",
            "TORCHYARD_WORKSPACE_DIR": str(directory / "workspace"),
            # Runs made "running" by hand stay so: nothing reaps them.
            "TORCHYARD_REAP_INTERVAL_SECONDS": "0",
        }
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = directory / "server.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Starts the server on this server's port (again, after `kill`) and waits for it."""
        self.proc = start_logged(server_argv("127.0.0.1", self.port), self.env, self.log)
        wait_healthy(self.base_url, self.proc, self.log)

    def kill(self) -> None:
        """SIGKILL, as an OOM kill or a crash: open streams are cut, nothing answers."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def user(self, username: str, role: str = "member") -> tuple[str, dict[str, str]]:
        """A user of this server's database: their password and API headers."""
        password = "pw-" + secrets.token_hex(8)
        with Session(self.engine) as session:
            user = create_user(session, username=username, password=password, role=role)
            token = issue_token(session, user=user, ttl_hours=1)
            session.commit()
        return password, {"Authorization": f"Bearer {token}"}

    def client(self, headers: dict[str, str]) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=CLIENT_TIMEOUT)


@contextmanager
def own_server(directory: Path) -> Iterator[OwnServer]:
    server = OwnServer(directory)
    try:
        server.start()
        yield server
    finally:
        if server.proc is not None:
            stop_process(server.proc)
        server.engine.dispose()
