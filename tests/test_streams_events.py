"""What the run stream tells a page about its link to the server (app/runs/streams/events.py): a new
attempt is a status event even at the same status (the page shows no attempt the server has not
confirmed), and a quiet stream still sends a `ping` now and then, so a page that hears nothing
knows the server is gone even when no connection reset told it."""

from __future__ import annotations

import json

import anyio
import pytest
from fastapi.sse import ServerSentEvent

from app.db import session_scope
from app.runs.state import lifecycle
from app.runs.streams import events
from app.timeutil import utcnow
from tests.factories import make_run


def _start(run_id: int) -> None:
    with session_scope() as session:
        assert lifecycle.start(
            session, run_id=run_id, host="box-1", gpu_indices="", started_at=utcnow()
        )


def _statuses(cursor: events.StreamCursor) -> list[dict]:
    sent, _ = events.poll(cursor)
    return [json.loads(e.raw_data or "") for e in sent if e.event == "status"]


def test_a_new_attempt_at_the_same_status_is_sent_as_a_status_event() -> None:
    run_id = make_run(status="queued")
    _start(run_id)
    cursor = events.StreamCursor(run_id=run_id)
    (first,) = _statuses(cursor)
    assert (first["status"], first["attempt"]) == ("running", 1)
    assert _statuses(cursor) == []
    # Between two polls its worker is lost and it starts again: still "running", attempt 2.
    with session_scope() as session:
        assert lifecycle.requeue(
            session, run_id=run_id, attempt=1, resume_from=None, reason="worker lost"
        )
    _start(run_id)
    (again,) = _statuses(cursor)
    assert (again["status"], again["attempt"]) == ("running", 2)
    assert _statuses(cursor) == []


def test_a_quiet_stream_sends_a_ping_every_ping_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "PING_SECONDS", 0.4)
    run_id = make_run(status="queued")
    _start(run_id)

    async def until_two_pings() -> list[ServerSentEvent]:
        got: list[ServerSentEvent] = []
        with anyio.fail_after(10):
            async for event in events.stream(run_id, 0.05):
                got.append(event)
                if sum(e.event == "ping" for e in got) == 2:
                    return got
        return got

    got = anyio.run(until_two_pings)
    named = [e.event for e in got if e.event]
    assert named == ["status", "ping", "ping"], named
    # Keep-alive comments in between (a browser's EventSource never shows those to the page).
    assert any(e.comment == "keep-alive" for e in got)
