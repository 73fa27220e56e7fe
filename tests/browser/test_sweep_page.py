"""The sweep page (app/static/sweep.js) over a real sweep the live stack's worker trains: live
progress to the end, the best run, the parallel coordinates and a scatter per param, and the
trial the median rule stopped marked with its reason; and the experiment page's "New sweep"
form (app/static/sweep_form.js) showing each 422 next to its field, then opening the sweep.
Writes docs/screenshots/sweep.png."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS

pytestmark = [pytest.mark.slow, pytest.mark.browser]

TINY: dict[str, Any] = {
    "recipe": "tiny_mlp",
    "params": {"epochs": 4, "steps_per_epoch": 20, "batch_size": 32, "step_sleep": 0.05},
    "seed": 5,
}


def _experiment(api: httpx.Client, name: str, config: dict) -> int:
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    return int(exp.json()["id"])


def test_sweep_page_shows_progress_best_charts_and_the_trial_stopped_early(
    admin_page: Page, api: httpx.Client
) -> None:
    page = admin_page
    body = {
        "experiment_id": _experiment(api, "sweep page", TINY),
        "method": "grid",
        "metric": {"name": "val/acc", "goal": "maximize"},
        # grid order: two good trials finish first, then one that cannot learn in time
        "parameters": {"params.lr": {"values": [0.2, 0.1, 1e-7]}},
        "max_runs": 3,
        "max_concurrent": 1,
        "early_stop": {"type": "median", "min_trials": 2},
    }
    created = api.post("/api/sweeps", json=body)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    page.goto(f"/sweeps/{sweep_id}")
    expect(page.locator("#cancel-sweep")).to_be_visible()
    expect(page.locator("#sweep")).to_have_attribute("data-status", "succeeded", timeout=180_000)
    sweep = api.get(f"/api/sweeps/{sweep_id}").json()
    best, bad = sweep["best"], sweep["trials"][2]
    assert bad["stopped_early"], sweep["trials"]

    expect(page.locator("#cancel-sweep")).to_be_hidden()
    expect(page.locator("#sweep-progress")).to_have_attribute("data-done", "3")
    expect(page.locator("#sweep-progress-text")).to_have_text(
        "3 of 3 trials ended · 1 stopped early"
    )
    expect(page.locator("#sweep-best-run")).to_have_attribute("href", f"/runs/{best['run_id']}")
    expect(page.locator("#sweep-best-value")).to_have_text(re.compile(r"^(0\.\d+|1)$"))
    expect(page.locator('#sweep-best-params dd[data-key="params.lr"]')).to_have_text(
        str(best["params"]["params.lr"])
    )
    # the trials are THE runs table (experiment_runs.js), listed by sweep_id, live to the end
    expect(page.locator("#runs-section")).to_have_attribute("data-sweep-id", str(sweep_id))
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator('#runs th[data-param="params.lr"]')).to_have_count(1)
    # the sweep's metric is a column, though the page loaded before any trial logged it
    expect(page.locator('#runs th[data-summary="val/acc.last"]')).to_have_count(1)
    for trial in sweep["trials"]:
        row = page.locator(f'#runs tr[data-run-id="{trial["run_id"]}"]')
        expect(row.locator(".badge").first).to_have_text(trial["status"])
    stopped = page.locator("#runs tr.stopped-early")
    expect(stopped).to_have_count(1)
    expect(stopped).to_have_attribute("data-run-id", str(bad["run_id"]))
    mark = stopped.locator(".badge.stopped-early")
    expect(mark).to_have_text("stopped early")
    expect(mark).to_have_attribute("title", bad["stopped_early"])
    expect(page.locator(f'#runs tr.best[data-run-id="{best["run_id"]}"]')).to_have_count(1)

    expect(page.locator("#sweep-parcoords g.pc-run")).to_have_count(3)
    expect(page.locator('#sweep-parcoords g.pc-axis[data-key="params.lr"]')).to_have_count(1)
    scatter = page.locator('#sweep-scatters figure.scatter[data-param="params.lr"]')
    expect(scatter.locator("circle.sc-point")).to_have_count(3)
    expect(scatter.locator("circle.sc-best")).to_have_attribute("data-run-id", str(best["run_id"]))
    expect(scatter.locator("circle.sc-stopped")).to_have_count(1)
    page.screenshot(path=str(SCREENSHOTS / "sweep.png"), full_page=True)

    # the trial's run page and the experiment page link the sweep
    page.goto(f"/runs/{bad['run_id']}")
    expect(page.locator("#sweep-link")).to_have_attribute("href", f"/sweeps/{sweep_id}")
    page.goto(f"/experiments/{body['experiment_id']}")
    listed = page.locator(f'#sweeps tr[data-sweep-id="{sweep_id}"]')
    expect(listed.locator(".badge")).to_have_text("succeeded")
    expect(listed.locator(".sweep-progress")).to_have_text("3 / 3")
    expect(listed.locator(".sweep-best a")).to_have_attribute("href", f"/runs/{best['run_id']}")


def test_the_experiment_page_lists_its_sweeps_live(admin_page: Page, api: httpx.Client) -> None:
    """A sweep running when the page loaded is redrawn every 3 s (progress, status, best)
    until it ends, with no reload."""
    page = admin_page
    config = {**TINY, "params": {**TINY["params"], "epochs": 1, "step_sleep": 0.1}}
    experiment_id = _experiment(api, "sweeps live", config)
    body = {
        "experiment_id": experiment_id,
        "method": "random",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"params.lr": {"distribution": "log_uniform", "min": 1e-2, "max": 0.3}},
        "max_runs": 2,
        "max_concurrent": 1,
        "seed": 4,
    }
    created = api.post("/api/sweeps", json=body)
    assert created.status_code == 201, created.text
    sweep_id = created.json()["id"]
    page.goto(f"/experiments/{experiment_id}")
    row = page.locator(f'#sweeps tr[data-sweep-id="{sweep_id}"]')
    expect(row).to_have_attribute("data-status", "running")
    expect(row.locator(".sweep-progress")).to_have_text("0 / 2")
    expect(row).to_have_attribute("data-status", "succeeded", timeout=120_000)
    expect(row.locator(".sweep-progress")).to_have_text("2 / 2")
    best = api.get(f"/api/sweeps/{sweep_id}").json()["best"]
    expect(row.locator(".sweep-best a")).to_have_text(f"run {best['run_id']}")


def test_new_sweep_form_shows_each_422_next_to_its_field(
    admin_page: Page, api: httpx.Client
) -> None:
    page = admin_page
    config = {"recipe": "tiny_mlp", "params": {"epochs": 1, "steps_per_epoch": 3}, "seed": 1}
    experiment_id = _experiment(api, "sweep form", config)
    page.goto(f"/experiments/{experiment_id}")
    page.locator("#new-sweep summary").click()
    row = page.locator("#sweep-params tr.sweep-param").first
    row.locator(".param-min").fill("0.1")
    row.locator(".param-max").fill("0.1")
    page.locator("#sweep-metric-name").fill("val/nope")
    page.locator("#start-sweep").click()
    min_error = page.locator('.field-error[data-field="parameters.params.lr.min"]')
    expect(min_error).to_contain_text("must be below max")
    expect(row.locator(".param-min")).to_have_attribute("aria-invalid", "true")
    expect(page.locator('.field-error[data-field="metric.name"]')).to_contain_text("never logs")

    row.locator(".param-path").fill("params.warmup")
    row.locator(".param-min").fill("0.01")  # the range is checked before the path
    page.locator("#start-sweep").click()
    expect(min_error).to_have_count(0)
    expect(page.locator('.field-error[data-field="parameters.params.warmup"]')).to_contain_text(
        "unknown config path"
    )

    row.locator(".param-path").fill("params.lr")
    page.locator("#sweep-metric-name").fill("val/acc")
    page.locator("#sweep-max-runs").fill("1")
    page.locator("#sweep-max-concurrent").fill("1")
    page.locator("#start-sweep").click()
    page.wait_for_url(re.compile(r"/sweeps/\d+$"))
    sweep_id = int(page.url.rsplit("/", 1)[1])
    sweep = api.get(f"/api/sweeps/{sweep_id}").json()
    assert sweep["experiment_id"] == experiment_id and sweep["max_runs"] == 1, sweep
    assert sweep["parameters"]["params.lr"]["min"] == 0.01, sweep["parameters"]
