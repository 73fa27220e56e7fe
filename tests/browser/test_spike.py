"""One spike among 200,000 points: the run page's default view must draw it; and a diverging
loss (+inf) is drawn as one.

The points go the real ingest path: a metrics.jsonl in the run's directory, moved into the
database by the worker's forwarder.
"""

from __future__ import annotations

import json
import math
import sys

import pytest
from playwright.sync_api import Page, expect

from app.db import session_scope
from app.metrics.ingest import ingest_points
from app.metrics.service import count_points
from tests.browser.conftest import chart_state
from tests.conftest import DATA_DIR
from tests.factories import make_run
from worker.forwarder import forward

pytestmark = [pytest.mark.slow, pytest.mark.browser]

N_POINTS = 200_000
SPIKE_STEP = 123_457
SPIKE = 1e6
DEFAULT_BUDGET = 4_000  # docs/ui.md: the run page's point budget per series


def write_spool(run_id: int) -> None:
    run_dir = DATA_DIR / "runs" / str(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "metrics.jsonl"
    with path.open("w") as f:
        for step in range(1, N_POINTS + 1):
            value = SPIKE if step == SPIKE_STEP else 1.0 + 0.01 * math.sin(step / 50)
            record = {"type": "metrics", "step": step, "time": 1.7e9 + step * 0.01}
            f.write(json.dumps({**record, "values": {"train/loss": value}}) + "\n")
    while True:
        with session_scope() as session:
            if not forward(session, run_id=run_id, metrics_path=path):
                break
    with session_scope() as session:
        assert count_points(session, run_id=run_id, key="train/loss") == N_POINTS


def test_a_single_spike_among_200k_points_is_drawn_at_the_default_zoom(admin_page: Page) -> None:
    run_id = make_run(
        {"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 1}, status="succeeded"
    )
    write_spool(run_id)
    page = admin_page
    page.goto(f"/runs/{run_id}")
    page.wait_for_function(
        """() => {
            const el = document.querySelector('div.metric-chart[data-key="train/loss"]');
            return el && Number(el.dataset.points) > 0 && el.data && el.data.length > 0;
        }""",
        timeout=30_000,
    )
    state = chart_state(page, "train/loss")
    assert state is not None
    assert state["max"] == SPIKE, state
    # Downsampled on the server: the browser does not get (or draw) 200,000 points.
    assert 2 <= state["points"] <= DEFAULT_BUDGET, state
    assert max(state["traces"]) <= DEFAULT_BUDGET, state


def test_a_diverging_loss_is_drawn_at_the_top_and_named_inf(admin_page: Page) -> None:
    """+inf logged (stored as it is, sent as the largest double: app/metrics/finite.py) is drawn
    just above the other points (lib/diverged.js), its tooltip "+inf": never a gap."""
    run_id = make_run(
        {"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 1}, status="succeeded"
    )
    losses = [1.0, 0.8, 0.9, 5.0, math.inf]
    with session_scope() as session:
        points = [("train/loss", s, v, 1.7e9 + s) for s, v in enumerate(losses, start=1)]
        ingest_points(session, run_id=run_id, points=points)
    page = admin_page
    page.goto(f"/runs/{run_id}")
    chart = page.locator('div.metric-chart[data-key="train/loss"]')
    page.wait_for_function(
        """() => {
            const el = document.querySelector('div.metric-chart[data-key="train/loss"]');
            return el && el.data && el.data.length > 0 && el.querySelector(".u-over");
        }""",
        timeout=30_000,
    )
    state = chart_state(page, "train/loss")
    assert state is not None and state["max"] == sys.float_info.max, state
    box = chart.locator(".u-over").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + 2)
    tip = chart.locator(".chart-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("+inf")
