"""The experiment page's pickers find a key its HTML does not hold (issue 43): the page names
its first keys only (app/experiments/views.py PAGE_KEYS); the column picker
(app/static/runs_picker.js) and the chart-key picker (app/static/chart_keys_picker.js) search
GET /api/experiments/{id}/keys as the reader types."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]

NEEDLE = "zz/needle/score"  # after the 60 a/ keys in the pages' key order: not in the page


def _experiment() -> int:
    config = {"recipe": "tiny_mlp", "params": {"epochs": 1, "lr": 0.1}, "seed": 1}

    def series(i: int) -> dict[str, list[tuple[int, float]]]:
        keys = {f"a/k{j:02d}": [(1, float(j))] for j in range(60)}
        return keys | {NEEDLE: [(1, 0.25 + i), (2, 0.5 + i)]}

    exp_id, _ = make_experiment_runs([config, config], per_run=series, name="browser-key-pickers")
    return exp_id


def test_the_column_and_chart_pickers_find_a_key_the_page_does_not_hold(
    admin_page: Page, api: httpx.Client
) -> None:
    exp_id = _experiment()
    page = admin_page
    html = page.request.get(f"/experiments/{exp_id}").text()
    assert "a/k00" in html and "needle" not in html

    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    # The column picker: part of the name, any case; a column of the key found
    page.click("#runs-columns summary")
    search = page.locator("#runs-column-search")
    search.locator("input").fill("NEEDLE/sc")
    expect(search).to_have_attribute("data-searched", "NEEDLE/sc")
    expect(search.locator(".column-found th")).to_have_text([NEEDLE])
    search.locator(f'input[data-summary="{NEEDLE}.last"]').check()
    column = page.locator(f'table#runs th[data-summary="{NEEDLE}.last"]')
    expect(column).to_have_count(1)
    cells = page.locator("table#runs tbody tr[data-run-id] td.num").filter(has_text="1.5")
    expect(cells).to_have_count(1)  # the newest run's last value (0.5 + 1)

    # The chart-key picker: the key found gets its chart
    page.click("#experiment-curves-keys summary")
    box = page.locator("#experiment-curves-keys")
    box.locator(".chart-keys-search").fill("needle")
    expect(box).to_have_attribute("data-searched", "needle")
    found = box.locator(f'.chart-keys-found input[data-key="{NEEDLE}"]')
    expect(found).not_to_be_checked()
    found.check()
    chart = page.locator(f'#experiment-charts .metric-chart[data-key="{NEEDLE}"]')
    expect(chart).to_have_count(1)
    chart.scroll_into_view_if_needed()
    page.wait_for_function(  # drawn: a curve of each run, its two points
        '(k) => { const el = document.querySelector(`div.metric-chart[data-key="${k}"]`);'
        " return Boolean(el && el.data && el.data.length === 2"
        " && el.data.every((t) => (t.y || []).length === 2)); }",
        arg=NEEDLE,
    )
    expect(found).to_be_checked()
    expect(box.locator(f'.chart-keys-list input[data-key="{NEEDLE}"]')).to_be_checked()
