"""The compare page's run picker (app/static/compare_picker.js), in a real browser: a search
over name, tag and param value (or a condition), each match with its status, key params and
the chosen metric, picked runs kept across searches, usable from the keyboard; and the seed,
which varies by design, left out of the compare legends until "Show seed"."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import update

from app.db import session_scope
from app.runs.models import Run
from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ARCHS = ("resnet50", "vit_small", "mlp")


def _runs(api: httpx.Client) -> list[int]:
    """Three runs of one experiment: arch and lr differ, and so does the seed (drawn per run);
    each logs val/acc; the last is named and tagged."""
    configs = [
        {"recipe": "tiny_mlp", "params": {"arch": arch, "lr": 0.1 / 10**i}, "seed": 1000 + i}
        for i, arch in enumerate(ARCHS)
    ]
    _, ids = make_experiment_runs(
        configs,
        per_run=lambda i: {"val/acc": [(1, 0.5), (2, 0.6 + 0.1 * i)]},
        name="picker",
    )
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == ids[2]).values(name="warmup-trial"))
    r = api.patch(f"/api/runs/{ids[2]}", json={"tags": ["best-picker"]})
    assert r.status_code == 200, r.text
    return ids


def _listed(page: Page) -> list[int]:
    return page.locator("#picker-results li").evaluate_all(
        "(lis) => lis.map((li) => Number(li.dataset.runId))"
    )


def _search(page: Page, text: str) -> None:
    """Type `text` and wait for the answer to that text (the list's `data-searched` is the
    search's number; the status line is written with it). A loaded box can answer an earlier
    search late: the page drops it (it is not the newest), so the wait is for the list the
    text asks for, not for any answer."""
    before = page.get_attribute("#picker-results", "data-searched") or "0"
    page.fill("#picker-search", text)
    page.wait_for_function(
        "([n, text]) => Number(document.getElementById('picker-results').dataset.searched || 0)"
        " > n && document.getElementById('picker-search').value === text"
        " && document.getElementById('picker-results').dataset.searchedFor === text",
        arg=[int(before), text],
    )


def test_search_shows_matches_keeps_picks_and_works_from_the_keyboard(
    admin_page: Page, api: httpx.Client
) -> None:
    ids = _runs(api)
    page = admin_page
    page.goto("/compare")
    expect(page.locator("#picker-search")).to_be_visible()
    expect(page.locator("#picker-results[data-searched]")).to_have_count(1)  # the first list

    # A param's text value: one match, with its status, key params and the metric (val/acc).
    _search(page, "RESNET50")
    assert _listed(page) == [ids[0]]
    row = page.locator(f'#picker-results li[data-run-id="{ids[0]}"]')
    expect(row.locator(".badge.status-succeeded")).to_have_count(1)
    expect(page.locator("#picker-metric")).to_have_value("val/acc")
    expect(row.locator(".picker-metric")).to_have_text("val/acc 0.6")
    expect(page.locator("#picker-status")).to_have_text("1 run found.")

    # Keyboard: ArrowDown into the list, Space ticks the run.
    page.focus("#picker-search")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Space")
    expect(row.locator("input[name=run]")).to_be_checked()

    # A tag: the ticked run stays on top, the match below; the named run shows its name.
    page.keyboard.press("Escape")
    expect(page.locator("#picker-search")).to_be_focused()
    _search(page, "best-picker")
    assert _listed(page) == [ids[0], ids[2]]
    named = page.locator(f'#picker-results li[data-run-id="{ids[2]}"]')
    expect(named.locator(".picker-name")).to_have_text(f"run {ids[2]} warmup-trial")
    expect(named.locator(".badge.tag")).to_have_text("best-picker")
    expect(named.locator(".picker-metric")).to_have_text("val/acc 0.8")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Space")
    expect(named.locator("input[name=run]")).to_be_checked()

    # The name, a number, and a condition in the filter language.
    _search(page, "warmup")
    assert _listed(page) == [ids[0], ids[2]]
    _search(page, "0.01")  # other modules' runs on the suite's server may have lr 0.01 too
    listed = _listed(page)
    assert listed[:2] == [ids[0], ids[2]] and ids[1] in listed[2:], listed
    _search(page, "params.params.arch=vit_small")
    assert _listed(page) == [ids[0], ids[2], ids[1]]
    # A condition the server cannot read: said where the search is, nothing listed but the picks.
    _search(page, "params.params.lr<")
    expect(page.locator("#picker-status")).to_contain_text("No search:")
    expect(page.locator("#picker-status")).to_have_class(re.compile("form-error"))
    assert _listed(page) == [ids[0], ids[2]]

    # Compare the picks: the legends name the params that differ, not the seed (it differs
    # too, by design) until "Show seed" is ticked.
    page.click("#compare-apply")
    page.wait_for_url(f"**/compare?runs={ids[0]},{ids[2]}")
    legend = page.locator("#compare-legend li")
    expect(legend).to_have_count(2)
    expect(legend.nth(0)).to_have_text(re.compile(rf"^run {ids[0]} · arch=resnet50 lr=0\.1 "))
    assert "seed" not in (legend.nth(0).text_content() or "")
    # nor a config difference: its row hidden, a note saying why
    seed_row = page.locator('table#config-diff tr[data-key="seed"]')
    expect(seed_row).to_be_hidden()
    expect(page.locator("#config-diff-seed-note")).to_be_visible()
    expect(page.locator('table#config-diff tr[data-key="params.arch"]')).to_be_visible()
    page.check("#compare-show-seed")
    expect(legend.nth(0)).to_contain_text("seed=1000")
    expect(seed_row).to_be_visible()
    expect(page.locator("#config-diff-show-seed")).to_be_checked()  # every toggle in step
    expect(page.locator("#config-diff-seed-note")).to_be_hidden()
    # the choice is the browser's: it holds after a reload
    page.reload()
    expect(page.locator("#compare-show-seed")).to_be_checked()
    expect(page.locator("#compare-legend li").nth(1)).to_contain_text("seed=1002")
