"""MLflow inside a job, end to end (issue 29): a plain `mlflow.log_metric` script submitted as
a job with nothing MLflow-specific configured logs into the job's own run through the job's
spool (torchyard.mlflow_store), with a real server, worker and job process, and no second run
appears."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from app.metrics.finite import BIGGEST
from tests.conftest import WORKSPACE_DIR, wait_for_status

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "workspace_scripts" / "mlflow_plain.py"


@pytest.fixture(scope="module")
def api(live_stack):
    with live_stack.admin_client() as client:
        yield client


def run_count(api: httpx.Client) -> int:
    runs = api.get("/api/runs", params={"limit": 500}).json()["runs"]
    return len(runs)


def test_a_plain_mlflow_script_logs_into_its_jobs_run(api: httpx.Client) -> None:
    """On the default install: the stack's workers add no mlflow to their jobs (issue 41)."""
    assert "mlflow" not in os.environ.get("TORCHYARD_JOB_PACKAGES", "")
    target = WORKSPACE_DIR / "mlflowjob"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, target / SCRIPT.name)
    before = run_count(api)
    exp = api.post(
        "/api/experiments",
        json={"name": "mlflow-in-a-job", "config": {"script": f"mlflowjob/{SCRIPT.name}"}},
    )
    assert exp.status_code == 201, exp.text
    launched = api.post(f"/api/experiments/{exp.json()['id']}/runs")
    assert launched.status_code == 201, launched.text
    run_id = launched.json()["id"]
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=180)
    log = api.get(f"/api/runs/{run_id}/logs").text
    assert run["status"] == "succeeded", log
    # The script's MLflow run id is the job's run id.
    assert f"mlflow run id: {run_id}" in log

    got = api.get(
        f"/api/runs/{run_id}/metrics",
        params={"keys": "train/loss,val/acc,val/loss,after/second_start"},
    ).json()["series"]
    assert got["train/loss"]["step"] == list(range(1, 26))
    assert got["train/loss"]["value"][-1] == pytest.approx(1 / 25)
    assert got["val/acc"]["value"] == [pytest.approx(0.75)]
    assert got["val/loss"]["value"] == [None]  # NaN, as for any job
    assert got["after/second_start"]["step"] == [1]

    params = api.get(f"/api/runs/{run_id}").json()["params"]
    assert params["hparams.lr"] == "0.01"
    assert params["hparams.batch_size"] == "32"
    assert params["hparams.optimizer"] == "sgd"
    assert params["hparams.tags.team"] == "vision"
    assert not any(key.startswith("hparams.tags.mlflow.") for key in params)
    # No second run: neither a run per start_run nor one in the experiment MLflow was told.
    assert run_count(api) == before + 1
    names = [e["name"] for e in api.get("/api/experiments").json()]
    assert "someone-elses-experiment" not in names


INF_SCRIPT = Path(__file__).parent / "workspace_scripts" / "inf_loss.py"


def test_infinities_logged_in_a_job_by_the_sdk_and_by_mlflow_arrive_as_logged(
    api: httpx.Client,
) -> None:
    """Issue 41: a diverging loss logged inside a job (torchyard's run.log, mlflow.log_metric)
    is stored as +/-inf, not null: torchyard's JSON shows it as the largest double
    (app/metrics/finite.py), MLflow's reads as "Infinity"; NaN stays null."""
    target = WORKSPACE_DIR / "mlflowjob"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(INF_SCRIPT, target / INF_SCRIPT.name)
    exp = api.post(
        "/api/experiments",
        json={"name": "inf-in-a-job", "config": {"script": f"mlflowjob/{INF_SCRIPT.name}"}},
    )
    assert exp.status_code == 201, exp.text
    run_id = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=180)
    assert run["status"] == "succeeded", api.get(f"/api/runs/{run_id}/logs").text[-3000:]
    assert not run.get("notices"), run["notices"]  # no spool line refused

    keys = "sdk/loss,sdk/low,sdk/nan,mlflow/loss,mlflow/low"
    series = api.get(f"/api/runs/{run_id}/metrics", params={"keys": keys}).json()["series"]
    assert {key: s["value"] for key, s in series.items()} == {
        "sdk/loss": [1.0, BIGGEST],
        "sdk/low": [-BIGGEST],
        "sdk/nan": [None],
        "mlflow/loss": [1.0, BIGGEST],
        "mlflow/low": [-BIGGEST],
    }
    summary = api.get(f"/api/runs/{run_id}").json()["summary"]
    for key in ("sdk/loss", "mlflow/loss"):
        assert summary[key] == {"last": BIGGEST, "min": 1.0, "max": BIGGEST, "step": 2}
    assert summary["sdk/low"]["last"] == summary["mlflow/low"]["last"] == -BIGGEST

    mlflow_api = "/api/2.0/mlflow"
    for key, expected in (("sdk/loss", [1.0, "Infinity"]), ("mlflow/low", ["-Infinity"])):
        history = api.get(
            f"{mlflow_api}/metrics/get-history", params={"run_id": str(run_id), "metric_key": key}
        )
        assert history.status_code == 200, history.text
        assert [m["value"] for m in history.json()["metrics"]] == expected
    latest = api.get(f"{mlflow_api}/runs/get", params={"run_id": str(run_id)}).json()
    metrics = {m["key"]: m["value"] for m in latest["run"]["data"]["metrics"]}
    assert metrics["sdk/loss"] == metrics["mlflow/loss"] == "Infinity"
    assert metrics["sdk/low"] == metrics["mlflow/low"] == "-Infinity"
    assert metrics["sdk/nan"] == "NaN"


