"""PyTorch Lightning, unmodified, through a real worker: Trainer(devices=2, strategy="ddp")
under nproc 2 is one run with rank 0's TensorBoard curve, its logged hyperparameters as the
run's params, and both ranks' logs; the same
script with launcher "none" starts its own second rank and succeeds (with torchrun's variables
set for one process it waited for ever at "MEMBER: 1/2"); a cancel ends every process in 5 s.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import WORKSPACE_DIR, pids_of_run, wait_for_status

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "workspace_scripts" / "lightning_boring.py"
FINISHED = {"succeeded", "failed", "cancelled"}


@pytest.fixture(scope="module")
def api(live_stack):
    (WORKSPACE_DIR / "lightning").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "lightning" / "train.py")
    with live_stack.admin_client() as client:
        yield client


def launch(api: httpx.Client, args: list[str], resources: dict) -> dict:
    config = {"script": "lightning/train.py", "args": args, "resources": resources}
    exp = api.post("/api/experiments", json={"name": "lightning", "config": config})
    assert exp.status_code == 201, exp.text
    return api.post(f"/api/experiments/{exp.json()['id']}/runs").json()


def test_ddp_under_torchrun_is_one_run_with_rank_0s_curve(api) -> None:
    run = launch(api, ["--devices", "2"], {"nproc": 2})
    done = wait_for_status(api, run["id"], FINISHED, timeout=240)
    log = api.get(f"/api/runs/{run['id']}/logs").text
    assert done["status"] == "succeeded", (done["error"], log[-3000:])
    # 64 samples, batches of 4, two ranks: 8 steps an epoch, 2 epochs; logged once (rank 0)
    series = api.get(f"/api/runs/{run['id']}/metrics", params={"keys": "train_loss"}).json()
    assert len(series["series"]["train_loss"]["step"]) == 16
    assert "[rank0]: rank 0 done after step 16" in log
    assert "[rank1]: rank 1 done after step 16" in log
    rank1 = api.get(f"/api/runs/{run['id']}/logs", params={"rank": 1}).text
    assert "rank 1 done" in rank1 and "rank 0 done" not in rank1
    # log_hyperparams (explicit, nested dicts flattened by Lightning with "/") and the module's
    # save_hyperparameters() (logged by the Trainer) are the run's reported params
    params = api.get(f"/api/runs/{run['id']}").json()["params"]
    assert {k: v for k, v in params.items() if k.startswith("hparams.")} == {
        "hparams.batch_size": 4,
        "hparams.optimizer": "sgd",
        "hparams.data/size": 32,
        "hparams.step_sleep": 0.0,
        "hparams.lr": 0.1,
    }
    assert params["args"] == ["--devices", "2"] and params["resources.nproc"] == 2


def test_launcher_none_lets_lightning_start_its_own_ranks(api) -> None:
    run = launch(api, ["--devices", "2"], {"nproc": 1, "launcher": "none"})
    done = wait_for_status(api, run["id"], FINISHED, timeout=240)
    log = api.get(f"/api/runs/{run['id']}/logs").text
    assert done["status"] == "succeeded", (done["error"], log[-3000:])
    assert "rank 0 done after step 16" in log and "rank 1 done after step 16" in log
    files = [f["path"] for f in api.get(f"/api/runs/{run['id']}/files").json()]
    assert any(p.startswith("lightning_logs/") and p.endswith(".ckpt") for p in files), files


@pytest.mark.timed
def test_cancel_ends_every_process_of_a_lightning_ddp_run_in_5s(api) -> None:
    run = launch(api, ["--devices", "2", "--epochs", "100", "--step-sleep", "0.2"], {"nproc": 2})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        steps = (
            api.get(f"/api/runs/{run['id']}/metrics", params={"keys": "train_loss"})
            .json()["series"]
            .get("train_loss", {})
            .get("step", [])
        )
        if steps:
            break
        time.sleep(0.5)
    assert pids_of_run(run["id"]), "the job should be training"
    started = time.monotonic()
    assert api.post(f"/api/runs/{run['id']}/cancel").status_code == 202
    done = wait_for_status(api, run["id"], FINISHED, timeout=5)
    assert done["status"] == "cancelled" and time.monotonic() - started < 5
    assert pids_of_run(run["id"]) == []
