"""A watched run page stays in step with the server when the run ends (issue 31): retention
drops checkpoints as the run goes, and the page, open the whole time, lists exactly the ones
kept and the disk use the server measured at the end, without a reload
(app/static/run/checkpoints.js, run/status.js)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import launch

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CONFIG = {
    "recipe": "tiny_mlp",
    # slow enough that the page sees checkpoints come and go while it watches
    "params": {"epochs": 6, "steps_per_epoch": 5, "step_sleep": 0.1},
    "seed": 3,
    "checkpoints": {"keep_last": 2, "keep_best": 0},
}


def _listed(page: Page) -> set[str]:
    return set(
        page.locator("table#checkpoints tr[data-checkpoint]").evaluate_all(
            "rows => rows.map((r) => r.dataset.checkpoint)"
        )
    )


def test_a_watched_run_page_lists_exactly_the_kept_checkpoints_when_the_run_ends(
    admin_page: Page, api: httpx.Client
) -> None:
    run = launch(api, CONFIG, name="watched retention")
    page = admin_page
    page.goto(f"/runs/{run['id']}")
    # Watched from before its checkpoints: the page saw more than the two that stay.
    page.wait_for_function(
        "() => document.querySelectorAll('table#checkpoints tr[data-checkpoint]').length > 0",
        timeout=180_000,
    )
    expect(page.locator("#run-status")).to_have_attribute(
        "data-status", "succeeded", timeout=180_000
    )
    kept = {c["name"] for c in api.get(f"/api/runs/{run['id']}/checkpoints").json()}
    assert kept == {"epoch-0005.pt", "epoch-0006.pt", "final.pt"}, kept
    page.wait_for_function(
        """(kept) => {
            const rows = [...document.querySelectorAll('table#checkpoints tr[data-checkpoint]')];
            const names = rows.map((r) => r.dataset.checkpoint).sort();
            return JSON.stringify(names) === JSON.stringify(kept);
        }""",
        arg=sorted(kept),
        timeout=15_000,
    )
    assert _listed(page) == kept
    # The disk is the status panel's (its own re-read at the run's end), not the checkpoints
    # table's: read at once, it was sometimes still the running value (CI, stop 37).
    fresh = page.context.new_page()
    fresh.goto(f"/runs/{run['id']}")
    ended_disk = fresh.locator("#run-disk").inner_text()
    fresh.close()
    assert ended_disk != "0 bytes"
    expect(page.locator("#run-disk")).to_have_text(ended_disk, timeout=15_000)
