"""1,000 runs on one chart stay legible (issue 43): the experiment page and the compare page
overlay all 1,000; the curve under the cursor, or the run hovered in the legend, is drawn at
full strength and every other one dimmed (app/static/chart.js focus, overlay.js legend);
grouping by a param draws one mean and band per group instead. Few points per run, so the
data is made in seconds."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]

RUNS = 1_000
LRS = (0.1, 0.03, 0.01, 0.003, 0.001)
KEY = "train/loss"
CHART = f'#experiment-charts .metric-chart[data-key="{KEY}"]'
STATE = """(sel) => {
    const el = document.querySelector(sel);
    if (!el || !el.data) return null;
    return {traces: el.data.length, focused: el.dataset.focused || null,
            dimmed: Number(el.dataset.dimmed || 0)};
}"""

# The page's requests for its runs list of up to 1,000 (Resource Timing).
LISTS = """() => performance.getEntriesByType("resource").filter((e) => {
    const url = new URL(e.name);
    return url.pathname === "/api/runs" && url.searchParams.get("limit") === "1000";
}).length"""


def points(i: int) -> dict[str, list[tuple[int, float]]]:
    """Run 0 far above the others (100), the rest packed between 0 and 1."""
    value = 100.0 if i == 0 else (i % 97) / 97
    return {KEY: [(s, value) for s in range(1, 6)]}


def wait_traces(page: Page, sel: str, n: int) -> None:
    page.wait_for_function(
        "([sel, n]) => { const el = document.querySelector(sel); "
        "return el && el.dataset.drawnAt && el.data && el.data.length === n; }",
        arg=[sel, n],
        timeout=60_000,
    )


def hover_top_curve(page: Page, sel: str) -> dict:
    """Move down the chart's middle from its top until a curve is highlighted."""
    box = page.locator(sel).locator(".u-over").bounding_box()
    assert box is not None
    x = box["x"] + box["width"] / 2
    for dy in range(0, int(box["height"] / 2), 3):
        page.mouse.move(x, box["y"] + dy)
        state = page.evaluate(STATE, sel)
        if state["focused"]:
            return state
    raise AssertionError(f"no curve highlighted: {page.evaluate(STATE, sel)}")


def test_a_thousand_runs_hovered_run_highlighted_others_dimmed_and_grouped(
    admin_page: Page,
) -> None:
    configs = [
        {"recipe": "tiny_mlp", "params": {"lr": LRS[i % len(LRS)]}, "seed": i} for i in range(RUNS)
    ]
    exp_id, ids = make_experiment_runs(configs, per_run=points, name="browser-thousand")
    page = admin_page
    page.goto(f"/experiments/{exp_id}#experiment-curves")
    wait_traces(page, CHART, RUNS)
    assert page.evaluate(STATE, CHART)["focused"] is None
    # The 1,000 runs were listed once: by experiment_prefetch.js as the page loaded, the
    # answer taken by the curves (and not asked again when they mounted).
    assert page.evaluate(LISTS) == 1

    # The cursor on the top curve: run 0's, the 999 others dimmed.
    page.locator(CHART).scroll_into_view_if_needed()
    state = hover_top_curve(page, CHART)
    assert state == {"traces": RUNS, "focused": str(ids[0]), "dimmed": RUNS - 1}, state
    page.mouse.move(0, 0)  # off the chart: all drawn again
    page.wait_for_function(f"() => !({STATE})('{CHART}').focused")
    assert page.evaluate(STATE, CHART)["dimmed"] == 0

    # A run hovered in the legend: its curve highlighted.
    legend = page.locator(f'#experiment-curves-legend li[data-run-id="{ids[500]}"]')
    expect(page.locator("#experiment-curves-legend li")).to_have_count(RUNS)
    legend.hover()
    page.wait_for_function(f"() => ({STATE})('{CHART}').focused === '{ids[500]}'")
    assert page.evaluate(STATE, CHART)["dimmed"] == RUNS - 1
    page.mouse.move(0, 0)
    page.wait_for_function(f"() => !({STATE})('{CHART}').focused")

    # Grouped by lr: a mean and a band per group (3 traces each), a legend line per group.
    page.select_option("#runs-group-by", "param:params.lr")
    wait_traces(page, CHART, 3 * len(LRS))
    expect(page.locator("#experiment-curves-legend li")).to_have_count(len(LRS))
    expect(page.locator("#experiment-curves-legend li").first).to_contain_text("200 runs")

    # The compare page overlays the same 1,000 (its filter: the experiment).
    compare = f'#compare-charts .metric-chart[data-key="{KEY}"]'
    page.goto(f"/compare?experiment_id={exp_id}")
    wait_traces(page, compare, RUNS)
    page.locator(compare).scroll_into_view_if_needed()
    state = hover_top_curve(page, compare)
    assert state["focused"] == str(ids[0]) and state["dimmed"] == RUNS - 1, state
