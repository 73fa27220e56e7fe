"""What reaches a page from a job or a user is text, and the pages run under a policy that
refuses inline script: no CSP violation on any main page; a metric key that is an HTML
payload is shown as text (nothing injected); a run with 20,000 keys opens at once (200 charts
in all at first, each drawn as it scrolls into view; each group's next 200 behind a button)."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page

from app.db import session_scope
from tests.browser.conftest import log_in
from tests.factories import add_metric_keys, make_run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SHOW_STEP = 200  # app/static/run.js: charts shown at first, and per group at a time, with many keys

PAYLOAD = (
    '<a href="x" id="injected-link">hi</a><b style="font-size:90px">big</b>'
    '<img src=x onerror="window.__xss=1">'
)
# Reports every CSP violation the page sees into window.__csp (an init script runs outside the
# page's policy).
WATCH_CSP = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.lineNumber}`));
"""


def run_with_keys(keys: list[str]) -> int:
    run_id = make_run(status="succeeded")
    with session_scope() as session:
        add_metric_keys(session, run_id=run_id, keys=keys)
    return run_id


# ReDoc's footer asks its CDN for a logo: refused by the policy, as any other host is (and
# unreachable on an offline box anyway); nothing of the page needs it.
REDOC_LOGO = "cdn.redoc.ly"


def violations(page: Page, console: list[str]) -> list[str]:
    found = list(page.evaluate("() => window.__csp || []"))
    found += [m for m in console if "Content Security Policy" in m]
    return [v for v in found if REDOC_LOGO not in v]


def test_no_page_breaks_the_content_security_policy(page: Page) -> None:
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    page.context.add_init_script(WATCH_CSP)
    run_id = run_with_keys(["train/loss", "val/acc", PAYLOAD])
    page.goto("/login")
    page.wait_for_load_state("networkidle")
    assert violations(page, console) == [], "/login"
    log_in(page)
    experiment_id = page.evaluate(
        f"async () => (await (await fetch('/api/runs/{run_id}')).json()).experiment_id"
    )
    for path in (
        "/",
        f"/experiments/{experiment_id}",
        "/experiments/new",
        f"/runs/{run_id}",
        f"/compare?runs={run_id}",
        "/gpus",
        "/fleet",
        "/account",
        "/admin/users",
        "/docs",
        "/redoc",
    ):
        console.clear()
        response = page.goto(path)
        assert response is not None and response.status == 200, path
        assert response.headers["content-security-policy"], path
        page.wait_for_load_state("networkidle")
        if path.startswith("/runs/"):
            page.wait_for_selector("#charts-loading", state="hidden")
        assert violations(page, console) == [], path


def test_a_metric_key_that_is_html_is_shown_as_text(admin_page: Page) -> None:
    page = admin_page
    run_id = run_with_keys(["train/loss", PAYLOAD])
    page.goto(f"/runs/{run_id}")
    page.wait_for_selector("#charts-loading", state="hidden")
    chart = page.locator("div.metric-chart").filter(has_text="big").first
    chart.wait_for()
    title = chart.locator(".chart-title")
    assert title.text_content() == PAYLOAD  # the key, character for character
    assert page.locator("#injected-link").count() == 0
    assert page.locator("a[href='x'], img[src='x']").count() == 0
    assert page.evaluate("() => window.__xss") is None
    # and on the compare page
    page.goto(f"/compare?runs={run_id}")
    page.wait_for_load_state("networkidle")
    assert page.locator("#injected-link").count() == 0
    assert page.evaluate("() => window.__xss") is None
    assert page.get_by_text(PAYLOAD).count() >= 1


def test_a_run_with_twenty_thousand_keys_opens_at_once(admin_page: Page) -> None:
    page = admin_page
    keys = 20_000
    names = sorted(f"layer{i // 100:03d}/unit{i % 100:02d}" for i in range(keys))  # 200 groups
    run_id = run_with_keys(names)
    started = time.monotonic()
    page.goto(f"/runs/{run_id}")
    page.wait_for_selector("#charts-loading", state="hidden", timeout=60_000)
    opened = time.monotonic() - started
    charts = page.locator("div.metric-chart")
    drawn = page.locator("div.metric-chart:not(.lazy)").count()
    print(f"{keys} keys: page ready in {opened:.2f} s, {charts.count()} boxes, {drawn} drawn")
    assert charts.count() == SHOW_STEP  # the first groups' keys; the rest behind buttons
    assert page.locator(".chart-group").count() == 200  # one per prefix, layer000/ ... layer199/
    assert drawn < 60  # only those near the viewport
    assert opened < 15
    assert page.locator(".chart-group button.show-more:visible").count() == 198
    more = page.locator(".chart-group[data-group='layer002'] button.show-more")
    assert "100 keys not shown" in more.inner_text()
    more.click()
    assert charts.count() == SHOW_STEP + 100
    # scrolling down draws the charts there, in key order
    last = page.locator(".chart-group[data-group='layer002'] div.metric-chart").nth(99)
    assert last.get_attribute("data-key") == names[SHOW_STEP + 99]
    last.scroll_into_view_if_needed()
    page.wait_for_function(
        "(k) => !document.querySelector(`div.metric-chart[data-key='${k}']`)"
        ".classList.contains('lazy')",
        arg=names[SHOW_STEP + 99],
    )
