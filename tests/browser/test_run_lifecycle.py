"""Issue 3 acceptance in a real browser: create and launch from the form, watch the curve grow
live, see the run succeed, download its checkpoint and load it; cancel a run from its page."""

from __future__ import annotations

import platform
import re
import time

import httpx
import pytest
import torch
from playwright.sync_api import Page, expect

from tests.browser.conftest import chart_state, launch, run_status, train_loss_steps
from tests.conftest import wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.browser]

FINISHED = {"succeeded", "failed", "cancelled"}
# 3 epochs x 50 steps, 0.05 s a step: ~7.5 s of training after a ~3 s start.
EPOCHS, STEPS_PER_EPOCH, STEP_SLEEP = 3, 50, 0.05


def test_create_launch_watch_live_curve_succeed_and_download_checkpoint(
    admin_page: Page, api: httpx.Client
) -> None:
    from torchyard.recipes.tiny_mlp import build_model

    page = admin_page
    page.goto("/experiments/new")
    page.fill("input[name=name]", "browser-live")
    page.select_option("select[name=recipe]", "tiny_mlp")
    page.fill('[name="params.epochs"]', str(EPOCHS))
    page.fill('[name="params.steps_per_epoch"]', str(STEPS_PER_EPOCH))
    page.fill('[name="params.step_sleep"]', str(STEP_SLEEP))
    page.click("#create-and-launch")
    page.wait_for_url(re.compile(r"/runs/\d+$"))
    run_id = int(page.url.rsplit("/", 1)[1])
    run = api.get(f"/api/runs/{run_id}").json()
    assert run["config"]["recipe"] == "tiny_mlp"
    assert run["config"]["params"]["steps_per_epoch"] == STEPS_PER_EPOCH

    # Sample status and plotted points together until the run ends: the chart must grow at
    # least twice while the page still says "running" (live updates, no reload).
    seen_running: list[int] = []
    statuses: list[str] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        sample = page.evaluate(
            """() => {
                const s = document.querySelector('#run-status')?.dataset.status ?? null;
                const el = document.querySelector('div.metric-chart[data-key="train/loss"]');
                return {status: s, points: el ? Number(el.dataset.points ?? 0) : 0,
                        plotted: el && el.data ? el.data[0].x.length : 0};
            }"""
        )
        if not statuses or statuses[-1] != sample["status"]:
            statuses.append(sample["status"])
        if sample["status"] == "running":
            seen_running.append(sample["points"])
        if sample["status"] in FINISHED:
            break
        time.sleep(0.1)
    assert statuses[-1] == "succeeded", statuses
    assert "running" in statuses, statuses
    increases = sum(1 for a, b in zip(seen_running, seen_running[1:], strict=False) if b > a)
    assert increases >= 2, f"train/loss points while running: {sorted(set(seen_running))}"

    total = EPOCHS * STEPS_PER_EPOCH
    assert train_loss_steps(api, run_id) == list(range(1, total + 1))
    expect(page.locator('div.metric-chart[data-key="train/loss"]')).to_have_attribute(
        "data-points", str(total), timeout=10_000
    )
    state = chart_state(page, "train/loss")
    assert state is not None and state["traces"][0] == total, state
    assert state["updates"] >= 2, state  # live updates applied, per the page's own count

    # The worker's system series (every second on the live stack) arrived live as well, in
    # their own group below the training charts.
    system = page.locator('#charts > .chart-group[data-group="sys"]')
    expect(system.locator("h3")).to_have_text("System")
    for key in ("sys/cpu_percent", "sys/rss_mb"):
        expect(system.locator(f'div.metric-chart[data-key="{key}"]')).to_have_count(1)
    assert (
        int(
            system.locator('div.metric-chart[data-key="sys/rss_mb"]').get_attribute("data-points")
            or 0
        )
        >= 2
    )
    groups = page.evaluate(
        "() => [...document.querySelectorAll('#charts > .chart-group')].map((g) => g.dataset.group)"
    )
    assert groups[-1] == "sys" and "train" in groups, groups

    link = page.locator('table#checkpoints tr[data-checkpoint="final.pt"] a.download')
    expect(link).to_be_visible(timeout=10_000)
    with page.expect_download() as download_info:
        link.click()
    download = download_info.value
    assert download.suggested_filename.endswith(".pt"), download.suggested_filename
    checkpoint = torch.load(download.path(), weights_only=True)
    assert {"model", "optimizer", "epoch", "step"} <= set(checkpoint)
    assert checkpoint["epoch"] == EPOCHS and checkpoint["step"] == total
    build_model().load_state_dict(checkpoint["model"])

    # The reproducibility record, on the page that was open while the run started.
    expect(page.locator("#env-torch")).to_have_text(torch.__version__, timeout=10_000)
    expect(page.locator("#env-python")).to_have_text(platform.python_version())
    expect(page.locator("#environment-packages summary")).to_contain_text("Packages (")
    assert "torch==" in (page.locator("#environment-packages pre").text_content() or "")


def test_cancel_from_the_run_page_asks_first_then_cancels(
    admin_page: Page, api: httpx.Client
) -> None:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": 100_000, "step_sleep": 0.02},
    }
    run = launch(api, config, name="browser-cancel")
    page = admin_page
    page.goto(f"/runs/{run['id']}")
    status = page.locator("#run-status")
    expect(status).to_have_attribute("data-status", "running", timeout=60_000)
    cancel = page.locator("#cancel-run")
    expect(cancel).to_be_visible()

    dialogs: list[str] = []

    def dismiss(dialog) -> None:
        dialogs.append(dialog.type)
        dialog.dismiss()

    page.once("dialog", dismiss)
    cancel.click()
    page.wait_for_timeout(1000)
    assert dialogs == ["confirm"], dialogs
    assert api.get(f"/api/runs/{run['id']}").json()["status"] == "running"
    assert run_status(page) == "running"

    def accept(dialog) -> None:
        dialogs.append(dialog.type)
        dialog.accept()

    page.once("dialog", accept)
    cancel.click()
    expect(status).to_have_attribute("data-status", "cancelled", timeout=15_000)
    assert dialogs == ["confirm", "confirm"], dialogs
    assert wait_for_status(api, run["id"], FINISHED, timeout=10)["status"] == "cancelled"
    assert not (cancel.is_visible() and cancel.is_enabled()), "cancel still offered"


def test_the_run_page_shows_the_environment_build_live_then_its_time(
    admin_page: Page, api: httpx.Client
) -> None:
    """While the run's packages are installed the page says "Building environment: <pip's
    line>" (from the run's stream), then hides it and shows the build's time apart."""
    page = admin_page
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": 2},
        "environment": {"requirements": ["six"]},  # no other test builds this environment
    }
    run = launch(api, config, name="browser-build")
    page.goto(f"/runs/{run['id']}")
    phase = page.locator("#run-phase")
    expect(phase).to_be_visible(timeout=60_000)
    expect(phase).to_contain_text("Building environment: ")
    expect(phase).to_be_hidden(timeout=120_000)
    status = page.locator("#run-status")
    expect(status).to_have_attribute("data-status", "succeeded", timeout=60_000)
    done = wait_for_status(api, run["id"], FINISHED)
    assert done["env_build_seconds"] is not None and done["duration_seconds"] is not None
    expect(page.locator("#run-build")).not_to_have_text("–")
    expect(page.locator("#run-duration")).not_to_have_text("–")
