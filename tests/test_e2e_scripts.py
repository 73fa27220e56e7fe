"""User scripts end to end through a real server, a real worker and real torch processes:
a TensorBoard-only script streams its curve, an SDK script runs under DDP and resumes, and
the same SDK script runs by hand outside torchyard."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import DATA_DIR, REPO, WORKSPACE_DIR, wait_for_status

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "workspace_scripts"
FINISHED = {"succeeded", "failed", "cancelled"}
TUTORIAL_STEPS_PER_EPOCH = -(-1797 // 64)  # batches of 64, the last one short


@pytest.fixture(scope="module")
def api(live_stack):
    with live_stack.admin_client() as client:
        yield client


@pytest.fixture(scope="module")
def workspace() -> Path:
    """The scripts in a git checkout, the SDK one with an uncommitted edit."""
    target = WORKSPACE_DIR / "e2e"
    target.mkdir(parents=True, exist_ok=True)
    for script in SCRIPTS.glob("*.py"):
        shutil.copy(script, target / script.name)
    git = ["git", "-C", str(target), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "scripts"], check=True)
    sdk = target / "sdk_digits.py"
    sdk.write_text(sdk.read_text() + "# an edit nobody committed\n")
    return target


def launch(api: httpx.Client, config: dict) -> dict:
    exp = api.post("/api/experiments", json={"name": "script", "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs")
    assert run.status_code == 201, run.text
    return run.json()


def series(api: httpx.Client, run_id: int, key: str) -> dict:
    got = api.get(f"/api/runs/{run_id}/metrics", params={"keys": key}).json()["series"]
    return got.get(key, {"step": [], "value": []})


def test_a_tensorboard_script_streams_its_curve_while_it_trains(api, workspace) -> None:
    epochs = 3
    run = launch(
        api,
        {
            "script": "e2e/tensorboard_classifier.py",
            "params": {"epochs": epochs, "step-sleep": 0.08},
            "seed": 5,
        },
    )
    seen_while_running: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = api.get(f"/api/runs/{run['id']}").json()["status"]
        if status in FINISHED:
            break
        if status == "running":
            steps = series(api, run["id"], "Loss/train")["step"]
            if steps:
                seen_while_running.append(len(steps))
        time.sleep(0.3)
    done = wait_for_status(api, run["id"], FINISHED)
    assert done["status"] == "succeeded", done
    # Seen in the API before the run ended, and growing while it trained.
    total = epochs * TUTORIAL_STEPS_PER_EPOCH
    assert seen_while_running and seen_while_running[0] < total
    assert len(set(seen_while_running)) >= 2, seen_while_running
    loss = series(api, run["id"], "Loss/train")
    assert loss["step"] == list(range(1, total + 1))  # complete at the end
    assert all(v is not None and v > 0 for v in loss["value"])
    logs = api.get(f"/api/runs/{run['id']}/logs").text
    assert "Finished Training" in logs and "epoch 3 done" in logs  # print() is captured too


def test_an_sdk_script_under_ddp_reports_once_per_step_and_resumes(api, workspace) -> None:
    config = {
        "script": "e2e/sdk_digits.py",
        "args": ["--hidden", "24"],
        "params": {"epochs": 2, "lr": 0.05},
        "seed": 11,
        "deterministic": True,
        "resources": {"nproc": 2},
    }
    run = launch(api, config)
    done = wait_for_status(api, run["id"], FINISHED, timeout=180)
    assert done["status"] == "succeeded", (done, api.get(f"/api/runs/{run['id']}/logs").text)
    steps_per_epoch = 898 // 32  # DistributedSampler(drop_last) over 2 ranks, 32 per rank
    total = 2 * steps_per_epoch
    loss = series(api, run["id"], "train/loss")
    assert loss["step"] == list(range(1, total + 1))
    # Once per step: the spool holds exactly one record per step (rank 1's log() wrote nothing).
    spool = (DATA_DIR / "runs" / str(run["id"]) / "metrics.jsonl").read_text().splitlines()
    assert sum('"type": "metrics"' in line for line in spool) == total
    logs = api.get(f"/api/runs/{run['id']}/logs").text
    assert "rank 0: epoch 2 done" in logs and "rank 1: epoch 2 done" in logs
    ckpts = {c["name"]: c for c in api.get(f"/api/runs/{run['id']}/checkpoints").json()}
    assert ckpts["epoch-0001.pt"]["step"] == steps_per_epoch

    env = api.get(f"/api/runs/{run['id']}/environment").json()
    assert env["python"] == sys.version.split()[0] and env["torch"].startswith("2.")
    assert any(p.startswith("torch==") for p in env["packages"])
    assert env["seed"] == 11 and env["world_size"] == 2 and env["hostname"]
    assert env["determinism"]["deterministic"] is True
    assert env["determinism"]["deterministic_algorithms"] is True
    assert len(env["git"]["commit"]) == 40 and env["git"]["dirty"] is True
    assert "+# an edit nobody committed" in env["git"]["diff"]

    resumed = api.post(f"/api/runs/{run['id']}/resume", json={"checkpoint": "epoch-0001.pt"})
    assert resumed.status_code == 201, resumed.text
    again = wait_for_status(api, resumed.json()["id"], FINISHED, timeout=180)
    assert again["status"] == "succeeded", again
    cont = series(api, again["id"], "train/loss")
    assert cont["step"] == list(range(steps_per_epoch + 1, total + 1))  # the next step on
    epochs = series(api, again["id"], "epoch")
    assert set(epochs["value"]) == {2.0}  # continued from the saved epoch


def test_the_sdk_script_runs_by_hand_outside_torchyard(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "sdk_digits.py"), "--epochs", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "rank 0: epoch 1 done at step 28" in done.stdout
    assert not any(tmp_path.iterdir())  # reported nowhere, wrote nothing
