"""A read request writes nothing to the database (issue 27 item 4): the token check used to
stamp the token's last use itself, and on SQLite that write waited behind ingestion's and
answered 'database is locked'. The use is now noted in memory and written by
app.auth.token_use.flush, off the request path; the tokens list shows it before the flush."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event, select

from app.auth import token_use
from app.auth.models import ApiToken
from app.db import get_engine, session_scope
from app.timeutil import as_utc
from tests.factories import make_run

READS = (
    "/api/me",
    "/api/tokens",
    "/api/experiments",
    "/api/runs",
    "/api/gpus",
    "/api/health",
)
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


@contextmanager
def counted_writes() -> Iterator[list[str]]:
    """Every statement that changes a row, on the app's engine, while the block runs, but for
    the app's periodic work (its threads are named ``periodic:<job>``): a sweep another test
    left running is advanced by it while these requests run, and that is not a request's
    write (the services pass failed on it once)."""
    seen: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if threading.current_thread().name.startswith("periodic:"):
            return
        if statement.lstrip().upper().startswith(WRITES):
            seen.append(statement)

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


def _stored_last_use(token_id: int) -> Any:
    with session_scope() as session:
        return session.scalar(select(ApiToken.last_used_at).where(ApiToken.id == token_id))


def test_get_requests_write_nothing_and_token_use_is_flushed_later(
    client: TestClient, user_headers: dict[str, str]
) -> None:
    token_use.flush()  # other tests' uses: this one counts only its own requests
    run_id = make_run(status="queued")
    reads = (*READS, f"/api/runs/{run_id}", f"/api/runs/{run_id}/metrics")
    with counted_writes() as writes:
        for path in reads:
            r = client.get(path, headers=user_headers)
            assert r.status_code == 200, (path, r.text)
    assert writes == [], writes

    # The use is shown at once (this process's note), stored only by the flush.
    (token,) = client.get("/api/tokens", headers=user_headers).json()
    assert token["last_used_at"] is not None
    assert _stored_last_use(token["id"]) is None
    assert token_use.flush() >= 1
    stored = _stored_last_use(token["id"])
    assert stored is not None
    # A later flush never moves it back.
    token_use.note(token["id"], as_utc(stored).replace(year=2000))
    token_use.flush()
    assert as_utc(_stored_last_use(token["id"])) == as_utc(stored)
