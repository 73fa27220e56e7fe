"""Every failed action is shown where it was taken (issue 31): a member's Delete on a
teammate's run in the runs table shows the server's refusal next to the table's actions,
and stays shown after the table is listed again (app/static/experiment_runs.js); a failed
call's text comes from one helper (lib/api.js failureText)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import launch, log_in
from tests.conftest import make_user, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CONFIG = {"recipe": "tiny_mlp", "params": {"epochs": 1, "steps_per_epoch": 2}, "seed": 1}


def test_a_members_delete_of_a_teammates_run_shows_the_refusal(
    page: Page, api: httpx.Client
) -> None:
    run = launch(api, CONFIG, name="teammate's run")
    api.post(f"/api/runs/{run['id']}/cancel")
    wait_for_status(api, run["id"], {"cancelled", "succeeded", "failed"})
    username, password, _headers = make_user()  # a member, not the run's owner
    log_in(page, username, password)
    page.goto(f"/experiments/{run['experiment_id']}")
    expect(page.locator("#runs-section")).to_have_attribute("data-loaded", "1")
    page.check(f"table#runs input.run-select[value='{run['id']}']")
    page.once("dialog", lambda d: d.accept())
    page.click("button#runs-delete")
    error = page.locator("#runs-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text(f"run {run['id']}")
    expect(error).to_contain_text("belongs to another user")
    # The table was listed again after the refusal: the message is still there, the run too.
    expect(page.locator("#runs-section")).not_to_have_attribute("aria-busy", "true")
    expect(error).to_contain_text("belongs to another user")
    expect(page.locator(f"table#runs tr[data-run-id='{run['id']}']")).to_have_count(1)
    assert api.get(f"/api/runs/{run['id']}").status_code == 200
