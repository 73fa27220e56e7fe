"""The overlay's resolution (app/static/overlay.js, issue 31): the first draw asks for a point
budget per chart width (FIRST_CHART_POINTS a chart: 800 a curve for 10 runs) without the
points' wall times; a drag-zoom asks for the chart's key again at the full budget (2,000 a
curve) and keeps the zoom; an x axis of time asks again with the times."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page

from tests.browser.test_chart_zoom import drag
from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]

RUNS = 10
STEPS = 3_000
CHART = '#experiment-charts .metric-chart[data-key="train/loss"]'
TRACE = f"""() => {{
    const el = document.querySelector('{CHART}');
    if (!el || !el.data || !el.dataset.drawnAt) return null;
    return {{traces: el.data.length, n: Math.max(...el.data.map((t) => t.x.length)),
             zoom: el.layout.xaxis.range || null}};
}}"""


def test_first_draw_is_coarse_and_a_zoom_reads_the_full_budget(admin_page: Page) -> None:
    configs = [
        {"recipe": "tiny_mlp", "params": {"lr": 0.01 * (i + 1)}, "seed": 1} for i in range(RUNS)
    ]
    series = {"train/loss": [(s, 1.0 + 1.0 / s + (s % 7) * 1e-3) for s in range(1, STEPS + 1)]}
    exp_id, _ = make_experiment_runs(configs, series, name="browser-overlay-resolution")
    page = admin_page
    asked: list[dict[str, list[str]]] = []
    page.on(
        "request",
        lambda r: (
            asked.append(parse_qs(urlparse(r.url).query))
            if "/api/compare/metrics" in r.url
            else None
        ),
    )
    page.goto(f"/experiments/{exp_id}#experiment-curves")
    page.wait_for_function(f"() => ({TRACE})() && ({TRACE})().traces === {RUNS}")
    first = page.evaluate(TRACE)
    assert 100 < first["n"] <= 800, first
    assert {a["max_points"][0] for a in asked} == {"800"}, asked
    assert not any("with_time" in a for a in asked), asked

    page.locator(CHART).scroll_into_view_if_needed()
    drag(page, 0.2, 0.8, CHART)
    page.wait_for_function(f"() => ({TRACE})().zoom && ({TRACE})().n > 800")
    zoomed = page.evaluate(TRACE)
    assert zoomed["n"] <= 2_000 and zoomed["zoom"] is not None, zoomed
    assert any(a["max_points"] == ["2000"] for a in asked), asked

    page.select_option("#experiment-curves-x-axis", "time")
    page.wait_for_function(
        "() => document.getElementById('experiment-charts').dataset.x === 'time'"
    )
    page.wait_for_function(f"() => ({TRACE})() !== null")
    assert any(a.get("with_time") == ["true"] for a in asked), asked
