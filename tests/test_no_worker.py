"""With no worker alive (no host heartbeat within `lease_ttl_seconds`), a queued run says so in
the scheduler's own words (app.gpus.scheduler.NO_LIVE_HOST) wherever it is shown: the run as
the API gives it (201, GET one, GET the list), the GPU panel, the run page and the experiment
page. A worker's heartbeat turns it into the scheduler's usual reason; a heartbeat older than
the ttl (the worker died) brings "no worker is running" back.

A server of its own (tests/own_server.py): the suite's shared stack has a live worker."""

from __future__ import annotations

import html
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session

from app.gpus.scheduler import NO_LIVE_HOST
from app.gpus.service import touch_host
from app.timeutil import utcnow
from tests.own_server import OwnServer, own_server

pytestmark = pytest.mark.slow

CONFIG = {"recipe": "tiny_mlp", "params": {"epochs": 1}}


def _heartbeat(server: OwnServer, *, seconds_ago: float) -> None:
    """What a worker's idle host heartbeat writes (worker.runner.heartbeat_host)."""
    with Session(server.engine) as session:
        now = utcnow() - timedelta(seconds=seconds_ago)
        touch_host(session, host="box-1", gpus=[], now=now)
        session.commit()


def test_a_queued_run_says_no_worker_is_running_until_one_heartbeats(tmp_path: Path) -> None:
    with own_server(tmp_path) as server:
        password, headers = server.user("alice")
        with server.client(headers) as api:
            exp = api.post("/api/experiments", json={"name": "waits", "config": CONFIG})
            assert exp.status_code == 201, exp.text
            created = api.post(f"/api/experiments/{exp.json()['id']}/runs")
            assert created.status_code == 201, created.text
            run_id = created.json()["id"]
            assert created.json()["queue_reason"] == NO_LIVE_HOST
            assert "`torchyard up`" in NO_LIVE_HOST and "`torchyard worker`" in NO_LIVE_HOST

            def reason() -> str | None:
                return api.get(f"/api/runs/{run_id}").json()["queue_reason"]

            assert reason() == NO_LIVE_HOST
            listed = api.get("/api/runs", params={"experiment_id": exp.json()["id"]}).json()
            assert [(r["id"], r["queue_reason"]) for r in listed["runs"]] == [
                (run_id, NO_LIVE_HOST)
            ]
            panel = api.get("/api/gpus").json()
            assert panel["hosts"] == []
            assert [(q["run_id"], q["reason"]) for q in panel["queue"]] == [(run_id, NO_LIVE_HOST)]

            with httpx.Client(base_url=server.base_url) as browser:
                r = browser.post(
                    "/login",
                    data={"username": "alice", "password": password},
                    follow_redirects=False,
                )
                assert r.status_code == 303, r.text
                page = browser.get(f"/runs/{run_id}").text
                assert '<p id="run-queue-reason" class="queue-reason" role="status">' in page
                assert html.escape(NO_LIVE_HOST) in page
                page = browser.get(f"/experiments/{exp.json()['id']}").text
                assert f"waiting: {html.escape(NO_LIVE_HOST)}" in page
                assert "No worker is running right now" in browser.get("/gpus").text

            # A worker comes up: the run waits only for it to take the task.
            _heartbeat(server, seconds_ago=0)
            assert reason() == "starting: needs no GPUs, waiting for a free worker slot"
            # Its heartbeats stop (killed): past the lease ttl, no worker is running again.
            _heartbeat(server, seconds_ago=3600)
            assert reason() == NO_LIVE_HOST
            # A run that is not queued has no reason.
            api.post(f"/api/runs/{run_id}/cancel")
            assert reason() is None
