"""The torchyard app served by uvicorn in a thread on a free port, for clients that speak HTTP
themselves (the real ``mlflow`` client): the same database as the test session's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mlflow
import pytest
import uvicorn

from tests.conftest import make_user
from tests.stack import free_port
from tests.waits import wait_for


@contextmanager
def serving(app: Any) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_for(
        lambda: server.started or not thread.is_alive(), timeout=60, what="the test server's start"
    )
    if not server.started:
        raise RuntimeError("the test server did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def mlflow_member(server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A new member whose token the MLflow client sends (MLFLOW_TRACKING_TOKEN), the client
    pointed at ``server`` with no retries; the member's headers, for plain HTTP."""
    _name, _password, headers = make_user()
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", headers["Authorization"].split()[1])
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    mlflow.set_tracking_uri(server)
    return headers
