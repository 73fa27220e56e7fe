"""The run page and the compare page of finished runs, checked and photographed for the docs:
docs/screenshots/run-page.png and compare-page.png are rewritten by every test run."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS, chart_state, launch, train_loss_steps
from tests.conftest import wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CONFIG = {
    "recipe": "tiny_mlp",
    "params": {"epochs": 5, "steps_per_epoch": 30, "lr": 0.05},
    "seed": 7,
}
STEPS = 5 * 30


@pytest.fixture(scope="module")
def two_runs(api: httpx.Client) -> tuple[int, int]:
    a = launch(api, CONFIG, name="screenshot-lr")
    exp_id = a["experiment_id"]
    b = api.post(f"/api/experiments/{exp_id}/runs", json={"overrides": {"params": {"lr": 0.01}}})
    assert b.status_code == 201, b.text
    ids = (a["id"], b.json()["id"])
    for run_id in ids:
        assert wait_for_status(api, run_id, {"succeeded", "failed"})["status"] == "succeeded"
    return ids


def wait_for_chart(page: Page, key: str, traces: int = 1) -> None:
    page.wait_for_function(
        """([key, traces]) => {
            const el = document.querySelector(`div.metric-chart[data-key="${key}"]`);
            return el && el.data && el.data.length >= traces
                && el.data.every((t) => (t.y || []).length > 0);
        }""",
        arg=[key, traces],
        timeout=20_000,
    )


def test_run_page_of_a_finished_run(
    admin_page: Page, api: httpx.Client, two_runs: tuple[int, int]
) -> None:
    run_id = two_runs[0]
    assert train_loss_steps(api, run_id) == list(range(1, STEPS + 1))
    page = admin_page
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_attribute("data-status", "succeeded")
    # The training charts, and the worker's system series below them (every second here).
    for key in ("train/loss", "train/acc", "val/loss", "val/acc", "sys/cpu_percent", "sys/rss_mb"):
        wait_for_chart(page, key)
    state = chart_state(page, "train/loss")
    assert state is not None and state["points"] == STEPS, state
    final = page.locator('table#checkpoints tr[data-checkpoint="final.pt"] a.download')
    expect(final).to_be_visible()
    assert not page.locator("#cancel-run").is_visible(), "cancel offered on a finished run"
    page.wait_for_timeout(300)  # let the charts settle (a resize redraw) before the picture
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "run-page.png"), full_page=True)


def test_compare_page_overlays_runs_and_diffs_only_differing_keys(
    admin_page: Page, two_runs: tuple[int, int]
) -> None:
    a, b = two_runs
    page = admin_page
    page.goto(f"/compare?runs={a},{b}")
    wait_for_chart(page, "train/loss", traces=2)
    names = page.evaluate(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]')
                 .data.map((t) => t.name)"""
    )
    for run_id in (a, b):
        assert any(re.match(rf"run {run_id}\b", n or "") for n in names), names
    for run_id in (a, b):
        expect(page.locator(f"input[name=run][value='{run_id}']")).to_be_checked()
    diff = page.locator("table#config-diff")
    expect(diff.locator('tr[data-key="params.lr"]')).to_be_visible()
    assert diff.locator('tr[data-key="params.epochs"]').count() == 0
    assert diff.locator('tr[data-key="seed"]').count() == 0
    page.wait_for_timeout(300)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "compare-page.png"), full_page=True)


def test_run_page_controls_smoothing_log_scale_time_axis_and_log_tail(
    admin_page: Page, api: httpx.Client, two_runs: tuple[int, int]
) -> None:
    run_id = two_runs[0]
    raw = api.get(f"/api/runs/{run_id}/metrics", params={"keys": "train/loss"}).json()
    raw_steps, raw_values = (
        raw["series"]["train/loss"]["step"],
        raw["series"]["train/loss"]["value"],
    )
    page = admin_page
    page.goto(f"/runs/{run_id}")
    wait_for_chart(page, "train/loss")
    chart = page.locator('div.metric-chart[data-key="train/loss"]')
    expect(page.locator("pre#log-tail")).to_contain_text(f"run {run_id} finished")

    page.locator("#smoothing").fill("0.9")
    page.wait_for_function(
        """(raw) => document.querySelector('div.metric-chart[data-key="train/loss"]').data
            .some((t) => t.visible !== false && t.y.length === raw.length
                         && t.y.some((v, i) => Math.abs(v - raw[i]) > 1e-9))""",
        arg=raw_values,
    )
    page.check("#log-scale")
    page.wait_for_function(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]')
            .layout.yaxis.type === "log" """
    )
    page.select_option("#x-axis", "time")
    page.wait_for_function(
        """(steps) => {
            const x = document.querySelector('div.metric-chart[data-key="train/loss"]').data[0].x;
            return x.length === steps.length && x.some((v, i) => v !== steps[i]);
        }""",
        arg=raw_steps,
    )
    # Every control is reachable from the keyboard.
    for selector in ("#smoothing", "#log-scale", "#x-axis"):
        page.focus(selector)
        assert page.evaluate(
            "(s) => document.activeElement === document.querySelector(s)", selector
        )
    assert chart.get_attribute("data-points") == str(STEPS)


def test_experiment_page_lists_its_runs_with_status_badges(
    admin_page: Page, api: httpx.Client, two_runs: tuple[int, int]
) -> None:
    exp_id = api.get(f"/api/runs/{two_runs[0]}").json()["experiment_id"]
    page = admin_page
    page.goto(f"/experiments/{exp_id}")
    for run_id in two_runs:
        row = page.locator(f'table#runs tr[data-run-id="{run_id}"]')
        expect(row.locator(".badge.status-succeeded")).to_have_text("succeeded")
    page.locator(
        f'table#runs tr[data-run-id="{two_runs[1]}"] a[href="/runs/{two_runs[1]}"]'
    ).click()
    page.wait_for_url(f"**/runs/{two_runs[1]}")
