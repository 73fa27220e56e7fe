"""Issue 17 in a real browser: the run page shows its full config and launches a variant (a new
run of the same experiment with another lr); resuming with more epochs and another lr draws the
parent's curve up to the checkpoint before the child's, and links the parent."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import delete

from app.db import session_scope
from app.runs.models import Checkpoint
from tests.browser.conftest import launch
from tests.conftest import wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.browser]

TINY = {"recipe": "tiny_mlp", "params": {"epochs": 2, "steps_per_epoch": 5, "lr": 0.05}, "seed": 7}


def test_launch_a_variant_from_a_run_page_with_another_lr(
    admin_page: Page, api: httpx.Client
) -> None:
    page = admin_page
    run = launch(api, TINY, "variant-src", params={"weight_decay": 0.001})
    new_id = 0
    try:
        page.goto(f"/runs/{run['id']}")
        shown = page.locator("#run-config").text_content() or ""
        assert '"lr": 0.05' in shown and '"weight_decay": 0.001' in shown and '"seed": 7' in shown

        page.click("#launch-variant")
        page.wait_for_url(re.compile(rf"/experiments/new\?variant_of={run['id']}$"))
        lr = page.locator('[name="params.lr"]')
        expect(lr).to_have_value("0.05")
        expect(page.locator('[name="params.weight_decay"]')).to_have_value("0.001")
        lr.fill("0.02")
        page.click("#create-and-launch")
        page.wait_for_url(re.compile(r"/runs/\d+$"))
        new_id = int(page.url.rsplit("/", 1)[1])
        assert new_id != run["id"]
        new = api.get(f"/api/runs/{new_id}").json()
        assert new["experiment_id"] == run["experiment_id"]  # a run of the same experiment
        assert new["config"]["params"]["lr"] == 0.02
        assert new["config"]["params"]["weight_decay"] == 0.001  # the run's own override kept
        assert new["config"]["params"]["epochs"] == 2 and new["seed"] == 7
        expect(page.locator("#run-config")).to_contain_text('"lr": 0.02')
        names = [e["name"] for e in api.get("/api/experiments").json()]
        assert not any(n.startswith("variant-src (copy)") for n in names)
    finally:
        # Neither run's training is this test's subject: both are cancelled, not left to hold
        # the live stack's two worker slots while the next test's runs wait for them.
        for run_id in (run["id"], new_id):
            if run_id:
                api.post(f"/api/runs/{run_id}/cancel")


def test_resume_with_more_epochs_draws_the_parents_curve_first(
    admin_page: Page, api: httpx.Client
) -> None:
    page = admin_page
    run = launch(api, TINY, "resume-ui")
    assert wait_for_status(api, run["id"], {"succeeded", "failed"})["status"] == "succeeded"
    page.goto(f"/runs/{run['id']}")
    start = page.url
    page.locator('table#checkpoints tr[data-checkpoint="final.pt"] button.resume').click()
    expect(page.locator("#resume-form")).to_be_visible()
    expect(page.locator("#resume-epochs")).to_have_value("4")  # final.pt: more epochs prefilled
    page.fill("#resume-lr", "0.2")
    page.click("#resume-submit")
    page.wait_for_url(lambda url: re.search(r"/runs/\d+$", url) is not None and url != start)
    child_id = int(page.url.rsplit("/", 1)[1])
    assert child_id != run["id"]
    child = api.get(f"/api/runs/{child_id}").json()
    assert child["config"]["params"]["epochs"] == 4 and child["config"]["params"]["lr"] == 0.2
    link = page.locator("#parent-link")
    expect(link).to_have_attribute("href", f"/runs/{run['id']}")
    expect(link).to_contain_text(f"Resumed from run {run['id']}, checkpoint final.pt")
    assert wait_for_status(api, child_id, {"succeeded", "failed"})["status"] == "succeeded"

    page.reload()
    expect(page.locator('div.metric-chart[data-key="train/loss"]')).to_have_attribute(
        "data-points", "10", timeout=15_000
    )
    traces = page.evaluate(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]').data
              .map((t) => ({meta: t.meta || null, x: Array.from(t.x), visible: t.visible}))"""
    )
    parent = [t for t in traces if t["meta"] == "parent"]
    assert len(parent) == 1, traces
    assert parent[0]["x"] == list(range(1, 11))  # the parent's steps up to the checkpoint's
    assert traces[0]["x"] == list(range(11, 21))  # then the child's own
    # With the checkpoint's row gone (retention), the parent's curve is cut before the child's.
    with session_scope() as session:
        session.execute(
            delete(Checkpoint).where(Checkpoint.run_id == run["id"], Checkpoint.name == "final.pt")
        )
    page.reload()
    expect(page.locator('div.metric-chart[data-key="train/loss"]')).to_have_attribute(
        "data-points", "10", timeout=15_000
    )
    again = page.evaluate(
        """() => document.querySelector('div.metric-chart[data-key="train/loss"]').data
              .filter((t) => t.meta === "parent").map((t) => Array.from(t.x))"""
    )
    assert again == [list(range(1, 11))]
    # Clicking the link opens the parent.
    link.click()
    page.wait_for_url(re.compile(rf"/runs/{run['id']}$"))
