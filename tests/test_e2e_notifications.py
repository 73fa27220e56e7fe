"""Notifications end to end (issue 20's acceptance): a real server and a real Celery worker
(this module's own stack, with seconds for the users' minutes) run script jobs; a local HTTP
receiver that answers 500 to its first two requests and a local SMTP server (aiosmtpd) get
the finished, failed, NaN and stalled notifications, each once, the 500s retried."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_PASSWORD, BASE_DIR, DATA_DIR, WORKSPACE_DIR, make_user
from tests.notify_receivers import (
    SmtpReceiver,
    WebhookReceiver,
    smtp_receiver,
    wait_until,
    webhook_receiver,
)
from tests.stack import LiveStack, running_stack

pytestmark = pytest.mark.slow

SCRIPT = "notify_probe.py"


@pytest.fixture(scope="module")
def hook() -> Iterator[WebhookReceiver]:
    with webhook_receiver(fail_first=2) as receiver:
        yield receiver


@pytest.fixture(scope="module")
def smtp() -> Iterator[SmtpReceiver]:
    with smtp_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def stack(hook: WebhookReceiver, smtp: SmtpReceiver) -> Iterator[LiveStack]:
    env = dict(
        os.environ,
        # Its own broker: the suite's shared stack (if up) never takes these runs' tasks.
        TORCHYARD_BROKER_URL=f"sqla+sqlite:///{DATA_DIR / 'broker-notify.db'}",
        PYTHONUNBUFFERED="1",
        TORCHYARD_NOTIFY_POLL_SECONDS="0.2",
        TORCHYARD_NOTIFY_MINUTE_SECONDS="1",  # "3 minutes" of the settings last 3 s here
        TORCHYARD_NOTIFY_RETRY_SECONDS="0.3",
        TORCHYARD_NOTIFY_WEBHOOK_ALLOW_NETWORKS="127.0.0.1/32",
        TORCHYARD_SMTP_HOST=smtp.host,
        TORCHYARD_SMTP_PORT=str(smtp.port),
        TORCHYARD_SMTP_FROM="torchyard@test.invalid",
    )
    shutil.copy(Path(__file__).parent / "workspace_scripts" / SCRIPT, WORKSPACE_DIR / SCRIPT)
    with running_stack(env, BASE_DIR / "logs-notify", admin_password=ADMIN_PASSWORD) as s:
        yield s


def launch(api: httpx.Client, experiment_id: int, **params: float) -> int:
    r = api.post(f"/api/experiments/{experiment_id}/runs", json={"overrides": {"params": params}})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_finished_failed_nan_and_stalled_reach_a_webhook_and_smtp(stack, hook, smtp) -> None:
    headers = make_user()[2]
    with stack.client(headers) as api:
        saved = api.put(
            "/api/users/me/notifications",
            json={"webhook_url": hook.url, "email": "owner@example.com", "stalled_minutes": 3},
        )
        assert saved.status_code == 200, saved.text
        config = {"script": SCRIPT, "params": {"stall": 0, "nan": 0, "fail": 0}, "seed": 1}
        exp = api.post("/api/experiments", json={"name": "notify", "config": config}).json()
        ok = launch(api, exp["id"], stall=6, nan=1)  # stalls for 6 s, then NaN, succeeds
        bad = launch(api, exp["id"], fail=1)
        wanted = {(ok, "stalled"), (ok, "non_finite"), (ok, "succeeded"), (bad, "failed")}

        def arrived() -> set[tuple[int, str]]:
            return {(b["run"]["id"], b["event"]) for b in hook.bodies if b.get("run")}

        wait_until(lambda: wanted <= arrived(), 120, f"{wanted} at the webhook")
        subjects = {
            f"[torchyard] run {ok} stalled",
            f"[torchyard] run {ok} metric became NaN/inf",
            f"[torchyard] run {ok} finished",
            f"[torchyard] run {bad} failed",
        }
        wait_until(lambda: subjects <= set(smtp.subjects()), 30, f"{subjects} by e-mail")
        log = api.get("/api/users/me/notifications/deliveries").json()

    events = [(b["run"]["id"], b["event"]) for b in hook.bodies if b.get("run")]
    assert len(events) == len(set(events)), f"a notification went out twice: {events}"
    by_event = {b["event"]: b for b in hook.bodies if b.get("run", {}).get("id") == ok}
    assert by_event["non_finite"]["keys"] == ["train/loss"] and by_event["non_finite"]["step"] == 2
    assert "no new step for 3 minutes" in by_event["stalled"]["text"]
    failed = next(b for b in hook.bodies if b["event"] == "failed")
    assert failed["run"]["error"] == "RuntimeError: the loss diverged", failed
    # The receiver answered 500 twice: those deliveries were retried and then went through.
    assert len(hook.requests) == len(hook.bodies) + 2
    webhook_rows = [d for d in log if d["channel"] == "webhook"]
    assert all(d["status"] == "delivered" for d in webhook_rows), webhook_rows
    assert sum(d["attempts"] - 1 for d in webhook_rows) == 2, webhook_rows
    assert any(d["last_error"] is None and d["attempts"] > 1 for d in webhook_rows)
