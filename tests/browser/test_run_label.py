"""The run page shows a run's name, tags and notes and its owner edits them inline (PATCH
/api/runs/{id}); hostile text stays text; a refused tag says why."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from app.db import session_scope
from app.runs.models import Run
from tests.factories import make_run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

HOSTILE = '<img src=x onerror="window.pwned=1">'


def test_name_tags_and_notes_are_edited_inline(admin_page: Page) -> None:
    run_id = make_run(status="succeeded")
    admin_page.goto(f"/runs/{run_id}")
    expect(admin_page.locator("#run-notes")).to_be_hidden()
    admin_page.click("#edit-run-label")
    admin_page.fill("#run-name-input", HOSTILE)
    admin_page.fill("#run-tags-input", "baseline, lr=0.1 baseline")
    admin_page.fill("#run-notes-input", "diverged at epoch 3\nretry with warmup")
    admin_page.click("#run-label-form button[type=submit]")
    expect(admin_page.locator("#run-label-form")).to_be_hidden()
    expect(admin_page.locator("#run-name")).to_have_text(HOSTILE)
    expect(admin_page.locator("#run-tags .badge")).to_have_text(["baseline", "lr=0.1"])
    expect(admin_page.locator("#run-notes")).to_contain_text("retry with warmup")
    assert admin_page.evaluate("window.pwned") is None
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.name == HOSTILE and (run.notes or "").startswith("diverged")

    admin_page.reload()  # rendered by the server the same way
    expect(admin_page.locator("#run-name")).to_have_text(HOSTILE)
    expect(admin_page.locator("#run-tags .badge")).to_have_text(["baseline", "lr=0.1"])
    admin_page.click("#edit-run-label")
    admin_page.fill("#run-tags-input", "no spaces allowed?")
    admin_page.click("#run-label-form button[type=submit]")
    expect(admin_page.locator("#run-label-error")).to_contain_text("tags")
    expect(admin_page.locator("#run-tags .badge")).to_have_text(["baseline", "lr=0.1"])
