"""The run page never claims what the server has not confirmed: "live" shows only while its
event stream is up and the run is running; a killed server makes the page say the connection
is lost and mark the status, attempt and worker as unconfirmed; once the server is back the page
re-reads the run (its attempt moved on meanwhile) and is live again. The experiment page (its
runs table and curves poll) and the GPU panel say the same while the server is gone.

A server of its own (tests/own_server.py), killed with SIGKILL and started again on its port;
the run is made running by hand (no worker: nothing else changes it under the test). One server
for the module: each test has a user and a run of its own on it, and the first leaves it started
again (its subject), as the second needs it."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.runs.models import Run
from app.runs.state import lifecycle
from app.timeutil import utcnow
from tests.browser.conftest import VIEWPORT, log_in
from tests.factories import add_run
from tests.own_server import OwnServer, own_server

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LOST = "connection lost — reconnecting…"  # ty.LOST_TEXT (app/static/common.js)


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnServer]:
    with own_server(tmp_path_factory.mktemp("own-server")) as s:
        yield s


@pytest.fixture
def server(module_server: OwnServer) -> OwnServer:
    """The module's server, up: started again where a failed test left it killed."""
    if module_server.proc is None or module_server.proc.poll() is not None:
        module_server.start()
    return module_server


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
        experiment_id = session.get(Run, run_id).experiment_id  # type: ignore[union-attr]
        session.commit()
    _start(server, run_id)

    context = browser.new_context(viewport=VIEWPORT, base_url=server.base_url)
    context.set_default_timeout(20_000)
    page: Page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        log_in(page, "alice", password)
        experiment_page = context.new_page()
        experiment_page.on("pageerror", lambda exc: errors.append(str(exc)))
        experiment_page.goto(f"/experiments/{experiment_id}")
        expect(experiment_page.locator("#experiment-curves-status")).to_contain_text("live")
        gpu_page = context.new_page()
        gpu_page.on("pageerror", lambda exc: errors.append(str(exc)))
        gpu_page.goto("/gpus")
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
        # The experiment page polls while a run is active; the GPU panel every 2.5 s.
        curves = experiment_page.locator("#experiment-curves-status")
        expect(curves).to_contain_text(LOST)
        expect(curves).not_to_contain_text("live while")
        expect(experiment_page.locator("#runs-link")).to_contain_text(LOST)
        badge = experiment_page.locator(f'#runs tr[data-run-id="{run_id}"] .badge')
        expect(badge).to_have_attribute("data-stale", "true")
        expect(gpu_page.locator("#gpus-updated")).to_contain_text(LOST)
        expect(gpu_page.locator("#gpu-queue")).to_have_attribute("data-stale", "true")

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
        expect(curves).to_contain_text("live while a run is active")
        expect(experiment_page.locator("#runs-link")).to_be_hidden()
        expect(gpu_page.locator("#gpus-updated")).to_contain_text("updated")
        expect(gpu_page.locator("#gpus-updated")).not_to_contain_text(LOST)
        expect(gpu_page.locator("#gpu-queue")).not_to_have_attribute("data-stale", "true")
    finally:
        context.close()
    assert not errors, f"uncaught JavaScript errors on the page: {errors}"


def test_a_frozen_server_that_resets_nothing_takes_live_away_too(
    browser: Browser, server: OwnServer
) -> None:
    """SIGSTOP: the server's connections stay open and silent (as behind a cut network): the
    page hears no ping for 30 s (the page's clock is run forward) and stops saying live."""
    password, _ = server.user("bob")
    with Session(server.engine) as session:
        owner = session.scalars(select(User).where(User.username == "bob")).one()
        run_id = add_run(session, owner_id=owner.id, config={"recipe": "tiny_mlp", "params": {}})
        session.commit()
    _start(server, run_id)
    context = browser.new_context(viewport=VIEWPORT, base_url=server.base_url)
    context.set_default_timeout(20_000)
    page: Page = context.new_page()
    page.clock.install()
    assert server.proc is not None
    try:
        log_in(page, "bob", password)
        page.goto(f"/runs/{run_id}")
        note = page.locator("#stream-note")
        expect(note).to_have_text("live")
        server.proc.send_signal(signal.SIGSTOP)
        page.clock.run_for(40_000)
        expect(note).to_have_text(LOST)
        expect(page.locator("#run-status")).to_have_attribute("data-stale", "true")
        server.proc.send_signal(signal.SIGCONT)
        page.clock.run_for(5_000)  # the reconnect's timer
        expect(note).to_have_text("live")
    finally:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGCONT)
        context.close()
