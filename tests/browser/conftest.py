"""Headless Chromium for the web UI tests: Debian's /usr/bin/chromium driven by Playwright for
Python, against the suite's live stack (real uvicorn server, real Celery worker, same data dir
and database as every other test).

Playwright never downloads a browser here (`playwright install` cannot reach its CDN): the
Makefile's `browser` target installs Debian's chromium with apt. A missing browser fails the
suite in CI (CI=true) and skips the browser tests elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, sync_playwright

from tests.conftest import ADMIN_PASSWORD, BASE_DIR
from tests.stack import CHROMIUM, LiveStack, launch_chromium

if TYPE_CHECKING:  # not exported by playwright.sync_api: add_cookies' parameter type
    from playwright._impl._api_structures import SetCookieParam

VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
FAILURES = BASE_DIR / "browser-failures"


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the browser tests, stopped when they are done: Playwright's sync API
    keeps an event loop of its own that the rest of the suite need not live beside."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: `make browser` installs Debian's chromium"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    playwright = sync_playwright().start()
    try:
        chromium = launch_chromium(playwright)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()


@pytest.fixture
def context(browser: Browser, live_stack: LiveStack) -> Iterator[BrowserContext]:
    ctx = browser.new_context(
        viewport=VIEWPORT, base_url=live_stack.base_url, accept_downloads=True
    )
    ctx.set_default_timeout(20_000)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    return report


FAILED = pytest.StashKey[bool]()


@pytest.fixture
def page(context: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A tab; when its test fails, its screenshot and HTML go to the suite's temp dir."""
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    yield p
    if request.node.stash.get(FAILED, False):
        FAILURES.mkdir(parents=True, exist_ok=True)
        stem = FAILURES / request.node.name.replace("/", "_")
        p.screenshot(path=f"{stem}.png", full_page=True)
        Path(f"{stem}.html").write_text(p.content())
        print(f"browser state at the failure: {stem}.png, {stem}.html ({p.url})")
    p.close()
    assert not errors, f"uncaught JavaScript errors on the page: {errors}"


@pytest.fixture
def second_page(browser: Browser, live_stack: LiveStack) -> Iterator[Page]:
    """A second browser with its own cookies, for a second user beside `page`'s; uncaught
    JavaScript errors fail the test."""
    ctx = browser.new_context(viewport=VIEWPORT, base_url=live_stack.base_url)
    ctx.set_default_timeout(20_000)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        ctx.close()
    assert not errors, f"uncaught JavaScript errors on the second browser's pages: {errors}"


def log_in(page: Page, username: str = "admin", password: str = ADMIN_PASSWORD) -> None:
    """Through the real login form; ends on the page the form redirects to."""
    page.goto("/login")
    page.fill("#username", username)
    page.fill("#password", password)
    with page.expect_navigation():
        page.click("form#login-form button[type=submit]")
    assert "/login" not in page.url, page.locator(".form-error").all_inner_texts()
    assert page.locator("#current-user").inner_text().strip() == username


@pytest.fixture(scope="package")
def admin_cookies(browser: Browser, live_stack: LiveStack) -> list[SetCookieParam]:
    """The admin's session cookies, from one login through the real form (log_in) for the
    browser tests: each `admin_page` starts with them rather than logging in again (a login
    page, a post and a redirect: ~1 s a test on a loaded box). The login form itself is
    tests/browser/test_pages.py's subject; no test logs the admin out."""
    ctx = browser.new_context(viewport=VIEWPORT, base_url=live_stack.base_url)
    try:
        log_in(ctx.new_page())
        return [cast("SetCookieParam", dict(cookie)) for cookie in ctx.cookies()]
    finally:
        ctx.close()


@pytest.fixture
def admin_page(page: Page, admin_cookies: list[SetCookieParam]) -> Page:
    """A tab of the admin's session (`page` with the admin's cookies), on no page yet."""
    page.context.add_cookies(admin_cookies)
    return page


@pytest.fixture(scope="module")
def api(live_stack: LiveStack) -> Iterator[httpx.Client]:
    with live_stack.admin_client() as client:
        yield client


def chart_state(page: Page, key: str) -> dict | None:
    """What the page plots for one metric key: points per data-points, per trace, and the max."""
    return page.evaluate(
        """(key) => {
            const el = document.querySelector(`div.metric-chart[data-key="${key}"]`);
            if (!el) return null;
            const traces = (el.data || []).map((t) => (t.y || []).length);
            let max = -Infinity;
            for (const t of el.data || []) {
                for (const v of t.y || []) if (typeof v === "number" && v > max) max = v;
            }
            return {points: Number(el.dataset.points ?? -1),
                    updates: Number(el.dataset.updates ?? -1), traces, max};
        }""",
        key,
    )


def run_status(page: Page) -> str | None:
    return page.get_attribute("#run-status", "data-status")


def launch(api: httpx.Client, config: dict, name: str, **overrides: object) -> dict:
    """An experiment and one queued run of it, through the REST API."""
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={"overrides": overrides})
    assert run.status_code == 201, run.text
    return dict(run.json())


def train_loss_steps(api: httpx.Client, run_id: int) -> list[int]:
    r = api.get(f"/api/runs/{run_id}/metrics", params={"keys": "train/loss"})
    return list(r.json()["series"].get("train/loss", {}).get("step", []))
