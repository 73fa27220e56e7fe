"""The run page never claims what the server has not confirmed: "live" shows only while its
event stream is up and the run is running; a killed server makes the page say the connection
is lost and mark the status, attempt and worker as unconfirmed; once the server is back the page
re-reads the run (its attempt moved on meanwhile) and is live again.

A server of its own (tests/own_server.py), killed with SIGKILL and started again on its port;
the run is made running by hand (no worker: nothing else changes it under the test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.runs import lifecycle
from app.timeutil import utcnow
from tests.browser.conftest import VIEWPORT, log_in
from tests.factories import add_run
from tests.own_server import OwnServer, own_server

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LOST = "connection lost — reconnecting…"  # ty.LOST_TEXT (app/static/common.js)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[OwnServer]:
    with own_server(tmp_path) as s:
        yield s


def _start(server: OwnServer, run_id: int) -> None:
    with Session(server.engine) as session:
        assert lifecycle.start(
            session, run_id=run_id, host="box-1", gpu_indices="", started_at=utcnow()
        )
        session.commit()


def test_a_killed_server_takes_live_away_and_its_return_brings_the_confirmed_attempt(
    browser: Browser, server: OwnServer
) -> None:
    password, _ = server.user("alice")
    with Session(server.engine) as session:
        owner = session.scalars(select(User).where(User.username == "alice")).one()
        config = {"recipe": "tiny_mlp", "params": {}, "seed": 1, "max_restarts": 2}
        run_id = add_run(session, owner_id=owner.id, config=config)
        session.commit()
    _start(server, run_id)

    context = browser.new_context(viewport=VIEWPORT, base_url=server.base_url)
    context.set_default_timeout(20_000)
    page: Page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        log_in(page, "alice", password)
        page.goto(f"/runs/{run_id}")
        note = page.locator("#stream-note")
        expect(note).to_have_text("live")
        expect(page.locator("#run-attempt")).to_have_text("1 of 3")
        expect(page.locator("#run-connection")).to_be_hidden()

        server.kill()
        expect(note).to_have_text(LOST)
        expect(note).not_to_have_text("live")
        expect(page.locator("#run-connection")).to_be_visible()
        expect(page.locator("#run-connection")).to_contain_text(LOST)
        for fact in ("#run-status", "#run-attempt", "#run-worker"):
            expect(page.locator(fact)).to_have_attribute("data-stale", "true")
        expect(page.locator("#run-attempt-stale")).to_contain_text("unconfirmed")

        # While the page is cut off, the run's worker is lost and it starts again as attempt 2.
        with Session(server.engine) as session:
            assert lifecycle.requeue(
                session, run_id=run_id, attempt=1, resume_from=None, reason="worker lost"
            )
            session.commit()
        _start(server, run_id)
        page.wait_for_timeout(2500)  # a reconnect attempt or two against the dead port
        expect(note).to_have_text(LOST)
        expect(page.locator("#run-attempt")).to_have_text("1 of 3")  # the last confirmed

        server.start()
        expect(note).to_have_text("live")
        expect(page.locator("#run-attempt")).to_have_text("2 of 3")
        expect(page.locator("#run-connection")).to_be_hidden()
        for fact in ("#run-status", "#run-attempt", "#run-worker"):
            expect(page.locator(fact)).not_to_have_attribute("data-stale", "true")
        expect(page.locator("#run-attempt-stale")).to_be_hidden()
    finally:
        context.close()
    assert not errors, f"uncaught JavaScript errors on the page: {errors}"
