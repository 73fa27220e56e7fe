"""Many runs' curves overlaid, in a real browser: the compare page (log scale, legends naming the
params that differ, colours by run, picked by filter) and the experiment page's "all runs'
curves"; both follow a running run live."""

from __future__ import annotations

import math

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import update

from app.db import session_scope
from app.metrics.service import ingest_points
from app.runs.models import Run
from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# Each run's colour as the pages pick it (the module the pages import).
RUN_COLORS = (
    "async (ids) => { const {runColor} = await import('/static/lib/format.js'); "
    "return ids.map((id) => runColor(id)); }"
)

LRS = (0.1, 0.01, 0.001)


def sweep(n: int = 3, diverged: int | None = None) -> tuple[int, list[int]]:
    """n runs of one experiment differing only in lr, each with train/loss and val/acc; run
    `diverged` (an index) has a loss that blows up to 70."""

    def points(i: int) -> dict[str, list[tuple[int, float]]]:
        loss = [(s, 2.0 * math.exp(-s / (20 + 10 * i)) + 0.01) for s in range(1, 101)]
        if i == diverged:
            loss = [(s, 0.5 + 0.7 * s) for s in range(1, 101)]
        return {"train/loss": loss, "val/acc": [(s, 0.5 + 0.004 * s) for s in range(10, 101, 10)]}

    configs = [
        {"recipe": "tiny_mlp", "params": {"lr": LRS[i % 3] / (1 + i // 3), "epochs": 3}, "seed": 1}
        for i in range(n)
    ]
    return make_experiment_runs(configs, per_run=points)


TRACES = """(key) => {
    const el = document.querySelector(`div.metric-chart[data-key="${key}"]`);
    if (!el || !el.data) return null;
    return {names: el.data.map((t) => t.name), colors: el.data.map((t) => t.line.color),
            ytype: el.layout.yaxis.type, yrange: el.layout.yaxis.range || null,
            points: el.data.map((t) => t.y.length)};
}"""


def traces(page: Page, key: str, count: int) -> dict:
    page.wait_for_function(
        """([key, n]) => {
            const el = document.querySelector(`div.metric-chart[data-key="${key}"]`);
            return el && el.data && el.data.length === n;
        }""",
        arg=[key, count],
    )
    return page.evaluate(TRACES, key)


def test_compare_three_runs_with_log_scale_and_params_in_the_legends(admin_page: Page) -> None:
    page = admin_page
    _, ids = sweep(3, diverged=2)
    page.goto(f"/compare?runs={','.join(map(str, ids))}")
    state = traces(page, "train/loss", 3)
    assert state["ytype"] == "linear"
    for run_id, lr, name in zip(ids, LRS, state["names"], strict=True):
        assert name == f"run {run_id} · lr={lr}", state["names"]  # epochs, seed: the same
    colors = page.evaluate(RUN_COLORS, ids)  # lib/format.js runColor
    assert state["colors"] == colors and len(set(colors)) == 3
    legend = page.locator("#compare-legend li")
    expect(legend).to_have_count(3)
    expect(legend.nth(0)).to_contain_text(f"run {ids[0]} · lr=0.1")

    page.check("#compare-log-scale")
    page.wait_for_function(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]')
                 .layout.yaxis.type === "log" """
    )
    assert traces(page, "val/acc", 3)["ytype"] == "log"  # every chart
    page.uncheck("#compare-log-scale")
    # the diverged run (loss up to 70) no longer sets the y range with outliers clipped
    page.check("#compare-clip")
    page.wait_for_function(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]')
                 .layout.yaxis.autorange === false"""
    )
    assert traces(page, "train/loss", 3)["yrange"][1] < 70 * 0.95
    # the selectors the docs promise keep working
    for run_id in ids:
        expect(page.locator(f"input[name=run][value='{run_id}']")).to_be_checked()
    expect(page.locator('table#config-diff tr[data-key="params.lr"]')).to_be_visible()


def test_compare_picks_runs_by_filter(admin_page: Page) -> None:
    page = admin_page
    exp_id, ids = sweep(6)
    page.goto("/compare")
    page.fill("#filter-experiment", str(exp_id))
    page.fill("#filter-conditions", "params.params.lr<0.05")
    page.click("#compare-filter-apply")
    page.wait_for_url("**/compare?**")
    # lr 0.01, 0.001, 0.01/2, 0.001/2: runs 1, 2, 4, 5; their curves, newest first
    wanted = [ids[5], ids[4], ids[2], ids[1]]
    state = traces(page, "train/loss", 4)
    assert [int(n.split()[1]) for n in state["names"]] == wanted, state["names"]
    expect(page.locator("#compare-legend li")).to_have_count(4)


def test_experiment_page_overlays_every_runs_curves_live(admin_page: Page) -> None:
    page = admin_page
    exp_id, ids = sweep(12)
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == ids[-1]).values(status="running"))
    page.goto(f"/experiments/{exp_id}")
    state = traces(page, "train/loss", 12)
    assert traces(page, "val/acc", 12) is not None
    groups = page.evaluate(
        """() => [...document.querySelectorAll("#experiment-charts .chart-group")]
                 .map((g) => g.dataset.group)"""
    )
    assert groups == ["train", "val"]
    # params that differ: lr only; colours by run id
    assert f"run {ids[0]} · lr=0.1" in state["names"]
    colors = page.evaluate(RUN_COLORS, ids)
    assert sorted(state["colors"]) == sorted(colors)
    expect(page.locator("#experiment-curves-legend li")).to_have_count(12)
    # the running run's new points arrive without a reload
    last = ids[-1]
    with session_scope() as session:
        ingest_points(
            session,
            run_id=last,
            points=[("train/loss", s, 0.001, 1e9 + s) for s in range(101, 151)],
        )
    page.wait_for_function(
        """(n) => document.querySelector('div.metric-chart[data-key="train/loss"]')
                 .data.some((t) => t.x.length === n)""",
        arg=150,
        timeout=15_000,
    )


