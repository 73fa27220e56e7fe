"""Resuming the live stream: every metrics and log event carries an id, and a client that
reconnects with it as Last-Event-ID gets exactly what it missed, nothing twice."""

from __future__ import annotations

import json
import time

import pytest
from sqlalchemy import update

from app.auth.models import User
from app.db import session_scope
from app.metrics.service import NEW_POINTS_LIMIT, ingest_points
from app.runs.models import Run
from app.settings import get_settings
from tests.conftest import make_user
from tests.factories import add_run

# Its streams poll on threads of their own while the test reads them: one rolled-back
# connection cannot serve both (conftest app_sessions), so this module commits.
pytestmark = pytest.mark.committed("event streams poll on threads of their own")


def parse(body: str) -> list[dict]:
    """The SSE text as a list of {event, id, data}."""
    events = []
    for block in body.split("\n\n"):
        fields: dict = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            if name in ("event", "id", "data"):
                fields[name] = value.removeprefix(" ")
        if "event" in fields:
            fields["data"] = json.loads(fields["data"])
            events.append(fields)
    return events


def finished_run_with_points(n: int, log: bytes) -> tuple[int, dict[str, str]]:
    username, _password, headers = make_user()
    with session_scope() as session:
        owner = session.query(User).filter_by(username=username).one()
        run_id = add_run(session, owner_id=owner.id, status="succeeded")
        ingest_points(
            session,
            run_id=run_id,
            points=[("train/loss", step, 1.0 / step, 1000.0 + step) for step in range(1, n + 1)],
        )
        session.execute(update(Run).where(Run.id == run_id).values(status="succeeded"))
    run_dir = get_settings().run_dir(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "output.log").write_bytes(log)
    return run_id, headers


def received_steps(events: list[dict]) -> list[int]:
    return [
        step
        for e in events
        if e["event"] == "metrics"
        for step in e["data"]["series"]["train/loss"]["step"]
    ]


def test_reconnecting_with_last_event_id_resumes_exactly_after_that_event(client) -> None:
    total = NEW_POINTS_LIMIT + 5_000  # two metrics events: a limit's worth, then the rest
    run_id, headers = finished_run_with_points(total, b"line one\nline two\n")
    first = parse(client.get(f"/api/runs/{run_id}/events", headers=headers).text)
    metrics = [e for e in first if e["event"] == "metrics"]
    assert len(metrics) == 2 and all(e.get("id") for e in metrics)
    assert received_steps(first) == list(range(1, total + 1))

    # The connection dropped right after the first event: resume from its id.
    again = parse(
        client.get(
            f"/api/runs/{run_id}/events",
            headers={**headers, "Last-Event-ID": metrics[0]["id"]},
        ).text
    )
    assert received_steps(again) == list(range(NEW_POINTS_LIMIT + 1, total + 1))
    # The first event's id was taken before any log was sent: the log comes in full.
    assert "".join(e["data"]["text"] for e in again if e["event"] == "log") == (
        "line one\nline two\n"
    )
    assert again[-1]["event"] == "status" and again[-1]["data"]["status"] == "succeeded"

    # After the last event: nothing is sent twice, the status closes the stream.
    last_id = [e for e in first if e.get("id")][-1]["id"]
    tail = parse(
        client.get(f"/api/runs/{run_id}/events", headers={**headers, "Last-Event-ID": last_id}).text
    )
    assert [e["event"] for e in tail] == ["status"]


def test_last_event_id_wins_over_the_query_a_reconnecting_page_repeats(client) -> None:
    run_id, headers = finished_run_with_points(10, b"")
    events = parse(client.get(f"/api/runs/{run_id}/events", headers=headers).text)
    event_id = next(e["id"] for e in events if e["event"] == "metrics")
    repeat = parse(
        client.get(
            f"/api/runs/{run_id}/events",
            params={"after": json.dumps({"train/loss": 2})},
            headers={**headers, "Last-Event-ID": event_id},
        ).text
    )
    assert received_steps(repeat) == []


def test_a_foreign_last_event_id_is_a_clear_422(client) -> None:
    run_id, headers = finished_run_with_points(3, b"")
    for bad in ("nonsense", "e30", "eyJzIjp7fSwibCI6LTF9"):  # junk, {}, {"s":{},"l":-1}
        r = client.get(f"/api/runs/{run_id}/events", headers={**headers, "Last-Event-ID": bad})
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["detail"][0]["loc"] == ["header", "last-event-id"]


def test_an_open_stream_ends_once_its_token_is_revoked(client, monkeypatch) -> None:
    """A stream outlives the request that opened it: it re-checks its token and stops sending
    a run's data once the token is revoked (a reconnect then gets 401)."""
    from app.auth.models import ApiToken
    from app.timeutil import utcnow

    monkeypatch.setattr(get_settings(), "sse_auth_recheck_seconds", 0.3)
    username, _password, headers = make_user()
    with session_scope() as session:
        owner = session.query(User).filter_by(username=username).one()
        run_id = add_run(session, owner_id=owner.id, status="running")  # its stream never ends
    seen: list[str] = []
    with client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as stream:
        for line in stream.iter_lines():
            seen.append(line)
            if line.startswith(":") and len(seen) < 50:  # a keep-alive: the stream is open
                with session_scope() as session:
                    session.query(ApiToken).filter_by(user_id=owner.id).update(
                        {"revoked_at": utcnow()}
                    )
            if line.startswith("data:") and "revoked" in line:
                break
    assert any(line == "event: error" for line in seen), seen
    assert any("token revoked at" in line for line in seen), seen
    again = client.get(f"/api/runs/{run_id}/events", headers=headers)
    assert again.status_code == 401 and "revoked" in again.json()["detail"]


def test_a_stream_behind_reads_on_without_waiting_the_poll_interval(client, monkeypatch) -> None:
    """A viewer behind a flooding run got a limit's worth of points per poll interval, at
    most (bench/flood.py): a poll that stops at the limit is followed at once by the next."""
    interval = 3.0
    monkeypatch.setattr(get_settings(), "sse_poll_seconds", interval)
    total = 3 * NEW_POINTS_LIMIT + 5  # four metrics events
    run_id, headers = finished_run_with_points(total, b"")
    started = time.monotonic()
    events = parse(client.get(f"/api/runs/{run_id}/events", headers=headers).text)
    took = time.monotonic() - started
    assert received_steps(events) == list(range(1, total + 1))
    assert [e["data"]["status"] for e in events if e["event"] == "status"] == ["succeeded"]
    # One interval: after the last points, the quiet sweep that ends the stream. Before,
    # one more after each of the three full polls (12 s).
    assert took < 2.5 * interval, took
