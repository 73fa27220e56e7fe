"""A Hugging Face Trainer, unmodified, through a real worker: a tiny GPT-2 built from a config,
report_to tensorboard with logging_steps=1. Its scalars arrive while it trains; its
checkpoint-N/ folders are listed (marked as checkpoints) and download byte for byte."""

from __future__ import annotations

import io
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from tests.conftest import DATA_DIR, WORKSPACE_DIR

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "workspace_scripts" / "hf_trainer.py"
FINISHED = {"succeeded", "failed", "cancelled"}


def test_trainer_scalars_arrive_live_and_its_checkpoints_download(live_stack) -> None:
    (WORKSPACE_DIR / "hf").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "hf" / "train.py")
    config = {"script": "hf/train.py", "args": ["--steps", "12", "--step-sleep", "0.5"]}
    with live_stack.admin_client() as api:
        exp = api.post("/api/experiments", json={"name": "hf", "config": config})
        run = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()
        seen_while_running: list[int] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            status = api.get(f"/api/runs/{run['id']}").json()["status"]
            if status in FINISHED:
                break
            got = api.get(f"/api/runs/{run['id']}/metrics", params={"keys": "train/loss"})
            steps = got.json()["series"].get("train/loss", {}).get("step", [])
            if steps:
                seen_while_running.append(len(steps))
            time.sleep(0.3)
        done = api.get(f"/api/runs/{run['id']}").json()
        log = api.get(f"/api/runs/{run['id']}/logs").text
        assert done["status"] == "succeeded", (done["error"], log[-3000:])
        final = api.get(f"/api/runs/{run['id']}/metrics", params={"keys": "train/loss"}).json()
        assert final["series"]["train/loss"]["step"] == list(range(1, 13))
        assert any(0 < n < 12 for n in seen_while_running), seen_while_running

        files = {f["path"]: f for f in api.get(f"/api/runs/{run['id']}/files").json()}
        weights = "out/checkpoint-12/model.safetensors"
        assert weights in files and files[weights]["checkpoint"] is True
        assert "out/checkpoint-6/trainer_state.json" in files
        on_disk = DATA_DIR / "runs" / str(run["id"]) / "work" / weights
        got = api.get(f"/api/runs/{run['id']}/files/{weights}")
        assert got.status_code == 200 and got.content == on_disk.read_bytes()
        folder = api.get(f"/api/runs/{run['id']}/files/out/checkpoint-12")
        with tarfile.open(fileobj=io.BytesIO(folder.content), mode="r:gz") as tar:
            names = set(tar.getnames())
        assert "checkpoint-12/model.safetensors" in names
        assert "checkpoint-12/trainer_state.json" in names
