"""Issue 31's acceptance for saved views, in a real browser: alice, a member, sets up the
experiment page (a filter, a sort, her columns, grouping, the keys charted and the charts'
smoothing, x axis and log scale) and saves it as a shared view; bob, another member in his own
browser, opens its URL and sees the same state (app/static/saved_views.js over
lib/page_state.js)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import log_in
from tests.conftest import make_user
from tests.factories import make_experiment_runs
from tests.waits import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LRS = [0.3, 0.1, 0.2, 0.05]


def _shown(page: Page) -> list[int]:
    rows = page.locator("table#runs tbody tr[data-run-id]")
    return [int(v) for v in rows.evaluate_all("(rs) => rs.map((r) => r.dataset.runId)")]


def _columns(page: Page) -> list[str]:
    return page.locator("table#runs th[data-summary]").evaluate_all(
        "(ths) => ths.map((t) => t.dataset.summary)"
    )


def _charted(page: Page) -> dict[str, bool]:
    """{key: whether its chart shows} for the experiment page's curves."""
    return page.locator("#experiment-charts .metric-chart").evaluate_all(
        "(ds) => Object.fromEntries(ds.map((d) => [d.dataset.key, d.checkVisibility()]))"
    )


def _charts(page: Page) -> dict:
    return page.evaluate(
        """() => ({
            smoothing: document.getElementById("experiment-curves-smoothing").value,
            log: document.getElementById("experiment-curves-log-scale").checked,
            x: document.getElementById("experiment-curves-x-axis").value,
        })"""
    )


