"""GPU requests no host could ever satisfy are refused (422), and a queued run says why it
waits, in the scheduler's own words, on GET /api/runs/{id} and on its page.

Hosts are made live with the scheduler's own heartbeat (touch_host); a world with no live host
at all is one far in the future, where only the hosts a test heartbeats there are live."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.auth.models import User
from app.db import session_scope
from app.gpus.scheduler import NO_LIVE_HOST
from app.gpus.service import StartOutcome, never_startable, queue_reason, touch_host
from app.runs.models import Checkpoint
from app.settings import get_settings
from app.timeutil import utcnow
from tests.conftest import make_user
from tests.factories import add_run
from tests.test_gpu_panel import (
    NEVER_STARVES,
    TOP,
    TTL,
    Made,
    host,
    queue_run,
    queue_stranded,
    queued_world,
    start_on,
)
from tests.test_pages import login

GPUS_LOC = ["body", "overrides", "resources", "gpus"]


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    """What a test created, removed afterwards (tests/test_gpu_panel.py's `queued_world`)."""
    yield from queued_world(monkeypatch)


def live_host(made: Made, gpus: list[int]) -> str:
    name = host(made)
    with session_scope() as session:
        touch_host(session, host=name, gpus=gpus, now=utcnow())
    return name


def experiment(client, headers, gpus: int) -> int:
    config = {"recipe": "tiny_mlp", "params": {}, "resources": {"gpus": gpus, "nproc": 1}}
    r = client.post("/api/experiments", json={"name": "gpu-req", "config": config}, headers=headers)
    assert r.status_code == 201, r.text  # an experiment is not a run: the hosts may change
    return int(r.json()["id"])


def test_a_run_asking_more_gpus_than_any_live_host_has_is_refused(client, made) -> None:
    _, _, headers = make_user()
    live_host(made, [0, 1])
    exp = experiment(client, headers, 64)
    r = client.post(f"/api/experiments/{exp}/runs", json={}, headers=headers)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == GPUS_LOC and error["input"] == 64
    assert error["msg"].startswith("no live worker host could ever start this run: needs 64 GPUs")
    assert "no host has that many" in error["msg"]
    # The same through an override, and nothing was queued either time.
    exp2 = experiment(client, headers, 0)
    r = client.post(
        f"/api/experiments/{exp2}/runs",
        json={"overrides": {"resources": {"gpus": 64}}},
        headers=headers,
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == GPUS_LOC
    for e in (exp, exp2):
        assert client.get(f"/api/experiments/{e}/runs", headers=headers).json() == []
    # What a live host has is accepted.
    ok = client.post(
        f"/api/experiments/{exp2}/runs",
        json={"overrides": {"resources": {"gpus": 2}}},
        headers=headers,
    )
    assert ok.status_code == 201, ok.text
    made.run_ids.append(ok.json()["id"])


def test_with_no_live_host_a_gpu_run_is_accepted_and_waits_for_a_worker(made) -> None:
    """No live host: nothing to measure the request against (a worker may be starting or
    restarting), so it is queued, and its reason says it waits for a worker."""
    username, _, _ = make_user()
    future = utcnow() + timedelta(days=365 * 60)
    waiting = queue_stranded(made, username, 4)
    cpu = queue_stranded(made, username, 0)
    with session_scope() as session:
        assert never_startable(session, gpus=4, now=future, lease_ttl_seconds=TTL) is None
        for run_id in (waiting, cpu):
            reason = queue_reason(
                session,
                run_id=run_id,
                now=future,
                lease_ttl_seconds=TTL,
                starvation_seconds=NEVER_STARVES,
            )
            assert reason == NO_LIVE_HOST
        # A host comes up with one GPU: now the same request never fits, and says so.
        box = host(made)
        touch_host(session, host=box, gpus=[0], now=future)
        refused = never_startable(session, gpus=4, now=future, lease_ttl_seconds=TTL)
        assert (
            refused == "needs 4 GPUs on one host; no host has that many (the most on one host: 1)"
        )
        assert (
            queue_reason(
                session,
                run_id=waiting,
                now=future,
                lease_ttl_seconds=TTL,
                starvation_seconds=NEVER_STARVES,
            )
            == refused
        )


def test_a_queued_run_says_why_it_waits_in_the_api_and_on_its_page(client, made) -> None:
    """8 GPUs asked for on a box whose 8 are held but one: no other live host of the suite (the
    shared stack's worker declares 2 fake GPUs) can start it either, so it waits."""
    username, password, headers = make_user()
    box = live_host(made, list(range(8)))
    live_host(made, [0, 1])  # as the suite's stack has: 2 free GPUs that do not help
    holder = queue_run(made, username, 7)
    assert start_on(holder, box, list(range(8))).outcome is StartOutcome.STARTED
    waiting = queue_run(made, username, 8, priority=TOP)

    run = client.get(f"/api/runs/{waiting}", headers=headers).json()
    assert run["status"] == "queued"
    assert run["queue_reason"] == "waiting for 8 free GPUs on one host"
    # The GPU page's words, from the same decision.
    panel = client.get("/api/gpus", headers=headers).json()
    (entry,) = [q for q in panel["queue"] if q["run_id"] == waiting]
    assert entry["reason"] == run["queue_reason"]
    # Not queued: no reason.
    assert client.get(f"/api/runs/{holder}", headers=headers).json()["queue_reason"] is None

    login(client, username, password)
    html = client.get(f"/runs/{waiting}").text
    assert '<p id="run-queue-reason" class="queue-reason" role="status">' in html
    assert "waiting for 8 free GPUs on one host" in html
    html = client.get(f"/runs/{holder}").text
    assert '<p id="run-queue-reason" class="queue-reason" role="status" hidden>' in html


def test_a_queued_run_has_its_estimate_in_the_api_and_on_its_page(client, made) -> None:
    """Behind a run of no known length (no progress, time limit or history): no estimate, and
    why, in the API (the run and the list) and on the page; none on a run not queued."""
    username, password, headers = make_user()
    box = live_host(made, list(range(8)))  # 8: no other live host of the suite has as many
    holder = queue_run(made, username, 8)
    assert start_on(holder, box, list(range(8))).outcome is StartOutcome.STARTED
    waiting = queue_run(made, username, 8)
    run = client.get(f"/api/runs/{waiting}", headers=headers).json()
    assert run["estimated_start"] is None
    assert run["estimate_basis"] == f"no estimate: run {holder} has no known length"
    listed = client.get("/api/runs", params={"status": "queued"}, headers=headers).json()
    (entry,) = [r for r in listed["runs"] if r["id"] == waiting]
    assert entry["estimate_basis"] == run["estimate_basis"]
    held = client.get(f"/api/runs/{holder}", headers=headers).json()
    assert held["estimated_start"] is None and held["estimate_basis"] is None
    login(client, username, password)
    html = client.get(f"/runs/{waiting}").text
    assert '<span id="run-estimate">Expected start: <span id="run-estimate-time"></span>' in html
    assert f"no estimate: run {holder} has no known length" in html


def test_resuming_a_run_no_live_host_could_start_is_refused(client, made) -> None:
    """The parent's config asks for more GPUs than any live host has now: a resumed run would
    wait for ever too."""
    username, _, headers = make_user()
    live_host(made, [0])
    with session_scope() as session:
        owner = session.scalars(select(User).where(User.username == username)).one()
        config = {"recipe": "tiny_mlp", "params": {}, "resources": {"gpus": 8, "nproc": 1}}
        run_id = add_run(session, owner_id=owner.id, config=config, status="succeeded")
        session.add(
            Checkpoint(
                run_id=run_id, name="epoch-1.pt", epoch=1, step=10, size_bytes=3, path="epoch-1.pt"
            )
        )
    run_dir = get_settings().run_dir(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "epoch-1.pt").write_bytes(b"pt!")
    body = {"checkpoint": "epoch-1.pt"}
    r = client.post(f"/api/runs/{run_id}/resume", json=body, headers=headers)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "checkpoint"] and error["input"] == 8
    assert "needs 8 GPUs on one host; no host has that many" in error["msg"]
