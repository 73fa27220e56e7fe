"""The chart pages' layout and the pages' one time format, in a real browser:
- metric keys are grouped by ANY prefix before their first "/" (`Loss/train` -> `Loss/`), on the
  run page and on the compare page, a group's name shown as text;
- the chart grid has as many columns as the screen holds (4 at 1920 px, 2 at 900 px on the run
  page) and fills the page's width;
- every time on the pages is in the reader's locale and time zone, with UTC in its title;
- a queued run's page says why it waits, in the scheduler's words."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import update

from app.db import session_scope
from app.runs.models import Checkpoint, Run
from tests.browser.conftest import VIEWPORT, log_in
from tests.factories import add_metric_keys, make_run
from tests.stack import LiveStack

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PAYLOAD_GROUP = '<img src=x id="injected" onerror="window.__xss=1">'
KEYS = [
    "Loss/train",
    "Loss/val",
    "Accuracy/val",
    "train/loss",
    "a/b/c",
    "lr",
    "/leading-slash",
    "sys/cpu_percent",
    f"{PAYLOAD_GROUP}/x",
]
# Groups in name order (case aside), then the keys without a prefix ("other"), then the
# worker's system series (sys/) below the training charts, titled "System".
EXPECTED_GROUPS = [
    [PAYLOAD_GROUP, f"{PAYLOAD_GROUP}/", [f"{PAYLOAD_GROUP}/x"]],
    ["a", "a/", ["a/b/c"]],
    ["Accuracy", "Accuracy/", ["Accuracy/val"]],
    ["Loss", "Loss/", ["Loss/train", "Loss/val"]],
    ["train", "train/", ["train/loss"]],
    ["", "other", ["/leading-slash", "lr"]],
    ["sys", "System", ["sys/cpu_percent"]],
]
# Each chart's x axis title (the layout chart.js keeps on its element).
X_TITLES = """() => Object.fromEntries([...document.querySelectorAll(".metric-chart")]
    .filter((c) => c.layout).map((c) => [c.dataset.key, c.layout.xaxis.title.text]))"""
GROUPS = """() => [...document.querySelectorAll(".chart-group")].map((g) => [
    g.dataset.group, g.querySelector("h3").textContent,
    [...g.querySelectorAll(".metric-chart")].map((c) => c.dataset.key)])"""
# The chart grids' column count (the first grid), its width, and the page's content width.
COLUMNS = """() => {
    const grid = document.querySelector(".chart-grid");
    const main = document.querySelector("main");
    const pad = parseFloat(getComputedStyle(main).paddingLeft)
        + parseFloat(getComputedStyle(main).paddingRight);
    return {columns: getComputedStyle(grid).gridTemplateColumns.split(" ").length,
            grid: grid.getBoundingClientRect().width, content: main.clientWidth - pad};
}"""


def run_with_keys(keys: list[str]) -> int:
    run_id = make_run(status="succeeded")
    with session_scope() as session:
        add_metric_keys(session, run_id=run_id, keys=keys)
    return run_id


def open_run(page: Page, run_id: int) -> None:
    page.goto(f"/runs/{run_id}")
    page.wait_for_selector("#charts-loading", state="hidden")
    page.wait_for_selector(".chart-group .metric-chart")


def test_charts_are_grouped_by_any_key_prefix_on_the_run_and_compare_pages(
    admin_page: Page,
) -> None:
    page = admin_page
    run_id = run_with_keys(KEYS)
    open_run(page, run_id)
    assert page.evaluate(GROUPS) == EXPECTED_GROUPS
    # A system series' x is seconds since the run started, not a training step.
    titles = page.evaluate(X_TITLES)
    assert titles["sys/cpu_percent"] == "seconds since start" and titles["Loss/val"] == "step"
    page.goto(f"/compare?runs={run_id}")
    page.wait_for_selector(".chart-group .metric-chart")
    assert page.evaluate(GROUPS) == EXPECTED_GROUPS
    page.locator(".metric-chart[data-key='sys/cpu_percent']").scroll_into_view_if_needed()
    page.wait_for_function(
        "() => document.querySelector(\".metric-chart[data-key='sys/cpu_percent']\").layout"
    )
    titles = page.evaluate(X_TITLES)
    assert titles["sys/cpu_percent"] == "seconds since start"
    # A group's name is text: nothing of it became an element.
    assert page.locator("#injected").count() == 0
    assert page.evaluate("() => window.__xss") is None


@pytest.mark.parametrize(("width", "run_columns", "compare_columns"), [(1920, 4, 4), (900, 2, 1)])
def test_the_chart_columns_follow_the_screen_width(
    admin_page: Page, width: int, run_columns: int, compare_columns: int
) -> None:
    page = admin_page
    page.set_viewport_size({"width": width, "height": 1000})
    run_id = run_with_keys([f"Loss/k{i}" for i in range(8)])
    open_run(page, run_id)
    layout = page.evaluate(COLUMNS)
    assert layout["columns"] == run_columns, layout
    assert layout["grid"] >= layout["content"] - 1, layout  # the whole width, no empty third
    page.goto(f"/compare?runs={run_id}")
    page.wait_for_selector(".chart-group .metric-chart")
    layout = page.evaluate(COLUMNS)
    assert layout["columns"] == compare_columns, layout
    # The charts fill what the run picker leaves.
    picker = page.locator("#compare-picker").bounding_box()
    assert picker is not None
    assert layout["grid"] >= layout["content"] - picker["width"] - 21, layout


STARTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
FINISHED = datetime(2026, 1, 2, 3, 34, 5, tzinfo=UTC)
# de-DE, medium date and short time, in Tokyo (UTC+9).
GERMAN = re.compile(r"\d\d\.\d\d\.\d{4}, \d\d:\d\d")
ISO_LIKE = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d")
TIMES = """() => [...document.querySelectorAll("time")].map((t) => [t.textContent, t.title])"""


def test_times_show_in_the_readers_locale_with_utc_in_the_title(
    browser: Browser, live_stack: LiveStack
) -> None:
    run_id = make_run(status="succeeded")
    with session_scope() as session:
        session.execute(
            update(Run).where(Run.id == run_id).values(started_at=STARTED, finished_at=FINISHED)
        )
        session.add(
            Checkpoint(
                run_id=run_id,
                name="epoch-1.pt",
                epoch=1,
                step=10,
                size_bytes=10,
                path="checkpoints/epoch-1.pt",
                created_at=FINISHED,
            )
        )
        experiment_id = session.get(Run, run_id).experiment_id  # type: ignore[union-attr]
    ctx = browser.new_context(
        viewport=VIEWPORT,
        base_url=live_stack.base_url,
        locale="de-DE",
        timezone_id="Asia/Tokyo",
    )
    ctx.set_default_timeout(20_000)
    try:
        page = ctx.new_page()
        log_in(page)
        page.goto(f"/runs/{run_id}")
        page.wait_for_selector("#checkpoints tbody tr")
        assert page.locator("#run-started-time").inner_text() == "02.01.2026, 12:04"
        assert page.locator("#run-started-time").get_attribute("title") == (
            "2026-01-02 03:04:05 UTC"
        )
        assert page.locator("#run-finished-time").inner_text() == "02.01.2026, 12:34"
        created = page.locator("#checkpoints tbody tr time")
        assert created.inner_text() == "02.01.2026, 12:34"
        assert created.get_attribute("title") == "2026-01-02 03:34:05 UTC"
        for path in ("/", f"/experiments/{experiment_id}", "/gpus", "/account", "/admin/users"):
            page.goto(path)
            page.wait_for_load_state("networkidle")
            times = page.evaluate(TIMES)
            assert times, path
            for text, title in times:
                assert GERMAN.fullmatch(text), (path, text)
                assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", title), (path, title)
            # No time left in another format (the pages mixed UTC and the locale's).
            assert not ISO_LIKE.search(page.locator("main").inner_text()), path
        page.goto(f"/experiments/{experiment_id}")
        assert "02.01.2026, 12:04" in page.locator("main").inner_text()
    finally:
        ctx.close()


def test_a_queued_run_page_says_why_it_waits_until_it_does_not(admin_page: Page, api) -> None:
    """The scheduler's reason on the page (refreshed while queued), gone once it is not."""
    page = admin_page
    run_id = make_run(
        config={"recipe": "tiny_mlp", "params": {}, "seed": 1, "resources": {"gpus": 0}},
        status="queued",
    )  # inserted directly: no task, so it stays queued until cancelled
    page.goto(f"/runs/{run_id}")
    reason = page.locator("#run-queue-reason")
    expect(reason).to_be_visible()
    expected = api.get(f"/api/runs/{run_id}").json()["queue_reason"]
    assert expected
    expect(page.locator("#run-queue-reason-text")).to_have_text(expected)
    assert api.post(f"/api/runs/{run_id}/cancel").status_code == 202
    expect(page.locator("#run-status")).to_have_attribute("data-status", "cancelled")
    expect(reason).to_be_hidden()
