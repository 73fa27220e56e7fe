"""The torchyard app served by uvicorn in a thread on a free port, for clients that speak HTTP
themselves (the real ``mlflow`` client): the same database as the test session's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

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
