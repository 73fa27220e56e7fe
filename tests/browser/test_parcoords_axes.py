"""The parallel coordinates' axes (app/static/parcoords_axes.js) on the experiment page, in a
real browser: by default the params that differ and the metric, not the seed (it differs by
design; nor is it a runs-table column) until "Show seed"; the reader adds, removes and moves
axes, kept per experiment in this browser, and goes back to the default."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _axes(page: Page) -> list[str]:
    return page.locator("#parcoords g.pc-axis").evaluate_all("(gs) => gs.map((g) => g.dataset.key)")


def _headers(page: Page) -> list[str]:
    return page.locator("table#runs thead th").evaluate_all(
        "(ths) => ths.map((th) => th.textContent.trim())"
    )


def test_seed_hidden_by_default_and_axes_chosen_by_the_reader(admin_page: Page) -> None:
    configs = [
        {"recipe": "tiny_mlp", "params": {"epochs": 1, "lr": lr, "opt": opt}, "seed": seed}
        for lr, opt, seed in [(0.1, "adam", 3_900_000_000), (0.01, "sgd", 17), (0.001, "adam", 5)]
    ]
    exp_id, _ = make_experiment_runs(
        configs, per_run=lambda i: {"val/acc": [(1, 0.5 + 0.1 * i)]}, name="parcoords-axes"
    )
    page = admin_page
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#parcoords[data-renders]")).to_have_count(1)
    default = ["params.lr", "params.opt", "val/acc.max"]
    assert _axes(page) == default  # seed differs, by design: no axis running 0-4e9
    page.wait_for_function("() => document.querySelectorAll('table#runs thead th').length > 3")
    assert "seed" not in _headers(page) and "params.lr" in _headers(page)

    # "Show seed": a column in the table and an axis (the default axes follow it).
    page.check("#runs-show-seed")
    page.wait_for_function("() => document.querySelector('#parcoords g.pc-axis[data-key=seed]')")
    assert _axes(page) == ["params.lr", "params.opt", "seed", "val/acc.max"]
    assert "seed" in _headers(page)
    page.uncheck("#runs-show-seed")
    page.wait_for_function("() => !document.querySelector('#parcoords g.pc-axis[data-key=seed]')")
    assert "seed" not in _headers(page)

    # Remove an axis, add one that does not differ, move one: from the keyboard's controls.
    page.click("#parcoords details.pc-axes summary")
    axes_list = page.locator("#parcoords .pc-axes-list")
    axes_list.locator('li[data-axis="p:params.opt"] input[type=checkbox]').uncheck()
    page.wait_for_function(
        "() => !document.querySelector('#parcoords g.pc-axis[data-key=\"params.opt\"]')"
    )
    assert _axes(page) == ["params.lr", "val/acc.max"]
    axes_list.locator('li[data-axis="p:params.epochs"] input[type=checkbox]').check()
    page.wait_for_function("() => document.querySelectorAll('#parcoords g.pc-axis').length === 3")
    assert _axes(page) == ["params.lr", "val/acc.max", "params.epochs"]
    move = axes_list.locator('li[data-axis="p:params.epochs"] button[data-act=left]')
    expect(move).to_have_attribute("aria-label", "Move epochs left")
    move.click()
    page.wait_for_function(
        "() => document.querySelectorAll('#parcoords g.pc-axis')[1].dataset.key === 'params.epochs'"
    )
    assert _axes(page) == ["params.lr", "params.epochs", "val/acc.max"]
    # the focus stays on the control used, across the redraw
    expect(
        axes_list.locator('li[data-axis="p:params.epochs"] button[data-act=left]')
    ).to_be_focused()

    # Kept per experiment in this browser; "Default axes" goes back.
    page.reload()
    expect(page.locator("#parcoords[data-renders]")).to_have_count(1)
    page.wait_for_function("() => document.querySelectorAll('#parcoords g.pc-axis').length === 3")
    assert _axes(page) == ["params.lr", "params.epochs", "val/acc.max"]
    page.click("#parcoords details.pc-axes summary")
    page.click("#parcoords .pc-axes-default")
    page.wait_for_function(
        "() => document.querySelectorAll('#parcoords g.pc-axis')[1].dataset.key === 'params.opt'"
    )
    assert _axes(page) == default
