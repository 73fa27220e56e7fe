"""A diverging run (issue 41): +/-inf and NaN logged inside a job through the torchyard SDK and
through a plain `mlflow.log_metric`, as a training script that blew up logs them. Each must
reach the server as logged: +/-inf stored as such, NaN as null (tests/test_e2e_mlflow_job.py)."""

from __future__ import annotations

import math

import mlflow

import torchyard

run = torchyard.init()
run.log({"sdk/loss": 1.0}, step=1)
run.log({"sdk/loss": math.inf, "sdk/low": -math.inf, "sdk/nan": math.nan}, step=2)
run.finish()

with mlflow.start_run():
    mlflow.log_metric("mlflow/loss", 1.0, step=1)
    mlflow.log_metrics({"mlflow/loss": math.inf, "mlflow/low": -math.inf}, step=2)
print("logged")
