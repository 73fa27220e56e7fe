"""The run page's Images section (per TensorBoard tag the newest image, a step slider back
through the tag's steps, live while the run runs, tags shown as text) and its Params table."""

from __future__ import annotations

import io

import pytest
from PIL import Image as PILImage
from playwright.sync_api import Page, expect

from app.db import session_scope
from app.metrics.service import ingest_points
from app.runs.files.images import Caps, Image, store_images
from app.runs.query.params import record_config, record_reported
from tests.factories import make_run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

HOSTILE = '<img src=x onerror="window.pwned=1">'
CAPS = Caps(image_bytes=1 << 20, per_tag=100, run_bytes=1 << 30)


def png(width: int) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, 4), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


# The page asks for its images and params again on the run stream's events
# (app/static/lib/run_stream.js refreshOn), not on a timer of its own. A run made here has no
# job: what is added while the page is open comes with a scalar point at its step, as a
# TensorBoard job's images do (worker/tensorboard_events.py reads both from its event file), and
# that point's `metrics` event is the one the page acts on. Without it only the pings a quiet
# stream sends every PING_SECONDS (10 s, app/runs/streams/events.py) would: up to 10 s a wait.
LIVE_MS = 25_000


def log_point(run_id: int, step: int) -> None:
    """A scalar point at `step`, through the forwarder's ingest path (a stream `metrics` event)."""
    with session_scope() as session:
        ingest_points(session, run_id=run_id, points=[("train/loss", step, 1.0, 1e9 + step)])


def add_images(run_id: int, tag: str, steps: list[int]) -> None:
    """An image per step, `step + 6` pixels wide: the width tells which one the page shows; with
    a scalar point at the last step, as a job's event file has beside them."""
    with session_scope() as session:
        images = [Image(tag, s, 1.0, 0, 0, png(s + 6)) for s in steps]
        store_images(session, run_id=run_id, images=images, caps=CAPS)
    log_point(run_id, steps[-1])


def test_images_show_the_newest_per_tag_and_the_slider_goes_back(admin_page: Page) -> None:
    run_id = make_run(status="running")
    add_images(run_id, "samples", [0, 5, 9])
    add_images(run_id, HOSTILE, [2])
    admin_page.goto(f"/runs/{run_id}")

    figure = admin_page.locator("figure.tb-image[data-tag='samples']")
    img = figure.locator("img")
    expect(img).to_have_attribute("data-step", "9")
    expect(figure.locator("output")).to_have_text("step 9")
    admin_page.wait_for_function(
        "el => el.complete && el.naturalWidth === 15", arg=img.element_handle()
    )
    expect(admin_page.locator("figure.tb-image figcaption").nth(0)).to_have_text(HOSTILE)
    assert admin_page.evaluate("window.pwned") is None

    slider = figure.locator("input[type=range]")
    slider.fill("0")  # the oldest step
    expect(img).to_have_attribute("data-step", "0")
    expect(figure.locator("output")).to_have_text("step 0")
    admin_page.wait_for_function(
        "el => el.complete && el.naturalWidth === 6", arg=img.element_handle()
    )

    add_images(run_id, "samples", [12])  # live: a slider moved back stays on its step
    expect(slider).to_have_attribute("max", "3", timeout=LIVE_MS)
    expect(img).to_have_attribute("data-step", "0")
    slider.fill("3")  # back at the newest: it follows new images again
    expect(img).to_have_attribute("data-step", "12")
    add_images(run_id, "samples", [20])
    expect(img).to_have_attribute("data-step", "20", timeout=LIVE_MS)
    admin_page.wait_for_function(
        "el => el.complete && el.naturalWidth === 26", arg=img.element_handle()
    )


def test_the_params_table_shows_config_and_reported_params(admin_page: Page) -> None:
    run_id = make_run(status="running")
    with session_scope() as session:
        record_config(session, run_id=run_id, config={"params": {"lr": 0.1}, "seed": 4})
        record_reported(session, run_id=run_id, values={"optimizer": HOSTILE})
    admin_page.goto(f"/runs/{run_id}")
    rows = admin_page.locator("#params tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_have_text("params.lr0.1config")
    expect(rows.nth(1)).to_have_text("seed4config")
    expect(admin_page.locator("#params tr[data-key='hparams.optimizer'] td").nth(1)).to_have_text(
        HOSTILE
    )
    with session_scope() as session:  # reported while the page is open
        record_reported(session, run_id=run_id, values={"batch_size": 64})
    log_point(run_id, 1)  # as the job's next scalar would: the stream's `metrics` event
    expect(admin_page.locator("#params tr[data-key='hparams.batch_size']")).to_contain_text(
        "64", timeout=LIVE_MS
    )
    assert admin_page.evaluate("window.pwned") is None
