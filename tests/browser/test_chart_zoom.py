"""The run page's charts (app/static/chart.js over uPlot): a dragged range is re-read at full
resolution, and only that range (the request names its steps, issue 43), a double-click goes
back to the overview, log scale and smoothing apply.

The points go the real ingest path (metrics.jsonl -> the worker's forwarder -> the database).
"""

from __future__ import annotations

import json
import math
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page

from app.db import session_scope
from tests.conftest import DATA_DIR
from tests.factories import make_run
from worker.forwarder import forward

pytestmark = [pytest.mark.slow, pytest.mark.browser]

N_POINTS = 20_000
BUDGET = 4_000  # run.js: points per series in one view

TRACE = """() => {
    const el = document.querySelector('div.metric-chart[data-key="train/loss"]');
    if (!el || !el.data) return null;
    const x = Array.from(el.data[0].x);
    return {n: x.length, first: x[0], last: x[x.length - 1], zoom: el.layout.xaxis.range || null,
            ytype: el.layout.yaxis.type, smoothed: el.data[1].visible,
            smoothedY: el.data[1].y.length, canvas: el.querySelectorAll("canvas").length,
            width: el.querySelector(".u-over").clientWidth};
}"""


def ingest(run_id: int) -> None:
    run_dir = DATA_DIR / "runs" / str(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "metrics.jsonl"
    with path.open("w") as f:
        for step in range(1, N_POINTS + 1):
            record = {"type": "metrics", "step": step, "time": 1.7e9 + step * 0.01}
            f.write(json.dumps({**record, "values": {"train/loss": 1.0 + 1.0 / step}}) + "\n")
    while True:
        with session_scope() as session:
            if not forward(session, run_id=run_id, metrics_path=path):
                break


LOSS_CHART = 'div.metric-chart[data-key="train/loss"]'


def drag(page: Page, left: float, right: float, chart: str = LOSS_CHART) -> None:
    """Drag across `chart`'s plot area from `left` to `right` (fractions of its width)."""
    over = page.locator(chart).locator(".u-over")
    box = over.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * left, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * (left + right) / 2, y, steps=4)
    page.mouse.move(box["x"] + box["width"] * right, y, steps=4)
    page.mouse.up()


def test_zoom_reads_full_resolution_and_double_click_goes_back(admin_page: Page) -> None:
    run_id = make_run(
        {"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 1}, status="succeeded"
    )
    ingest(run_id)
    page = admin_page
    asked: list[dict[str, list[str]]] = []
    page.on(
        "request",
        lambda r: (
            asked.append(parse_qs(urlparse(r.url).query))
            if f"/api/runs/{run_id}/metrics" in r.url and "step_min" in r.url
            else None
        ),
    )
    page.goto(f"/runs/{run_id}")
    page.wait_for_function(f"() => ({TRACE})() && ({TRACE})().n > 0", timeout=30_000)
    overview = page.evaluate(TRACE)
    assert overview["canvas"] >= 1, overview  # drawn by uPlot
    assert overview["n"] <= BUDGET and overview["first"] == 1 and overview["last"] == N_POINTS

    drag(page, 0.40, 0.45)  # about 1,000 steps: fewer than the budget, so every one of them
    page.wait_for_function(f"() => ({TRACE})().zoom && ({TRACE})().n < {BUDGET // 2}")
    page.wait_for_function(
        f"""() => {{ const t = ({TRACE})(); return t.last - t.first + 1 === t.n; }}"""
    )
    zoomed = page.evaluate(TRACE)
    assert 200 < zoomed["n"] < 2_000, zoomed
    lo, hi = zoomed["zoom"]
    # Exactly the dragged steps were asked for, and every one of them came.
    assert len(asked) == 1, asked
    assert asked[0]["step_min"] == [str(math.ceil(lo))], (asked, lo)
    assert asked[0]["step_max"] == [str(math.floor(hi))], (asked, hi)
    assert (zoomed["first"], zoomed["last"]) == (math.ceil(lo), math.floor(hi)), zoomed

    # Into the zoomed range: fewer steps than the chart is wide, so every point, and again
    # only the range asked for (not the overview's neighbours, a bucket away).
    drag(page, 0.30, 0.50)
    page.wait_for_function(f"() => ({TRACE})().n < {zoomed['n']} && ({TRACE})().n > 0")
    inner = page.evaluate(TRACE)
    lo, hi = inner["zoom"]
    assert inner["n"] < inner["width"], inner
    assert inner["n"] == math.floor(hi) - math.ceil(lo) + 1, inner
    assert asked[-1]["step_min"] == [str(math.ceil(lo))], (asked, lo)
    assert asked[-1]["step_max"] == [str(math.floor(hi))], (asked, hi)

    page.locator('div.metric-chart[data-key="train/loss"] .u-over').dblclick()
    page.wait_for_function(
        f"() => {{ const t = ({TRACE})(); return t.first === 1 && t.last === {N_POINTS}; }}"
    )
    assert page.evaluate(TRACE)["zoom"] is None

    page.check("#log-scale")
    page.wait_for_function(f"() => ({TRACE})().ytype === 'log'")
    page.fill("#smoothing", "0.9")
    page.dispatch_event("#smoothing", "input")
    page.wait_for_function(f"() => ({TRACE})().smoothed === true")
    after = page.evaluate(TRACE)
    assert after["smoothedY"] == after["n"], after