def test_x_axis_any_logged_metric(admin_page: Page) -> None:
    """X axis "metric:tokens": each loss point at the tokens logged at its step (between two
    tokens points, on the line between them); back to step; the state's names (x)."""

    def points(i: int) -> dict[str, list[tuple[int, float]]]:
        return {
            "train/loss": [(s, 1.0 / s) for s in range(1, 21)],
            "tokens": [(s, 1000.0 * (i + 1) * s) for s in range(2, 21, 2)],  # every other step
            "epoch": [(10, 1.0), (20, 2.0)],
        }

    configs = [{"recipe": "tiny_mlp", "params": {"lr": lr}, "seed": 1} for lr in (0.1, 0.01)]
    _, ids = make_experiment_runs(configs, per_run=points, name="x-metric")
    page = admin_page
    page.goto(f"/compare?runs={ids[0]},{ids[1]}")
    traces(page, "train/loss", 2)
    options = page.locator("#compare-x-axis option").evaluate_all("(os) => os.map((o) => o.value)")
    assert options == [
        "step",
        "time",
        "relative",
        "metric:train/loss",
        "metric:epoch",
        "metric:tokens",
    ]
    page.select_option("#compare-x-axis", "metric:tokens")
    page.wait_for_function(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]')
                 .layout.xaxis.title.text === "tokens" """
    )
    xs = page.evaluate(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]')
                 .data.map((t) => t.x.slice(0, 5))"""
    )
    # step 1 is before the first tokens point: a gap; step 3 between 2000 and 4000
    assert xs == [[None, 2000, 3000, 4000, 5000], [None, 4000, 6000, 8000, 10000]]
    page.select_option("#compare-x-axis", "step")
    page.wait_for_function(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]')
                 .data[0].x[0] === 1"""
    )
