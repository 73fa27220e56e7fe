"""Issue 16 acceptance in a real browser: an admin adds a member on the users page; the member
logs in, sees the admin's experiment and the run's live curves, cannot cancel it (no button,
and the API refuses), and launches a run of their own."""

from __future__ import annotations

import re
import secrets
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import chart_state, launch, log_in
from tests.conftest import wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# Long enough to still be running while the member looks at it (~20 s of training).
SLOW = {"epochs": 4, "steps_per_epoch": 50, "step_sleep": 0.1}


def test_admin_adds_a_member_who_reads_the_admins_run_but_changes_only_their_own(
    admin_page: Page, second_page: Page, api: httpx.Client
) -> None:
    # The admin's experiment with a run that is training.
    exp_name = f"team-{secrets.token_hex(3)}"
    run = launch(api, {"recipe": "tiny_mlp", "params": SLOW, "seed": 5}, exp_name)
    run_id, exp_id = run["id"], run["experiment_id"]
    mine: int | None = None
    try:
        # The admin adds a member on the users page, with a generated one-time password.
        page = admin_page
        page.goto("/admin/users")
        name = f"member-{secrets.token_hex(3)}"
        page.fill("#new-username", name)
        page.select_option("#new-role", "member")
        with page.expect_navigation():
            page.click("#add-user")
        password = page.locator("#one-time-password-value").inner_text().strip()
        assert len(password) >= 10
        expect(page.locator(f'#users tr[data-username="{name}"] td.state')).to_have_text("active")

        # The member logs in and sees the admin's experiment in the list.
        member = second_page
        log_in(member, name, password)
        # The password was generated: every page leads to the account page until the member
        # sets their own (issue 31).
        member.goto("/")
        member.wait_for_url(re.compile(r"/account$"))
        expect(member.locator("#must-change-password")).to_be_visible()
        member.fill("#current-password", password)
        member.fill("#new-password", "the member's own password")
        with member.expect_navigation():
            member.click("#password-form button[type=submit]")
        expect(member.locator("#account-notice")).to_have_text("Your password was changed.")
        assert member.url.endswith("/account?done=password")  # post, redirect, get
        member.goto("/")
        row = member.locator(f"#experiments tr[data-experiment-id='{exp_id}']")
        expect(row).to_contain_text(exp_name)
        expect(row).to_contain_text("admin")
        row.locator("a", has_text=exp_name).click()
        member.wait_for_url(re.compile(rf"/experiments/{exp_id}$"))
        # A member may launch a run of it (the run is theirs), not delete it.
        expect(member.locator("#launch-theirs")).to_be_visible()
        expect(member.locator("#launch-run")).to_be_visible()
        assert member.locator("#delete-experiment").count() == 0

        # ... and the run's curves, growing while it trains, without a cancel button.
        wait_for_status(api, run_id, {"running"}, timeout=60)
        member.goto(f"/runs/{run_id}")
        expect(member.locator("#run-status")).to_have_attribute("data-status", "running")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = chart_state(member, "train/loss")
            if state is not None and state["points"] > 0:
                break
            time.sleep(0.2)
        assert state is not None and state["points"] > 0, state
        assert member.locator("#cancel-run").count() == 0
        expect(member.locator("#run-read-only")).to_be_visible()

        # The API refuses the cancel too, with the member's own session and CSRF token.
        refused = member.evaluate(
            """async (runId) => {
                const csrf = document.querySelector('meta[name="csrf-token"]').content;
                const r = await fetch(`/api/runs/${runId}/cancel`, {
                    method: "POST", headers: {"X-CSRF-Token": csrf}, credentials: "same-origin"});
                return {status: r.status, body: await r.json()};
            }""",
            run_id,
        )
        assert refused["status"] == 403, refused
        assert "another user" in refused["body"]["detail"]
        assert api.get(f"/api/runs/{run_id}").json()["status"] == "running"

        # The member clones the experiment into their own and launches a run of it.
        member.goto(f"/experiments/{exp_id}")
        member.click("#clone-experiment")
        member.wait_for_url(re.compile(r"/experiments/new\?from="))
        member.fill('[name="params.epochs"]', "1")
        member.fill('[name="params.steps_per_epoch"]', "5")
        member.fill('[name="params.step_sleep"]', "0")
        member.click("#create-and-launch")
        member.wait_for_url(re.compile(r"/runs/\d+$"))
        mine = int(member.url.rsplit("/", 1)[1])
        expect(member.locator("#cancel-run")).to_have_count(1)  # theirs: they may cancel it
        users = {u["id"]: u["username"] for u in api.get("/api/users").json()}
        own = api.get(f"/api/runs/{mine}").json()
        assert users[own["owner_id"]] == name, own
        assert own["experiment_id"] != exp_id
        done = wait_for_status(api, mine, {"succeeded", "failed", "cancelled"}, timeout=120)
        assert done["status"] == "succeeded", done
    finally:
        for rid in (run_id, mine):
            if rid is not None and api.get(f"/api/runs/{rid}").json()["status"] in (
                "queued",
                "running",
            ):
                api.post(f"/api/runs/{rid}/cancel")
