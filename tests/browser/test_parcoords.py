"""The experiment page's parallel coordinates (app/static/parcoords.js): one axis per param that
differs plus the picked metric, one line per run, brushing that keeps the runs in range (and
feeds the runs table's selection), hostile names shown as text, another metric re-rendering.
Writes docs/screenshots/parcoords.png."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import update

from app.db import session_scope
from app.metrics.ingest import ingest_points
from app.runs.models import Run
from tests.browser.conftest import SCREENSHOTS
from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]

HOSTILE = '<img src=x onerror="window.pwned=1">'
LRS = [0.1, 0.01, 0.001, 0.0001]  # four decades: a log axis
OPTIMIZERS = ["adam", "sgd", "adam", "sgd"]


def _sweep(api: httpx.Client, name: str) -> tuple[int, list[int]]:
    """An experiment and four finished runs (lr, optimizer and a hostile param differ; epochs
    does not), inserted as app.runs.state.lifecycle.queue records params; each logs Loss/train, all
    but the last val/acc."""
    base = {"recipe": "tiny_mlp", "params": {"epochs": 1, "lr": 0.1}, "seed": 1}
    configs = [
        {**base, "params": {"epochs": 1, "lr": lr, "optimizer": opt, HOSTILE: i % 2}}
        for i, (lr, opt) in enumerate(zip(LRS, OPTIMIZERS, strict=True))
    ]

    def series(i: int) -> dict[str, list[tuple[int, float]]]:
        found = {"Loss/train": [(1, LRS[i] * 10)]}
        if i < 3:
            found["val/acc"] = [(1, 0.5 + 0.1 * i)]
        return found

    return make_experiment_runs(configs, per_run=series, name=name)


def _axes(page: Page) -> list[str]:
    return page.locator("#parcoords g.pc-axis").evaluate_all("(gs) => gs.map((g) => g.dataset.key)")


def _kept(page: Page) -> list[int]:
    return sorted(
        page.locator("#parcoords g.pc-run:not(.pc-out)").evaluate_all(
            "(gs) => gs.map((g) => Number(g.dataset.runId))"
        )
    )


def _drag(page: Page, key: str, top: float, bottom: float) -> None:
    """Drag along an axis from `top` to `bottom`, fractions of its height from the top."""
    line = page.locator(f'#parcoords g.pc-axis[data-key="{key}"] line.pc-axis-line')
    line.scroll_into_view_if_needed()
    box = line.bounding_box()
    assert box is not None
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + top * box["height"])
    page.mouse.down()
    page.mouse.move(x, box["y"] + bottom * box["height"], steps=6)
    page.mouse.up()


def test_axes_lines_brush_hostile_names_and_metric_picker(
    admin_page: Page, api: httpx.Client
) -> None:
    exp_id, ids = _sweep(api, "browser-parcoords")
    page = admin_page
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#parcoords[data-renders]")).to_have_count(1)

    # The differing params (epochs is the same everywhere), then the default metric: the
    # first validation key's max.
    assert _axes(page) == [f"params.{HOSTILE}", "params.lr", "params.optimizer", "val/acc.max"]
    kinds = page.locator("#parcoords g.pc-axis").evaluate_all(
        "(gs) => gs.map((g) => g.dataset.kind)"
    )
    assert kinds == ["linear", "log", "category", "metric"]
    expect(page.locator("#parcoords-metric")).to_have_value("val/acc.max")
    # One line per run; the run without val/acc is grey.
    expect(page.locator("#parcoords g.pc-run")).to_have_count(4)
    expect(page.locator("#parcoords path.pc-line")).to_have_count(4)
    expect(page.locator("#parcoords g.pc-run.pc-no-value")).to_have_count(1)
    assert page.get_attribute("#parcoords g.pc-run.pc-no-value", "data-run-id") == str(ids[3])
    colors = page.locator("#parcoords path.pc-line").evaluate_all(
        "(ps) => ps.map((p) => p.getAttribute('stroke'))"
    )
    assert len(set(colors)) == 4  # three values on the scale, one grey

    # The hostile param name is text (its axis title in full in the tooltip), not a tag.
    title = page.locator('#parcoords g.pc-axis[data-index="0"] text.pc-axis-title')
    assert title.locator("title").text_content() == HOSTILE
    expect(page.locator("#parcoords img")).to_have_count(0)
    assert page.evaluate("window.pwned") is None

    # Brush the upper half of the lr axis (log: 0.1 at the top, 0.0001 at the bottom).
    _drag(page, "params.lr", -0.015, 0.5)
    assert _kept(page) == sorted(ids[:2])
    expect(page.locator("table#runs tr.brushed")).to_have_count(2)
    expect(page.locator("table#runs tr.brushed-out")).to_have_count(2)
    # A second brush on another axis combines with the first: adam only.
    _drag(page, "params.optimizer", -0.015, 0.2)  # the top category (sgd)
    assert _kept(page) == [ids[1]]
    expect(page.locator("#parcoords-select")).to_have_text("Select these 1 run")
    # Double-click an axis clears its brush only.
    page.locator('#parcoords g.pc-axis[data-key="params.optimizer"] rect.pc-axis-hit').dblclick()
    assert _kept(page) == sorted(ids[:2])
    # The brushed runs feed the table's selection (and its compare/tag/delete actions).
    page.click("#parcoords-select")
    expect(page.locator("#runs-selected-count")).to_have_text("2 selected")
    checked = page.locator("table#runs input.run-select:checked").evaluate_all(
        "(bs) => bs.map((b) => Number(b.value))"
    )
    assert sorted(checked) == sorted(ids[:2])
    expect(page.locator("#runs-compare")).to_be_enabled()
    page.locator("#parcoords-section").screenshot(path=SCREENSHOTS / "parcoords.png")

    # Another metric re-renders: every run has Loss/train, so none is grey; the brush stays.
    renders = int(page.get_attribute("#parcoords", "data-renders") or 0)
    page.select_option("#parcoords-metric", "Loss/train.last")
    expect(page.locator("#parcoords")).not_to_have_attribute("data-renders", str(renders))
    assert _axes(page)[-1] == "Loss/train.last"
    expect(page.locator("#parcoords g.pc-run.pc-no-value")).to_have_count(0)
    expect(page.locator("#parcoords path.pc-line")).to_have_count(4)
    assert _kept(page) == sorted(ids[:2])
    page.reload()  # the picked metric is remembered for the experiment
    expect(page.locator("#parcoords[data-renders]")).to_have_count(1)
    expect(page.locator("#parcoords-metric")).to_have_value("Loss/train.last")

    # Keyboard: each line is a focusable link showing the same tooltip.
    page.focus(f'#parcoords g.pc-run[data-run-id="{ids[0]}"]')
    expect(page.locator("#parcoords .pc-tip .pc-tip-head")).to_contain_text(f"run {ids[0]} · ")
    page.keyboard.press("Tab")
    page.locator("#parcoords-metric").focus()
    expect(page.locator("#parcoords .pc-tip")).to_be_hidden()
    # Hover a line: its label and values; click: its run page.
    run_id = ids[2]
    page.locator("#parcoords svg").scroll_into_view_if_needed()
    x, y = page.evaluate(
        """(id) => {
            const run = document.querySelector(`#parcoords g.pc-run[data-run-id="${id}"]`);
            const path = run.querySelector(".pc-line");
            const len = path.getTotalLength();
            const p = path.getPointAtLength(len * 0.17);
            const m = path.getScreenCTM();
            return [p.x * m.a + m.e, p.y * m.d + m.f];
        }""",
        run_id,
    )
    page.mouse.move(x, y)
    tip = page.locator("#parcoords .pc-tip")
    expect(tip).to_be_visible()
    head = tip.locator(".pc-tip-head")  # ty.runLabels, as on the curves' legend
    expect(head).to_contain_text(f"run {run_id} · ")
    expect(head).to_contain_text("lr=0.001 optimizer=adam")
    expect(tip).to_contain_text("lr: 0.001")
    page.mouse.click(x, y)
    page.wait_for_url(f"**/runs/{run_id}")
    assert page.evaluate("window.pwned") is None


def test_redrawn_live_with_the_pages_runs(admin_page: Page, api: httpx.Client) -> None:
    """While a run is active the page's runs refresh (the curves' poll, every 3 s): the table
    and the chart take its new summaries without a reload."""
    exp_id, ids = _sweep(api, "browser-parcoords-live")
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == ids[3]).values(status="running"))
    page = admin_page
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#parcoords g.pc-run")).to_have_count(4)
    grey = page.locator(f'#parcoords g.pc-run.pc-no-value[data-run-id="{ids[3]}"]')
    expect(grey).to_have_count(1)
    with session_scope() as session:
        ingest_points(session, run_id=ids[3], points=[("val/acc", 2, 0.9, 2.0)])
    expect(grey).to_have_count(0, timeout=15_000)
    top = page.locator('#parcoords g.pc-axis[data-kind="metric"] text.pc-tick-label').last
    expect(top.locator("title")).to_have_text("0.9")  # the metric axis reaches the new value
    cell = page.locator(f'table#runs tr[data-run-id="{ids[3]}"] .badge.status-running')
    expect(cell).to_have_count(1)
