"""The experiment, sweep and GPU pages' event streams (app/runs/streams/page_events.py): each sends
its page's snapshot at once, again only when it changed, and ends when its subject is over."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import update

from app.auth.models import User
from app.db import session_scope
from app.gpus.estimate import FREE_NOW
from app.metrics.service import ingest_points
from app.runs.models import Run
from app.sweeps.models import Sweep
from tests.conftest import make_user
from tests.factories import add_run
from tests.test_gpu_panel import Made, queued_world
from tests.test_gpu_requests import live_host
from tests.test_pages import new_experiment
from tests.test_sweeps_views import start_sweep

# The streams poll on threads of their own while the test reads them: one rolled-back
# connection cannot serve both (conftest app_sessions), so this module commits.
pytestmark = pytest.mark.committed("event streams poll on threads of their own")


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    yield from queued_world(monkeypatch)


def events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """(event, data) of each event of an open stream, as it arrives."""
    name = None
    for line in lines:
        if line.startswith("event:"):
            name = line.partition(":")[2].strip()
        elif line.startswith("data:") and name is not None:
            yield name, json.loads(line.partition(":")[2])
            name = None


def test_the_experiment_stream_sends_a_digest_when_its_runs_change(client) -> None:
    username, _password, headers = make_user()
    with session_scope() as session:
        owner = session.query(User).filter_by(username=username).one()
        run_id = add_run(session, owner_id=owner.id, status="running")
        experiment_id = session.get(Run, run_id).experiment_id  # type: ignore[union-attr]
    url = f"/api/experiments/{experiment_id}/events"
    with client.stream("GET", url, headers=headers) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        got = events(stream.iter_lines())
        name, first = next(got)
        assert name == "experiment"
        assert first["runs"] == [[run_id, "running", first["runs"][0][2], None]]
        assert first["active_runs"] == 1 and first["sweeps"] == [] and first["live"] is True
        assert first["counts"] == {"running": 1} and first["newest"] == run_id
        with session_scope() as session:  # the run logs points: its progress is news
            ingest_points(session, run_id=run_id, points=[("loss", 5, 0.5, 1000.0)])
        name, second = next(e for e in got if e[0] != "ping")
        assert name == "experiment" and second["runs"][0][3] == 5
        with session_scope() as session:  # it ends
            session.execute(update(Run).where(Run.id == run_id).values(status="succeeded"))
        name, third = next(e for e in got if e[0] != "ping")
        # an ended run leaves the active runs and moves the counts (100,000 runs listed in
        # every event made it 2.7 MB: issue 43)
        assert third["runs"] == [] and third["active_runs"] == 0
        assert third["counts"] == {"succeeded": 1} and third["newest"] == run_id
        assert third["live"] is False
        assert list(got) == []  # nothing active: the stream ended
    r = client.delete(f"/api/experiments/{experiment_id}", headers=headers)
    assert r.status_code == 204, r.text
    assert client.get(url, headers=headers).status_code == 404


def without_estimates(sweep: dict[str, Any]) -> dict[str, Any]:
    runs = [
        {k: v for k, v in run.items() if k not in ("estimated_start", "estimate_basis")}
        for run in sweep.get("runs", [])
    ]
    return {**sweep, "runs": runs}


def test_the_sweep_stream_sends_the_sweep_and_ends_with_it(client) -> None:
    _username, _password, headers = make_user()
    experiment = new_experiment(client, headers, name="swept-live", params={"epochs": 1})
    sweep = start_sweep(client, headers, experiment["id"])
    url = f"/api/sweeps/{sweep['id']}/events"
    with client.stream("GET", url, headers=headers) as stream:
        got = events(stream.iter_lines())
        name, first = next(got)
        # The shape of GET /api/sweeps/{id}; a queued run's estimated start is read at each
        # answer (its GPUs free "now" moves with the clock), so it is left out of the compare.
        assert name == "sweep" and without_estimates(first) == without_estimates(sweep)
        with session_scope() as session:
            session.execute(update(Sweep).where(Sweep.id == sweep["id"]).values(status="cancelled"))
        name, last = next(e for e in got if e[0] != "ping")
        assert name == "sweep" and last["status"] == "cancelled"
        assert list(got) == []  # the stream ended with the sweep
    assert client.get("/api/sweeps/999999999/events", headers=headers).status_code == 404


def test_the_gpu_stream_sends_the_panel_and_its_changes(client) -> None:
    username, _password, headers = make_user()
    with client.stream("GET", "/api/gpus/events", headers=headers) as stream:
        got = events(stream.iter_lines())
        name, first = next(got)
        assert name == "gpus" and set(first) >= {"hosts", "queue", "generated_at"}
        panel = client.get("/api/gpus", headers=headers).json()  # its shape
        assert first["hosts"] == panel["hosts"]
        assert [q["run_id"] for q in first["queue"]] == [q["run_id"] for q in panel["queue"]]
        with session_scope() as session:  # a run waits: the queue is news
            owner = session.query(User).filter_by(username=username).one()
            run_id = add_run(session, owner_id=owner.id, status="queued")
        name, second = next(e for e in got if e[0] != "ping")
        assert name == "gpus" and run_id in [q["run_id"] for q in second["queue"]]
    assert client.get("/api/gpus/events").status_code == 401


def test_the_sweep_stream_does_not_resend_a_sweep_whose_estimates_only_follow_the_clock(
    client, made
) -> None:
    """A queued trial whose GPUs are free now starts "now": its estimated start moves at
    every poll. The stream compared the estimates themselves and resent the sweep each
    second (issue 42's review); it compares their steady marks (app/gpus/estimate.py)."""
    _username, _password, headers = make_user()
    live_host(made, [0])  # a live host: the trials' (CPU) runs may start now
    experiment = new_experiment(client, headers, name="swept-steady", params={"epochs": 1})
    sweep = start_sweep(client, headers, experiment["id"])
    queued = [r for r in sweep["runs"] if r["status"] == "queued"]
    assert queued and all(r["estimate_basis"] == FREE_NOW for r in queued), [
        r["estimate_basis"] for r in sweep["runs"]
    ]
    url = f"/api/sweeps/{sweep['id']}/events"
    with client.stream("GET", url, headers=headers) as stream:
        lines = stream.iter_lines()
        sent, polls = [], 0
        for line in lines:
            if line.startswith("event:"):
                sent.append(line.partition(":")[2].strip())
            elif line == ": keep-alive":
                polls += 1  # one a poll: three polls after the first event
                if polls == 3:
                    break
        assert sent == ["sweep"]
    with session_scope() as session:
        session.execute(update(Sweep).where(Sweep.id == sweep["id"]).values(status="cancelled"))
