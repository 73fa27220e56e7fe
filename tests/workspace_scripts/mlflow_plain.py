"""A plain script instrumented with MLflow only, as a team writes it for `mlflow server`:
no torchyard import, nothing torchyard-specific. Inside a torchyard job it must log into the
job's run (tests/test_e2e_mlflow_job.py)."""

from __future__ import annotations

import mlflow

STEPS = 25

mlflow.set_experiment("someone-elses-experiment")
with mlflow.start_run(run_name="plain"):
    mlflow.log_param("lr", 0.01)
    mlflow.log_params({"batch_size": 32, "optimizer": "sgd"})
    mlflow.set_tag("team", "vision")
    for step in range(1, STEPS + 1):
        mlflow.log_metric("train/loss", 1.0 / step, step=step)
    mlflow.log_metrics({"val/acc": 0.75, "val/loss": float("nan")}, step=STEPS)
# A second run started by the same script: still the job's run, not a new one.
with mlflow.start_run():
    mlflow.log_metric("after/second_start", 1.0, step=1)
print("mlflow run id:", mlflow.last_active_run().info.run_id)
