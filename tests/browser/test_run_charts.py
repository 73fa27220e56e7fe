"""The run page's charts (app/static/run/charts.js) against another logged metric, in a real
browser: the x axis offers every key but the system series; "metric:tokens" draws each loss
point at the tokens logged at its step, and live points follow it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from app.db import session_scope
from app.metrics.service import ingest_points
from tests.factories import make_run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LOSS_X = """() => {
    const el = document.querySelector('div.metric-chart[data-key="train/loss"]');
    return el && el.data ? {x: Array.from(el.data[0].x), title: el.layout.xaxis.title.text} : null;
}"""


def _points(steps: range) -> list[tuple[str, int, float, float]]:
    points = []
    for s in steps:
        points.append(("train/loss", s, 1.0 / s, 1e9 + s))
        if s % 2 == 0:  # tokens every other step
            points.append(("tokens", s, 512.0 * s, 1e9 + s))
    return points


def test_x_axis_another_metric_live(admin_page: Page) -> None:
    run_id = make_run({"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 1})  # running
    with session_scope() as session:
        ingest_points(session, run_id=run_id, points=_points(range(1, 11)))
        ingest_points(session, run_id=run_id, points=[("sys/cpu", 1, 5.0, 1e9 + 1)])
    page = admin_page
    page.goto(f"/runs/{run_id}")
    page.wait_for_function(f"() => ({LOSS_X})() && ({LOSS_X})().x.length === 10")
    options = page.locator("#x-axis option").evaluate_all("(os) => os.map((o) => o.value)")
    assert options == ["step", "time", "metric:train/loss", "metric:tokens"]  # key order

    page.select_option("#x-axis", "metric:tokens")
    page.wait_for_function(f"() => ({LOSS_X})().title === 'tokens'")
    # step 1: before the first tokens point (a gap); odd steps between two of its points
    assert page.evaluate(LOSS_X)["x"] == [None, *(512.0 * s for s in range(2, 11))]

    # live: the new loss points land at the tokens logged with them
    with session_scope() as session:
        ingest_points(session, run_id=run_id, points=_points(range(11, 21)))
    page.wait_for_function(f"() => ({LOSS_X})().x.length === 20", timeout=20_000)
    page.wait_for_function(f"() => ({LOSS_X})().x[19] === {512.0 * 20}", timeout=20_000)
    assert page.evaluate(LOSS_X)["x"][10:] == [512.0 * s for s in range(11, 21)]