LIGHTNING = Path(__file__).parent / "workspace_scripts" / "lightning_boring.py"


def test_lightnings_mlflow_logger_logs_into_its_jobs_run(api: httpx.Client) -> None:
    """Lightning's MLFlowLogger creates its own experiment and run: both are the job's."""
    target = WORKSPACE_DIR / "mlflowjob"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(LIGHTNING, target / "lightning_train.py")
    before = run_count(api)
    config = {
        "script": "mlflowjob/lightning_train.py",
        "args": ["--devices", "1", "--epochs", "1", "--logger", "mlflow"],
    }
    exp = api.post("/api/experiments", json={"name": "lightning-mlflow", "config": config})
    assert exp.status_code == 201, exp.text
    run_id = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=240)
    log = api.get(f"/api/runs/{run_id}/logs").text
    assert run["status"] == "succeeded", log[-3000:]
    loss = api.get(f"/api/runs/{run_id}/metrics", params={"keys": "train_loss"}).json()
    # 64 samples in batches of 4, one epoch: 16 steps, each logged (log_every_n_steps=1)
    assert len(loss["series"]["train_loss"]["step"]) == 16
    params = api.get(f"/api/runs/{run_id}").json()["params"]
    assert params["hparams.batch_size"] == "4"
    assert params["hparams.optimizer"] == "sgd"
    assert params["hparams.lr"] == "0.1"  # the module's save_hyperparameters()
    assert run_count(api) == before + 1
    assert "lightning_logs" not in [e["name"] for e in api.get("/api/experiments").json()]


HF = Path(__file__).parent / "workspace_scripts" / "hf_trainer.py"


def test_an_hf_trainer_reporting_to_mlflow_logs_into_its_jobs_run(api: httpx.Client) -> None:
    """HF's MLflowCallback starts its own run (and sets an experiment): both are the job's."""
    target = WORKSPACE_DIR / "mlflowjob"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(HF, target / "hf_train.py")
    before = run_count(api)
    config = {"script": "mlflowjob/hf_train.py", "args": ["--steps", "6", "--report-to", "mlflow"]}
    exp = api.post("/api/experiments", json={"name": "hf-mlflow", "config": config})
    assert exp.status_code == 201, exp.text
    run_id = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=300)
    log = api.get(f"/api/runs/{run_id}/logs").text
    assert run["status"] == "succeeded", log[-3000:]
    loss = api.get(f"/api/runs/{run_id}/metrics", params={"keys": "loss"}).json()["series"]
    assert loss["loss"]["step"] == [1, 2, 3, 4, 5, 6]  # logging_steps=1, at the global step
    params = api.get(f"/api/runs/{run_id}").json()["params"]
    # The TrainingArguments and the model config, as MLflowCallback logs them
    assert params["hparams.max_steps"] == "6"
    assert params["hparams.per_device_train_batch_size"] == "4"
    assert params["hparams.n_embd"] == "16"
    assert run_count(api) == before + 1
