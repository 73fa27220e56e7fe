"""`GET /api/ready` (app/ops/ready.py): 200 only while the database and the broker answer.

A real server process whose PostgreSQL and Redis connections go through TCP forwarders
(tests/tcp_proxy.py): stopping one is that service going down, as the server sees it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url

from tests.databases import own_database
from tests.stack import free_port, start_logged, stop_process, wait_healthy
from tests.tcp_proxy import TcpProxy
from torchyard.compose.processes import server_argv

pytestmark = pytest.mark.slow

REDIS = ("127.0.0.1", 6379)


def test_ready_answers_200_with_both_up(client) -> None:
    r = client.get("/api/ready")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "status": "ready",
        "database": {"status": "ok", "error": None},
        "broker": {"status": "ok", "error": None},
    }


def _ready(base: str) -> httpx.Response:
    return httpx.get(f"{base}/api/ready", timeout=15)


@pytest.mark.postgres_only
def test_ready_is_503_while_the_database_or_the_broker_is_down(tmp_path: Path) -> None:
    with own_database("postgresql", tmp_path, "ready") as engine:
        db = TcpProxy(("127.0.0.1", engine.url.port or 5432))
        broker = TcpProxy(REDIS)
        db.start()
        broker.start()
        url = make_url(engine.url).set(port=db.port).render_as_string(hide_password=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
        env |= {
            "TORCHYARD_DATA_DIR": str(tmp_path / "data"),
            "TORCHYARD_DATABASE_URL": url,
            "TORCHYARD_BROKER_URL": f"redis://127.0.0.1:{broker.port}/7",
        }
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = tmp_path / "server.log"
        server = start_logged(server_argv("127.0.0.1", port), env, log)
        try:
            wait_healthy(base, server, log)
            assert _ready(base).status_code == 200
            db.stop()
            r = _ready(base)
            assert r.status_code == 503, r.text
            assert r.json()["database"]["status"] == "unavailable", r.text
            assert r.json()["broker"]["status"] == "ok", r.text
            assert str(db.port) not in r.text  # names the failure, not the URL
            assert httpx.get(f"{base}/api/health").status_code == 200  # the process is up
            db.start()
            deadline = time.monotonic() + 20
            while _ready(base).status_code != 200:
                assert time.monotonic() < deadline, "not ready again after the database came back"
                time.sleep(0.5)
            broker.stop()
            r = _ready(base)
            assert r.status_code == 503, r.text
            assert r.json()["broker"]["status"] == "unavailable", r.text
            assert r.json()["database"]["status"] == "ok", r.text
        finally:
            stop_process(server)
            db.stop()
            broker.stop()
