"""A run as MLflow reads it (app/mlflow/reads.py): its user_id is its ``mlflow.user`` tag (what
MLflow's fluent API sets to the login name of whoever ran the script), else its owner's name."""

from __future__ import annotations

import secrets

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from tests.mlflow_server import mlflow_member


def test_user_id_is_the_mlflow_user_tag(
    mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow_member(mlflow_server, monkeypatch)
    client = MlflowClient()
    experiment_id = client.create_experiment(f"user-{secrets.token_hex(4)}")
    tagged = client.create_run(experiment_id, tags={"mlflow.user": "alice", "my": "tag"})
    assert tagged.info.user_id == "alice"
    read = client.get_run(tagged.info.run_id)
    assert read.info.user_id == "alice" and read.data.tags["mlflow.user"] == "alice"
    found = client.search_runs([experiment_id])
    assert [r.info.user_id for r in found] == ["alice"]

    monkeypatch.setenv("LOGNAME", "bob-on-a-laptop")  # what the fluent API sends
    monkeypatch.setenv("USER", "bob-on-a-laptop")
    mlflow.set_experiment(experiment_id=experiment_id)
    with mlflow.start_run() as fluent:
        pass
    assert client.get_run(fluent.info.run_id).info.user_id == "bob-on-a-laptop"
