"""Retention end to end: a real tiny_mlp run through a real worker keeps exactly the newest two
checkpoints, the best one by its metric and final.pt, on disk and in the API; then deleting
the run frees its folder."""

from __future__ import annotations

import pytest

from app.settings import get_settings
from tests.conftest import wait_for_status

pytestmark = pytest.mark.slow

EPOCHS = 7
CONFIG = {
    "recipe": "tiny_mlp",
    "params": {"epochs": EPOCHS, "steps_per_epoch": 5},
    "seed": 7,
    # "min" of an accuracy: the best is an early, poor epoch, so keep_best is seen at work
    # apart from keep_last.
    "checkpoints": {"keep_last": 2, "keep_best": 1, "metric": "val/acc", "mode": "min"},
}


@pytest.fixture(scope="module")
def api(live_stack):
    with live_stack.admin_client() as client:
        yield client


def test_a_run_keeps_exactly_the_last_two_the_best_and_final_then_delete_frees_it(api) -> None:
    exp = api.post("/api/experiments", json={"name": "retention", "config": CONFIG})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={}).json()
    done = wait_for_status(api, run["id"], {"succeeded", "failed"}, timeout=180)
    assert done["status"] == "succeeded", done

    acc = api.get(f"/api/runs/{run['id']}/metrics", params={"keys": "val/acc"}).json()
    series = acc["series"]["val/acc"]
    by_step = dict(zip(series["step"], series["value"], strict=True))
    per_epoch = {epoch: by_step[epoch * 5] for epoch in range(1, EPOCHS + 1)}
    worst = min(per_epoch.values())
    best_epoch = max(e for e, v in per_epoch.items() if v == worst)  # ties: the later one
    expected = {f"epoch-{e:04d}.pt" for e in (EPOCHS - 1, EPOCHS, best_epoch)} | {"final.pt"}

    listed = {c["name"] for c in api.get(f"/api/runs/{run['id']}/checkpoints").json()}
    assert listed == expected
    folder = get_settings().run_dir(run["id"])
    on_disk = {p.name for p in (folder / "checkpoints").iterdir()}
    assert on_disk == expected

    disk = api.get(f"/api/runs/{run['id']}").json()["disk_bytes"]
    sizes = sum((folder / "checkpoints" / name).stat().st_size for name in expected)
    assert disk >= sizes > 0  # measured once at the end: the log and config count too

    r = api.delete(f"/api/runs/{run['id']}")
    assert r.status_code == 204, r.text
    assert int(r.headers["X-Freed-Bytes"]) == disk
    assert not folder.exists()
