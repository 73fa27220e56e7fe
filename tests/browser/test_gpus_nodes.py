"""The GPU page shows a multi-node run on each of its hosts, each GPU saying which node that
host is and the run's hosts in node order; the queue says a waiting one's GPUs per host."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from app.gpus.service import StartOutcome
from tests.test_gpu_panel import Made, host, remove, start_on
from tests.test_gpu_panel_nodes import queue_multi_node

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture
def made() -> Iterator[Made]:
    made = Made([], [])
    yield made
    remove(made)


def test_the_gpu_page_shows_a_multi_node_run_on_each_of_its_hosts(
    admin_page: Page, made: Made
) -> None:
    a, b = host(made, [0]), host(made, [0])
    waiting = queue_multi_node(made, "admin", nodes=3, gpus=1)  # 2 hosts: it waits
    running = queue_multi_node(made, "admin", nodes=2, gpus=1)
    assert start_on(running, a, [0]).outcome is StartOutcome.STARTED  # a asked: node 0
    admin_page.goto("/gpus")
    for node, name in enumerate((a, b)):
        gpu = admin_page.locator(f".gpu-host[data-host='{name}'] .gpu[data-gpu-index='0']")
        expect(gpu).to_have_attribute("data-state", "leased")
        expect(gpu.locator(".gpu-holder a")).to_have_text(f"run {running}")
        expect(gpu.locator(".gpu-nodes")).to_have_text(f"node {node} of 2: {a}, {b}")
        # each host's pool and executor (the page's script renders them as the server does)
        pool = admin_page.locator(f".gpu-host[data-host='{name}'] .host-pool")
        expect(pool).to_have_text("pool local · executor process")
    row = admin_page.locator(f"#gpu-queue tr[data-run-id='{waiting}']")
    expect(row.locator("td").nth(3)).to_have_text("1 × 3 hosts")  # position, run, owner, GPUs