def test_a_shared_view_opened_by_another_member_restores_the_page(
    page: Page, second_page: Page, api: httpx.Client
) -> None:
    base = {"recipe": "tiny_mlp", "params": {"epochs": 1, "lr": 0.1}, "seed": 1}
    exp_id, ids = make_experiment_runs(
        [{**base, "params": {"epochs": 1, "lr": lr}} for lr in LRS],
        per_run=lambda i: {
            "Loss/train": [(1, LRS[i] * 10), (2, LRS[i] * 5)],
            "lr/current": [(1, LRS[i]), (2, LRS[i] / 2)],
        },
        name="browser-saved-views",
    )
    wanted = [run_id for lr, run_id in sorted(zip(LRS, ids, strict=True)) if lr >= 0.1]
    alice, alice_pw, _ = make_user()
    bob, bob_pw, _ = make_user()

    # Alice sets the page up: filter, sort by lr, her columns, the charts' controls.
    log_in(page, alice, alice_pw)
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    expect(page.locator("#views-section[data-ready]")).to_have_count(1)
    page.fill("#runs-filter", "lr>=0.1")
    page.press("#runs-filter", "Enter")
    expect(page.locator("table#runs tbody tr[data-run-id]")).to_have_count(3)
    page.click('table#runs th[data-param="params.lr"] button.sort')
    expect(page.locator('table#runs th[data-param="params.lr"]')).to_have_attribute(
        "aria-sort", "ascending"
    )
    page.click("#runs-columns summary")
    page.uncheck('#runs-column-picker input[data-summary="Loss/train.last"]')
    page.check('#runs-column-picker input[data-summary="Loss/train.min"]')
    expect(page.locator('table#runs th[data-summary="Loss/train.min"]')).to_have_count(1)
    page.locator("#experiment-curves-smoothing").fill("0.6")
    page.check("#experiment-curves-log-scale")
    page.select_option("#experiment-curves-x-axis", "relative")
    expected_charts = {"smoothing": "0.6", "log": True, "x": "relative"}
    assert _charts(page) == expected_charts
    assert _shown(page) == wanted
    # Grouped by lr with the +/- std band (grouping.js: the table's and the curves' one state).
    page.select_option("#runs-group-by", "param:params.lr")
    page.select_option("#experiment-curves-band", "std")
    expect(page.locator("table#runs tr.group-row")).to_have_count(3)
    # Only the loss charted: "lr/current" unticked in the Charts picker.
    page.click("#experiment-curves-keys summary")
    picked = page.locator('#experiment-curves-keys input[data-key="lr/current"]')
    expect(picked).to_be_checked()
    expect(page.locator("#experiment-curves-keys summary")).to_have_text("Charts: all 2")
    picked.uncheck()
    expect(page.locator("#experiment-curves-keys summary")).to_have_text("Charts: 1 of 2")
    wait_for(
        lambda: _charted(page) == {"Loss/train": True, "lr/current": False},
        timeout=20,
        what=lambda: str(_charted(page)),
    )
    page.click("#experiment-curves-keys summary")  # closed again

    page.click("#views summary")
    page.fill("#view-name", "lr >= 0.1, by lr")
    page.check("#view-shared")
    page.click("#view-save")
    expect(page.locator("#views-section[data-saved]")).to_have_count(1)
    view_id = int(page.get_attribute("#views-section", "data-saved") or 0)
    link = page.locator(f'#views-list li[data-view-id="{view_id}"] a.view-open')
    expect(link).to_have_text("lr >= 0.1, by lr")
    url = link.get_attribute("href")
    assert url == f"/experiments/{exp_id}?view={view_id}"
    saved = api.get(f"/api/views/{view_id}")  # the admin sees a shared view too
    assert saved.status_code == 200 and saved.json()["state"]["sort"] == "params.params.lr"
    assert saved.json()["state"]["charts"]["keys"] == ["Loss/train"]

    # Bob opens the link in his own browser: the same rows, order, columns and charts.
    log_in(second_page, bob, bob_pw)
    second_page.goto(url)
    expect(second_page.locator(f'#views-section[data-applied="{view_id}"]')).to_have_count(1)
    expect(second_page.locator("#views-current")).to_contain_text("lr >= 0.1, by lr")
    expect(second_page.locator("#runs-filter")).to_have_value("lr>=0.1")
    wait_for(
        lambda: _shown(second_page) == wanted, timeout=30, what=lambda: str(_shown(second_page))
    )
    expect(second_page.locator('table#runs th[data-param="params.lr"]')).to_have_attribute(
        "aria-sort", "ascending"
    )
    assert _columns(second_page) == _columns(page) == ["Loss/train.min"]
    assert _charts(second_page) == expected_charts
    expect(second_page.locator("#runs-group-by")).to_have_value("param:params.lr")
    expect(second_page.locator("#experiment-curves-band")).to_have_value("std")
    expect(second_page.locator("table#runs tr.group-row")).to_have_count(3)
    # ... and the same charts: the loss only, "lr/current" unticked in his picker.
    wait_for(
        lambda: _charted(second_page) == {"Loss/train": True, "lr/current": False},
        timeout=20,
        what=lambda: str(_charted(second_page)),
    )
    expect(second_page.locator("#experiment-curves-keys summary")).to_have_text("Charts: 1 of 2")
    second_page.click("#experiment-curves-keys summary")
    expect(
        second_page.locator('#experiment-curves-keys input[data-key="lr/current"]')
    ).not_to_be_checked()
    expect(
        second_page.locator('#experiment-curves-keys input[data-key="Loss/train"]')
    ).to_be_checked()
    second_page.click("#experiment-curves-keys summary")
    # Not his: no delete button; a copy of its link for him to pass on.
    second_page.click("#views summary")
    item = second_page.locator(f'#views-list li[data-view-id="{view_id}"]')
    expect(item.locator(".view-delete")).to_have_count(0)
    expect(item.locator(".view-copy")).to_have_count(1)

    # Without ?view= the page is bob's own (the view is not the default) ...
    second_page.goto(f"/experiments/{exp_id}")
    expect(second_page.locator("#views-section[data-ready]")).to_have_count(1)
    expect(second_page.locator("#runs-filter")).to_have_value("")
    wait_for(
        lambda: _charted(second_page) == {"Loss/train": True, "lr/current": True},
        timeout=20,
        what=lambda: str(_charted(second_page)),
    )
    # ... until the experiment's owner (the admin) makes it the default.
    assert api.put(f"/api/views/{view_id}/default", json={"default": True}).status_code == 200
    second_page.reload()
    expect(second_page.locator(f'#views-section[data-applied="{view_id}"]')).to_have_count(1)
    expect(second_page.locator("#runs-filter")).to_have_value("lr>=0.1")
    wait_for(
        lambda: _shown(second_page) == wanted, timeout=30, what=lambda: str(_shown(second_page))
    )

    # Alice deletes her view; its link then says it cannot be opened.
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'#views-list li[data-view-id="{view_id}"] .view-delete').click()
    expect(page.locator(f'#views-list li[data-view-id="{view_id}"]')).to_have_count(0)
    second_page.goto(url)
    expect(second_page.locator("#views-error")).to_contain_text("view " + str(view_id))
