"""Delete from the pages in a real browser: a running run refuses (cancel first), a finished
one goes with its folder and the page says how much was freed; an experiment likewise."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect

from app.settings import get_settings
from tests.browser.conftest import launch
from tests.conftest import wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.browser]

TINY = {"recipe": "tiny_mlp", "params": {"epochs": 2, "steps_per_epoch": 5}, "seed": 5}


def test_delete_a_run_from_its_page(admin_page: Page, api: httpx.Client) -> None:
    page = admin_page
    run = launch(api, TINY, "browser-delete")
    done = wait_for_status(api, run["id"], {"succeeded"}, timeout=120)
    folder = get_settings().run_dir(run["id"])
    assert folder.is_dir()
    disk = api.get(f"/api/runs/{run['id']}").json()["disk_bytes"]
    assert disk > 0

    page.goto(f"/runs/{run['id']}")
    expect(page.locator("#run-disk")).to_contain_text(re.compile(r"KiB|MiB"))
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete-run")

    expect(page.locator("#delete-done")).to_contain_text(f"Deleted run {run['id']}:")
    expect(page.locator("#delete-done")).to_contain_text("freed")
    expect(page.locator("#delete-back")).to_have_attribute(
        "href", f"/experiments/{done['experiment_id']}"
    )
    assert api.get(f"/api/runs/{run['id']}").status_code == 404
    assert not folder.exists()


def test_delete_refuses_a_running_run_then_deletes_the_experiment(
    admin_page: Page, api: httpx.Client
) -> None:
    page = admin_page
    run = launch(api, {**TINY, "params": {"epochs": 1000, "step_sleep": 0.2}}, "browser-del-exp")
    wait_for_status(api, run["id"], {"running"}, timeout=60)

    page.goto(f"/runs/{run['id']}")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete-run")
    expect(page.locator("#delete-error")).to_contain_text("cancel it first")
    assert api.get(f"/api/runs/{run['id']}").status_code == 200

    assert api.post(f"/api/runs/{run['id']}/cancel").status_code == 202
    wait_for_status(api, run["id"], {"cancelled"}, timeout=60)
    page.goto(f"/experiments/{run['experiment_id']}")
    expect(page.locator("#experiment-disk")).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete-experiment")
    expect(page.locator("#delete-done")).to_contain_text(
        f"Deleted experiment {run['experiment_id']}"
    )
    assert api.get(f"/api/experiments/{run['experiment_id']}").status_code == 404
