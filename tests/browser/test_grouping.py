"""Group by a param or tag, in a real browser (app/static/grouping.js, runs_groups.js,
overlay_groups.js): the runs table shows a row per group with its count, expandable to its runs;
the experiment page's and the compare page's charts draw one mean per group with a band
(min-max or mean +/- std); the grouping is a state a saved view can read and restore."""

from __future__ import annotations

import statistics

import pytest
from playwright.sync_api import Page, expect

from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]

KEY = "train/loss"
BY_LR = "param:params.lr"


def loss(seed: int, step: int) -> float:
    return 2.0 / step + 0.1 * seed


def seeds(lrs: list[float], name: str) -> tuple[int, list[int]]:
    """One run per lr given, seed = its index; the last run logs every other step only (the
    mean at a step is over the runs that logged it)."""
    n = len(lrs)

    def points(i: int) -> dict[str, list[tuple[int, float]]]:
        steps = range(2, 21, 2) if i == n - 1 else range(1, 21)
        return {KEY: [(s, loss(i, s)) for s in steps]}

    configs = [
        {"recipe": "tiny_mlp", "params": {"lr": lr, "epochs": 2}, "seed": i}
        for i, lr in enumerate(lrs)
    ]
    return make_experiment_runs(configs, per_run=points, name=name)


CHART = """(key) => {
    const el = document.querySelector(`div.metric-chart[data-key="${key}"]`);
    if (!el || !el.data) return null;
    return el.data.map((t) => ({name: t.name, role: (t.meta || {}).role || null,
                                fill: t.fill || null, color: t.line.color, x: t.x, y: t.y}));
}"""


def chart(page: Page, count: int) -> list[dict]:
    page.wait_for_function(
        """([key, n]) => {
            const el = document.querySelector(`div.metric-chart[data-key="${key}"]`);
            return el && el.data && el.data.length === n;
        }""",
        arg=[KEY, count],
    )
    return page.evaluate(CHART, KEY)


def at(trace: dict, step: int) -> float:
    return float(trace["y"][trace["x"].index(step)])


def test_five_seeds_of_one_lr_grouped_by_lr_one_line_with_a_band_and_five_runs(
    admin_page: Page,
) -> None:
    page = admin_page
    exp_id, ids = seeds([0.01] * 5, "browser-grouping")
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    chart(page, 5)  # ungrouped: a curve per run

    page.select_option("#runs-group-by", BY_LR)
    group = page.locator("table#runs tbody tr.group-row")
    expect(group).to_have_count(1)
    expect(group).to_have_attribute("data-count", "5")
    expect(group).to_contain_text("params.lr=0.01")
    expect(group).to_contain_text("5 runs")
    members = page.locator("table#runs tbody tr.group-member")
    expect(members).to_have_count(5)
    expect(page.locator("table#runs tbody tr.group-member:visible")).to_have_count(0)
    # The summary column (train/loss, last): the group's mean, with the min-max under it.
    lasts = [loss(i, 20) for i in range(5)]
    cell = group.locator("td.num").filter(has=page.locator(".group-mean")).first
    expect(cell.locator(".group-mean")).to_have_text(f"{statistics.mean(lasts):.4g}")

    # The chart: one mean line with its band (low edge, high edge filling down to it).
    traces = chart(page, 3)
    assert [t["role"] for t in traces] == ["lo", "hi", "mean"]
    lo, hi, mean = traces
    assert hi["fill"] == "tonexty" and mean["name"] == "params.lr=0.01 (5 runs) mean"
    assert lo["color"] == hi["color"] == mean["color"]
    values = [loss(i, 3) for i in range(4)]  # step 3: the every-other-step run has none
    assert at(mean, 3) == pytest.approx(statistics.mean(values))
    assert (at(lo, 3), at(hi, 3)) == pytest.approx((min(values), max(values)))
    values = [loss(i, 4) for i in range(5)]
    assert at(mean, 4) == pytest.approx(statistics.mean(values))
    legend = page.locator("#experiment-curves-legend li")
    expect(legend).to_have_count(1)
    expect(legend).to_have_attribute("data-count", "5")
    expect(legend).to_contain_text("5 runs")

    # Expanding the group shows its five runs.
    page.click("table#runs tr.group-row button.group-toggle")
    expect(page.locator("table#runs tbody tr.group-member:visible")).to_have_count(5)
    shown = page.locator("table#runs tbody tr.group-member").evaluate_all(
        "(rs) => rs.map((r) => Number(r.dataset.runId))"
    )
    assert sorted(shown) == sorted(ids)
    expect(page.locator("table#runs button.group-toggle")).to_have_attribute(
        "aria-expanded", "true"
    )

    # The band as mean +/- std, in the charts and the table alike.
    page.select_option("#experiment-curves-band", "std")
    page.wait_for_function(
        """(key) => {
            const el = document.querySelector(`div.metric-chart[data-key="${key}"]`);
            return el && el.data && el.data[1].name.includes("std");
        }""",
        arg=KEY,
    )
    lo, hi, mean = chart(page, 3)
    assert at(hi, 4) == pytest.approx(statistics.mean(values) + statistics.pstdev(values))
    assert at(lo, 4) == pytest.approx(statistics.mean(values) - statistics.pstdev(values))
    expect(group.locator(".group-band").first).to_contain_text("±")
    # Expanded groups stay open when only the band changes.
    expect(page.locator("table#runs tbody tr.group-member:visible")).to_have_count(5)

    # The state a saved view keeps, and restores.
    state = page.evaluate("async () => (await import('/static/grouping.js')).getState()")
    assert state == {"group": {"by": BY_LR, "band": "std"}}
    page.evaluate("async () => (await import('/static/grouping.js')).setState({group: {by: null}})")
    chart(page, 5)
    expect(page.locator("table#runs tbody tr.group-row")).to_have_count(0)
    expect(page.locator("table#runs tbody tr[data-run-id]")).to_have_count(5)
    expect(page.locator("#runs-group-by")).to_have_value("")
    page.evaluate(
        "async (group) => (await import('/static/grouping.js')).setState({group})",
        {"by": BY_LR, "band": "minmax"},
    )
    expect(page.locator("#runs-group-by")).to_have_value(BY_LR)
    expect(page.locator("#experiment-curves-band")).to_have_value("minmax")
    assert [t["role"] for t in chart(page, 3)] == ["lo", "hi", "mean"]


def test_compare_groups_by_lr_one_mean_a_group_with_its_count(admin_page: Page) -> None:
    page = admin_page
    _, ids = seeds([0.1, 0.1, 0.1, 0.01, 0.01], "browser-grouping-compare")
    page.goto(f"/compare?runs={','.join(map(str, ids))}")
    chart(page, 5)
    page.select_option("#compare-group-by", BY_LR)
    traces = chart(page, 6)
    means = [t for t in traces if t["role"] == "mean"]
    assert [t["name"] for t in means] == [
        "params.lr=0.01 (2 runs) mean",
        "params.lr=0.1 (3 runs) mean",
    ]
    assert means[0]["color"] != means[1]["color"]
    assert at(means[1], 1) == pytest.approx(statistics.mean(loss(i, 1) for i in range(3)))
    legend = page.locator("#compare-legend li")
    expect(legend).to_have_count(2)
    expect(legend.nth(0)).to_contain_text("2 runs")
    expect(legend.nth(1)).to_contain_text("3 runs")
    # A group's runs under its legend entry.
    legend.nth(1).locator("summary").click()
    expect(legend.nth(1).locator("details a")).to_have_count(3)
