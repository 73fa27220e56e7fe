"""The run page's Files section (the run's files as a tree, folders downloadable as tar.gz,
checkpoints marked, a hostile file name shown as text) and its output tail (a progress bar is
one line)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import DATA_DIR
from tests.factories import make_run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

HOSTILE = '<img src=x onerror="window.pwned=1">.txt'


def test_the_files_tree_lists_folders_and_marks_checkpoints(admin_page: Page) -> None:
    run_id = make_run(status="succeeded")
    work = DATA_DIR / "runs" / str(run_id) / "work"
    (work / "out" / "checkpoint-6").mkdir(parents=True)
    (work / "out" / "checkpoint-6" / "model.safetensors").write_bytes(b"w" * 2048)
    (work / "model_best.pt").write_bytes(b"m" * 10)
    (work / HOSTILE).write_text("x")
    admin_page.goto(f"/runs/{run_id}")
    tree = admin_page.locator("#files-tree")
    best = admin_page.get_by_role("link", name="model_best.pt")  # queried inside `li` below
    expect(tree.locator("li", has=best).locator(".badge")).to_have_text("checkpoint")
    expect(tree.get_by_role("link", name="model_best.pt")).to_have_attribute(
        "href", f"/api/runs/{run_id}/files/model_best.pt"
    )
    expect(tree.get_by_role("link", name=HOSTILE)).to_be_visible()
    assert admin_page.evaluate("window.pwned") is None
    tree.locator("summary", has_text="out/").click()
    folder = tree.locator("details[data-path='out/checkpoint-6'] > summary")
    expect(folder.locator(".badge")).to_have_text("checkpoint")
    expect(folder.get_by_role("link", name="download .tar.gz")).to_have_attribute(
        "href", f"/api/runs/{run_id}/files/out/checkpoint-6"
    )
    folder.click()
    expect(tree.get_by_role("link", name="model.safetensors")).to_be_visible()
    expect(admin_page.locator("#files-empty")).to_be_hidden()


def test_a_progress_bar_is_one_line_in_the_output_tail(admin_page: Page) -> None:
    run_id = make_run(status="succeeded")
    run_dir = DATA_DIR / "runs" / str(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    bar = "".join(f"\r{p:3d}%|{'#' * (p // 10):10}|" for p in range(0, 101, 5))
    (run_dir / "output.log").write_text(f"start\n{bar}\ndone\n")
    admin_page.goto(f"/runs/{run_id}")
    expect(admin_page.locator("#log-tail")).to_have_text("start\n100%|##########|\ndone\n")
