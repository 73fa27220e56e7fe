"""The experiment's own "best" metric chosen on its page (app/static/experiment_best.js): the
owner picks a key and a direction, the page then says it is the experiment's choice and the
experiments list's Best column judges the experiment by it; clearing falls back to the config's
checkpoint metric; a teammate sees the choice but no form (issue 31)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import log_in
from tests.conftest import make_user
from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def test_the_owner_chooses_the_best_metric_on_the_experiment_page(
    page: Page, second_page: Page
) -> None:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1},
        "seed": 1,
        "checkpoints": {"keep_last": 1, "metric": "Acc/val", "mode": "max"},
    }
    losses, accs = [0.5, 0.25, 0.75], [0.5, 0.625, 0.375]
    exp_id, _ = make_experiment_runs(
        [config] * 3,
        per_run=lambda i: {"Loss/val": [(1, losses[i])], "Acc/val": [(1, accs[i])]},
        name="browser-best-metric",
    )
    log_in(page)  # the admin owns the experiment
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#best-key")).to_have_text("Acc/val")
    expect(page.locator("#best-source")).to_have_attribute("data-source", "checkpoints")

    expect(page.locator("#best-form[data-ready]")).to_have_count(1)  # its module has run
    page.click("#best-edit summary")
    page.fill("#best-metric", "")
    page.click("#best-save")
    expect(page.locator("#best-error")).to_contain_text("name a metric key first")
    page.fill("#best-metric", "Loss/val")
    page.select_option("#best-mode", "min")
    with page.expect_navigation():
        page.click("#best-save")
    expect(page.locator("#best-key")).to_have_text("Loss/val")
    expect(page.locator("#best-goal")).to_have_text("min")
    expect(page.locator("#best-source")).to_have_attribute("data-source", "experiment")

    page.goto("/?q=browser-best-metric&owner=everyone")
    cell = page.locator(f'tr[data-experiment-id="{exp_id}"] td.best')
    expect(cell).to_have_attribute("data-metric", "Loss/val")
    expect(cell).to_have_attribute("data-source", "experiment")
    expect(cell).to_contain_text("0.25")

    # A teammate reads the choice; the form is the owner's.
    member, password, _ = make_user()
    log_in(second_page, member, password)
    second_page.goto(f"/experiments/{exp_id}")
    expect(second_page.locator("#best-key")).to_have_text("Loss/val")
    expect(second_page.locator("#best-form")).to_have_count(0)

    # Cleared: the config's checkpoint metric applies again.
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#best-form[data-ready]")).to_have_count(1)
    page.click("#best-edit summary")
    with page.expect_navigation():
        page.click("#best-clear")
    expect(page.locator("#best-key")).to_have_text("Acc/val")
    expect(page.locator("#best-source")).to_have_attribute("data-source", "checkpoints")
    expect(page.locator("#best-clear")).to_be_hidden()
