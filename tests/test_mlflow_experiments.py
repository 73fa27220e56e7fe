"""MLflow's experiment writes through the real ``mlflow`` client (app/mlflow/experiments.py):
tags set, replaced and deleted, the soft delete and restore with MLflow's view types, rename;
as MLflow's own tests (tests/tracking/test_rest_tracking.py) exercise them."""

from __future__ import annotations

import secrets

import httpx
import pytest
from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from tests.conftest import make_user


def _names(client: MlflowClient, view: int) -> set[str]:
    return {e.name for e in client.search_experiments(view_type=view, max_results=50_000)}


def test_experiment_tags_are_set_replaced_and_deleted(mlflow_login: dict[str, str]) -> None:
    client = MlflowClient()
    first = client.create_experiment(f"tags-{secrets.token_hex(4)}")
    second = client.create_experiment(f"tags-{secrets.token_hex(4)}")
    client.set_experiment_tag(first, "dataset", "imagenet1K")
    assert client.get_experiment(first).tags["dataset"] == "imagenet1K"
    client.set_experiment_tag(first, "dataset", "birdbike")
    client.set_experiment_tag(first, "multiline tag", "value2\nvalue2")
    client.set_experiment_tag(first, "empty", "")
    assert client.get_experiment(second).tags == {}
    client.set_experiment_tag(second, "dataset", "birds200")
    tags = client.get_experiment(first).tags
    assert tags == {"dataset": "birdbike", "multiline tag": "value2\nvalue2", "empty": ""}
    assert client.get_experiment(second).tags == {"dataset": "birds200"}

    client.delete_experiment_tag(first, "dataset")
    assert "dataset" not in client.get_experiment(first).tags
    with pytest.raises(MlflowException, match="No tag with name: dataset") as missing:
        client.delete_experiment_tag(first, "dataset")
    assert missing.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_delete_restore_and_the_view_types(mlflow_login: dict[str, str]) -> None:
    client = MlflowClient()
    name = f"deleterious-{secrets.token_hex(4)}"
    experiment_id = client.create_experiment(name)
    assert client.get_experiment(experiment_id).lifecycle_stage == "active"
    client.delete_experiment(experiment_id)
    assert client.get_experiment(experiment_id).lifecycle_stage == "deleted"
    assert name not in _names(client, ViewType.ACTIVE_ONLY)
    assert name in _names(client, ViewType.DELETED_ONLY)
    assert name in _names(client, ViewType.ALL)
    client.restore_experiment(experiment_id)
    assert client.get_experiment(experiment_id).lifecycle_stage == "active"
    assert name in _names(client, ViewType.ACTIVE_ONLY)
    assert name not in _names(client, ViewType.DELETED_ONLY)


def test_rename_and_its_refusals(mlflow_server: str, mlflow_login: dict[str, str]) -> None:
    client = MlflowClient()
    bad, taken = f"bad-{secrets.token_hex(4)}", f"taken-{secrets.token_hex(4)}"
    experiment_id = client.create_experiment(bad)
    client.create_experiment(taken)
    good = f"good-{secrets.token_hex(4)}"
    client.rename_experiment(experiment_id, good)
    assert client.get_experiment(experiment_id).name == good
    assert client.get_experiment_by_name(bad) is None
    with pytest.raises(MlflowException, match="already exists") as clash:
        client.rename_experiment(experiment_id, taken)
    assert clash.value.error_code == "RESOURCE_ALREADY_EXISTS"

    other = make_user()[2]  # another member reads it, and may not change it
    with httpx.Client(base_url=mlflow_server, headers=other, timeout=30) as api:
        r = api.post(
            "/api/2.0/mlflow/experiments/update",
            json={"experiment_id": experiment_id, "new_name": "mine now"},
        )
    assert r.status_code == 403 and r.json()["error_code"] == "PERMISSION_DENIED"
    assert client.get_experiment(experiment_id).name == good


def test_the_default_experiment_is_there_before_and_after_its_first_run(
    mlflow_login: dict[str, str],
) -> None:
    """A fresh MLflow server has experiment "0", "Default": the client finds it by name and by
    id before anyone logged into it, and a run logged without an experiment goes there."""
    from sqlalchemy import select

    from app.db import session_scope
    from app.experiments import service as experiments_service
    from app.experiments.models import Experiment
    from app.experiments.schemas import ExperimentPatch

    aside = f"default-aside-{secrets.token_hex(4)}"
    with session_scope() as session:  # as on a fresh server: no experiment named Default
        for default in session.scalars(select(Experiment).where(Experiment.name == "Default")):
            experiments_service.edit_experiment(
                session, experiment=default, patch=ExperimentPatch(name=aside)
            )
    client = MlflowClient()
    unmade = client.get_experiment_by_name("Default")
    assert unmade is not None and unmade.experiment_id == "0"
    assert unmade.lifecycle_stage == "active"
    assert client.get_experiment("0").name == "Default"

    run = client.create_run("0")  # what mlflow.start_run() sends with no experiment set
    made = client.get_experiment_by_name("Default")
    assert made is not None and made.experiment_id == run.info.experiment_id
    assert client.get_experiment("0").experiment_id == made.experiment_id
    listed = client.search_runs(["0"])
    assert run.info.run_id in [r.info.run_id for r in listed]
