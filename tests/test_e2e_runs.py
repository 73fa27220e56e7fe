"""End to end through a real server, a real Celery worker and real torch training processes."""

from __future__ import annotations

import io
import json
import time

import httpx
import pytest
import torch

from tests.conftest import pids_of_run, wait_for_status

pytestmark = pytest.mark.slow


def launch(api: httpx.Client, config: dict, name: str = "e2e", **overrides: object) -> dict:
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={"overrides": overrides})
    assert run.status_code == 201, run.text
    assert run.json()["status"] == "queued"
    return run.json()


def series(api: httpx.Client, run_id: int, key: str) -> dict:
    return api.get(f"/api/runs/{run_id}/metrics", params={"keys": key}).json()["series"][key]


@pytest.fixture(scope="module")
def api(live_stack):
    with live_stack.admin_client() as client:
        yield client


DIGITS = {"recipe": "digits_cnn", "params": {"epochs": 10}, "seed": 1029, "deterministic": True}


# The recipe's accuracy and the seeding are the same on either stack: first pass only (the
# checkpoint rows and downloads: test_e2e_retention, test_resume, in both).
@pytest.mark.local_only
def test_digits_cnn_trains_to_97_percent_and_its_checkpoint_scores_the_same(api) -> None:
    from torchyard.recipes.digits_cnn import build_model, evaluate, load_split

    run = launch(api, DIGITS, name="digits")
    done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"}, timeout=300)
    assert done["status"] == "succeeded", done
    assert done["started_at"] and done["finished_at"] and done["exit_code"] == 0
    val_acc = series(api, run["id"], "val/acc")
    assert len(val_acc["step"]) == 10 and val_acc["value"][-1] >= 0.97
    loss = series(api, run["id"], "train/loss")
    n = len(loss["step"])
    assert loss["step"] == list(range(1, n + 1))  # one point per step, no duplicates
    assert val_acc["step"][-1] == n

    ckpts = api.get(f"/api/runs/{run['id']}/checkpoints").json()
    names = [c["name"] for c in ckpts]
    # The default retention keeps the latest two epochs (no metric named: no best one kept).
    assert "final.pt" in names
    assert sorted(x for x in names if x.startswith("epoch-")) == ["epoch-0009.pt", "epoch-0010.pt"]
    final = next(c for c in ckpts if c["name"] == "final.pt")
    assert final["epoch"] == 10 and final["step"] == n and final["size_bytes"] > 0
    blob = api.get(f"/api/runs/{run['id']}/checkpoints/final.pt")
    assert blob.status_code == 200 and len(blob.content) == final["size_bytes"]
    state = torch.load(io.BytesIO(blob.content), weights_only=True)
    assert {"model", "optimizer", "epoch", "step"} <= set(state)
    model = build_model()
    model.load_state_dict(state["model"])
    _x_train, _y_train, x_val, y_val = load_split(1029, 0.2)
    _loss, acc = evaluate(model, x_val, y_val)
    assert acc == pytest.approx(val_acc["value"][-1], abs=1e-9)


@pytest.mark.local_only
def test_same_seed_gives_the_same_curve_and_another_seed_another(api) -> None:
    config = {**DIGITS, "params": {"epochs": 2}}
    runs = [
        launch(api, config, name="det-a"),
        launch(api, config, name="det-b"),
        launch(api, {**config, "seed": 7}, name="det-c"),
    ]
    for run in runs:
        assert wait_for_status(api, run["id"], {"succeeded", "failed"})["status"] == "succeeded"
    a, b, c = (series(api, r["id"], "train/loss") for r in runs)
    assert a["step"] == b["step"] and a["value"] == b["value"]
    assert a["value"] != c["value"]


@pytest.mark.timed
@pytest.mark.parametrize("nproc", [1, 2])
def test_cancel_ends_every_process_of_the_run_within_5s(api, nproc: int) -> None:
    tiny = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": 100_000, "step_sleep": 0.01},
        "resources": {"nproc": nproc, "gpus": 0},
    }
    run = launch(api, tiny, name=f"cancel-{nproc}")
    wait_for_status(api, run["id"], {"running"})
    deadline = time.monotonic() + 60
    while not series_or_none(api, run["id"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids_of_run(run["id"]), "the job should be running"
    t0 = time.monotonic()
    r = api.post(f"/api/runs/{run['id']}/cancel")
    assert r.status_code == 202
    done = wait_for_status(api, run["id"], {"cancelled", "failed", "succeeded"}, timeout=5)
    elapsed = time.monotonic() - t0
    assert done["status"] == "cancelled" and elapsed < 5, (done, elapsed)
    assert pids_of_run(run["id"]) == []
    log = api.get(f"/api/runs/{run['id']}/logs").text
    assert "torchyard: the run was cancelled" in log
    assert "run failed" not in log and "SystemExit" not in log, log[-2000:]


def series_or_none(api: httpx.Client, run_id: int) -> list:
    return (
        api.get(f"/api/runs/{run_id}/metrics")
        .json()["series"]
        .get("train/loss", {})
        .get("step", [])
    )


def test_a_job_that_raises_fails_with_its_traceback_in_error_and_logs(api) -> None:
    tiny = {"recipe": "tiny_mlp", "params": {"epochs": 1, "steps_per_epoch": 20, "fail_at_step": 5}}
    run = launch(api, tiny, name="fails")
    done = wait_for_status(api, run["id"], {"succeeded", "failed"})
    assert done["status"] == "failed" and done["exit_code"] != 0
    assert "Traceback" in done["error"] and "failing on purpose at step 5" in done["error"]
    logs = api.get(f"/api/runs/{run['id']}/logs").text
    assert "failing on purpose at step 5" in logs
    assert series(api, run["id"], "train/loss")["step"] == [1, 2, 3, 4]


def test_events_stream_metrics_logs_and_status_until_the_run_ends(api) -> None:
    tiny = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 2, "steps_per_epoch": 30, "step_sleep": 0.02},
    }
    run = launch(api, tiny, name="sse")
    seen_steps: list[int] = []
    statuses: list[str] = []
    log_text = ""
    with api.stream("GET", f"/api/runs/{run['id']}/events", timeout=120) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "metrics" and "train/loss" in data["series"]:
                    seen_steps += data["series"]["train/loss"]["step"]
                elif event == "status":
                    statuses.append(data["status"])
                elif event == "log":
                    log_text += data["text"]
    assert statuses[-1] == "succeeded" and "running" in statuses
    assert seen_steps == list(range(1, 61))  # every point exactly once, in order
