"""A plain SummaryWriter script through a real server, worker and job: its add_hparams become
the run's params beside its config's, its add_image and add_figure images are listed (live,
while it runs) and served by the API, and what is not kept (histograms) is named once, in its
log and on the run (its notices)."""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import WORKSPACE_DIR, wait_for_status

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "workspace_scripts" / "tensorboard_media.py"
FINISHED = {"succeeded", "failed", "cancelled"}
STEPS = 5


@pytest.fixture(scope="module")
def api(live_stack):
    (WORKSPACE_DIR / "media").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "media" / "train.py")
    with live_stack.admin_client() as client:
        yield client


def test_hparams_become_params_and_images_are_shown_per_tag_and_step(api, live_stack) -> None:
    config = {
        "script": "media/train.py",
        "params": {"steps": STEPS, "lr": 0.1, "optimizer": "adam", "step-sleep": 1.0},
        "seed": 3,
    }
    exp = api.post("/api/experiments", json={"name": "tb-media", "config": config}).json()
    run = api.post(f"/api/experiments/{exp['id']}/runs").json()
    assert run["params"]["params.lr"] == 0.1 and run["params"]["seed"] == 3

    seen_while_running: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = api.get(f"/api/runs/{run['id']}").json()["status"]
        if status in FINISHED:
            break
        if status == "running":
            tags = api.get(f"/api/runs/{run['id']}/images").json()["tags"]
            seen_while_running.append(len(tags.get("samples", [])))
        time.sleep(0.3)
    done = wait_for_status(api, run["id"], FINISHED)
    log = api.get(f"/api/runs/{run['id']}/logs").text
    assert done["status"] == "succeeded", (done["error"], log[-3000:])
    assert any(0 < n < STEPS for n in seen_while_running), seen_while_running  # live

    params = done["params"]
    assert {k: v for k, v in params.items() if k.startswith("hparams.")} == {
        "hparams.lr": 0.1,
        "hparams.optimizer": "adam",
        "hparams.steps": STEPS,
        "hparams.nesterov": False,
    }
    assert params["params.steps"] == STEPS and params["script"] == "media/train.py"

    tags = api.get(f"/api/runs/{run['id']}/images").json()["tags"]
    assert sorted(tags) == ["plots/decay", "samples"]
    for tag in tags:
        assert [i["step"] for i in tags[tag]] == list(range(STEPS))
    assert [i["width"] for i in tags["samples"]] == [8 + s for s in range(STEPS)]
    assert {(i["width"], i["height"]) for i in tags["plots/decay"]} == {(80, 60)}
    newest = tags["samples"][-1]
    got = api.get(f"/api/runs/{run['id']}/images/{newest['id']}")
    assert got.status_code == 200 and got.headers["content-type"] == "image/png"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert Image.open(io.BytesIO(got.content)).size == (8 + STEPS - 1, 8)
    assert api.get(f"/api/runs/{run['id']}/images/{newest['id'] + 10_000}").status_code == 404

    assert "done after 5 steps" in log
    notes = [line for line in log.splitlines() if line.startswith("torchyard: TensorBoard")]
    histograms = (
        "TensorBoard histograms (tag 'weights') written by this run are not shown "
        "here: scalars, images and hparams are read from event files"
    )
    assert notes == [f"torchyard: {histograms}"]
    # issue 29: said on the run, not only in its log (nor only on the server's console)
    assert api.get(f"/api/runs/{run['id']}").json()["notices"] == [histograms]
    with live_stack.client() as browser:  # the run page, signed in as a person is
        signed_in = browser.post(
            "/login", data={"username": "admin", "password": live_stack.admin_password}
        )
        assert signed_in.status_code == 303, signed_in.text
        page = browser.get(f"/runs/{run['id']}").text
    notices = page[page.index('id="run-notices"') :]
    assert "<li>TensorBoard histograms (tag " in notices[: notices.index("</ul>")]
