"""`GET /api/ready`: 200 only when the database and the broker both answer.

`/api/health` says the process is up; a load balancer or compose healthcheck that routes
traffic on it would send users to a server whose database is down. Each check is bounded by
READY_TIMEOUT_SECONDS so a hung dependency makes the answer a 503, not a hang, and says which
dependency failed with the error's type only (a message could carry a URL with a password).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text

from app.db import get_engine

READY_TIMEOUT_SECONDS = 3.0

router = APIRouter(tags=["health"])
# Two checks at a time; a hung one holds its thread until its own timeout, not a request.
_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ready")


class Check(BaseModel):
    status: Literal["ok", "unavailable"]
    error: str | None = None


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    database: Check
    broker: Check


def check_database() -> None:
    with get_engine().connect() as conn:
        conn.execute(text("SELECT 1"))


def check_broker() -> None:
    from app.broker import celery_app

    with celery_app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1, timeout=READY_TIMEOUT_SECONDS)
        conn.default_channel  # noqa: B018  (opening a channel is what talks to the broker)


def _run(check: Callable[[], None]) -> Check:
    future = _pool.submit(check)
    try:
        future.result(timeout=READY_TIMEOUT_SECONDS)
    except FutureTimeout:
        return Check(status="unavailable", error=f"no answer within {READY_TIMEOUT_SECONDS:g} s")
    except Exception as exc:  # noqa: BLE001  (any failure means not ready)
        return Check(status="unavailable", error=type(exc).__name__)
    return Check(status="ok")


@router.get(
    "/api/ready",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "the database or the broker is down"}},
)
def ready() -> JSONResponse:
    """Whether this server can serve: its database and its broker answer."""
    database, broker = _run(check_database), _run(check_broker)
    ok = database.status == broker.status == "ok"
    body = Readiness(status="ready" if ok else "not ready", database=database, broker=broker)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)
