"""The real ``mlflow`` client, unchanged, against torchyard's MLflow API (app/mlflow) on a real
uvicorn server: what a script logs is a torchyard run like any other, and MLflow reads it back."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import mlflow
import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from app.auth.models import User
from app.db import session_scope
from tests.conftest import make_user
from tests.factories import add_run
from tests.mlflow_server import mlflow_member, serving

STEPS = 1000
BATCH = 250


@pytest.fixture(scope="module")
def server(app: Any) -> Iterator[str]:
    with serving(app) as url:
        yield url


@pytest.fixture
def member(server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A member whose token the MLflow client sends (MLFLOW_TRACKING_TOKEN)."""
    return mlflow_member(server, monkeypatch)


def _loss(step: int, lr: float) -> float:
    return 1.0 / (1.0 + lr * step)


def _log_run(client: MlflowClient, run_id: str, lr: float) -> None:
    now = int(time.time() * 1000)
    for start in range(1, STEPS + 1, BATCH):
        client.log_batch(
            run_id,
            metrics=[Metric("loss", _loss(s, lr), now + s, s) for s in range(start, start + BATCH)],
        )


def test_a_script_logs_through_mlflow_and_torchyard_shows_everything(
    server: str, member: dict[str, str], tmp_path: Path
) -> None:
    name = f"mlflow-{secrets.token_hex(4)}"
    mlflow.set_experiment(name)
    artifact = tmp_path / "notes.txt"
    artifact.write_text("what the run learned\n")
    with mlflow.start_run(run_name="baseline") as active:
        run_id = active.info.run_id
        mlflow.log_params({"lr": 0.01, "optimizer": "sgd"})
        mlflow.set_tags({"team": "vision", "purpose": "a long sentence, not a torchyard tag"})
        _log_run(MlflowClient(), run_id, lr=0.01)
        mlflow.log_artifact(str(artifact), artifact_path="reports")

    with httpx.Client(base_url=server, headers=member, timeout=30) as api:
        run = api.get(f"/api/runs/{run_id}").json()
        assert run["status"] == "succeeded" and run["origin"] == "mlflow"
        assert run["name"] == "baseline" and run["finished_at"] is not None
        assert run["params"]["params.lr"] == "0.01"
        assert run["params"]["params.optimizer"] == "sgd"
        assert run["params"]["tags.team"] == "vision"
        assert run["params"]["tags.purpose"] == "a long sentence, not a torchyard tag"
        assert run["tags"] == ["team=vision"]
        assert run["summary"]["loss"]["step"] == STEPS
        assert run["summary"]["loss"]["last"] == pytest.approx(_loss(STEPS, 0.01))
        series = api.get(
            f"/api/runs/{run_id}/metrics", params={"keys": "loss", "max_points": 1_000_000}
        ).json()["series"]["loss"]
        assert series["step"] == list(range(1, STEPS + 1))
        assert series["value"] == pytest.approx([_loss(s, 0.01) for s in range(1, STEPS + 1)])
        files = {f["path"]: f for f in api.get(f"/api/runs/{run_id}/files").json()}
        assert files["reports/notes.txt"]["size_bytes"] == artifact.stat().st_size
        got = api.get(f"/api/runs/{run_id}/files/reports/notes.txt")
        assert got.text == "what the run learned\n"

    client = MlflowClient()
    history = client.get_metric_history(run_id, "loss")
    assert [m.step for m in history] == list(range(1, STEPS + 1))
    assert history[-1].value == pytest.approx(_loss(STEPS, 0.01))
    read = client.get_run(run_id)
    assert read.info.status == "FINISHED" and read.info.run_name == "baseline"
    assert read.data.params == {"lr": "0.01", "optimizer": "sgd"}
    assert read.data.tags["team"] == "vision"
    assert read.data.metrics["loss"] == pytest.approx(_loss(STEPS, 0.01))
    assert [a.path for a in client.list_artifacts(run_id)] == ["reports"]
    assert [a.path for a in client.list_artifacts(run_id, "reports")] == ["reports/notes.txt"]
    local = client.download_artifacts(run_id, "reports/notes.txt", str(tmp_path / "back"))
    assert Path(local).read_text() == "what the run learned\n"


def test_the_pages_show_a_run_logged_from_outside(server: str, member: dict[str, str]) -> None:
    username, password, _headers = make_user()
    with httpx.Client(base_url=server, timeout=30) as browser:
        r = browser.post("/login", data={"username": username, "password": password})
        assert r.status_code in (200, 303)
        client = MlflowClient()
        experiment_id = client.create_experiment(f"mlflow-pages-{secrets.token_hex(4)}")
        run_id = client.create_run(experiment_id, run_name="from-a-laptop").info.run_id
        client.log_metric(run_id, "loss", 0.5, step=1)
        page = browser.get(f"/runs/{run_id}")
        assert page.status_code == 200 and "from-a-laptop" in page.text
        assert browser.get(f"/experiments/{experiment_id}").status_code == 200
        assert browser.get("/").status_code == 200


def test_search_runs_filters_by_param_and_sorts_by_last_metric(
    server: str, member: dict[str, str]
) -> None:
    name = f"mlflow-search-{secrets.token_hex(4)}"
    experiment_id = mlflow.create_experiment(name)
    client = MlflowClient()
    ids = {}
    for lr, optimizer in ((0.1, "adam"), (0.01, "adam"), (0.001, "sgd")):
        run = client.create_run(experiment_id, run_name=f"lr-{lr}")
        client.log_batch(run.info.run_id, params=[Param("lr", str(lr)), Param("opt", optimizer)])
        _log_run(client, run.info.run_id, lr)
        client.set_terminated(run.info.run_id)
        ids[lr] = run.info.run_id

    found = mlflow.search_runs(
        experiment_ids=[experiment_id],
        filter_string="params.opt = 'adam'",
        order_by=["metrics.loss DESC"],
        output_format="list",
    )
    assert [r.info.run_id for r in found] == [ids[0.01], ids[0.1]]  # 0.01 learned less
    assert found[0].data.metrics["loss"] == pytest.approx(_loss(STEPS, 0.01))
    by_metric = mlflow.search_runs(
        experiment_names=[name], filter_string="metrics.loss < 0.5", output_format="list"
    )
    assert {r.info.run_id for r in by_metric} == {ids[0.1], ids[0.01]}
    numeric = mlflow.search_runs(
        experiment_ids=[experiment_id],
        filter_string="params.lr <= 0.01 and attributes.status = 'FINISHED'",
        order_by=["params.lr ASC"],
        output_format="list",
    )
    assert [r.info.run_id for r in numeric] == [ids[0.001], ids[0.01]]
    page = client.search_runs([experiment_id], max_results=2)
    assert len(page) == 2 and page.token
    rest = client.search_runs([experiment_id], max_results=2, page_token=page.token)
    assert len(rest) == 1 and not rest.token


def test_a_viewer_may_read_but_not_log(server: str, member: dict[str, str], monkeypatch) -> None:
    client = MlflowClient()
    experiment_id = client.create_experiment(f"mlflow-roles-{secrets.token_hex(4)}")
    run_id = client.create_run(experiment_id).info.run_id
    _v, _p, viewer = make_user(role="viewer")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", viewer["Authorization"].split()[1])
    assert client.get_run(run_id).info.status == "RUNNING"
    with pytest.raises(MlflowException) as refused:
        client.log_metric(run_id, "loss", 0.5, step=1)
    assert refused.value.error_code == "PERMISSION_DENIED"
    with pytest.raises(MlflowException) as refused:
        client.create_run(experiment_id)
    assert refused.value.error_code == "PERMISSION_DENIED"
    _o, _q, other = make_user()
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", other["Authorization"].split()[1])
    with pytest.raises(MlflowException) as refused:
        client.log_param(run_id, "lr", "0.1")
    assert refused.value.error_code == "PERMISSION_DENIED"
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "not-a-token")
    with pytest.raises(MlflowException) as refused:
        client.get_run(run_id)
    assert refused.value.error_code == "UNAUTHENTICATED"


def test_username_and_password_log_in(server: str, member: dict[str, str], monkeypatch) -> None:
    username, password, _headers = make_user()
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN")
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", username)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
    client = MlflowClient()
    experiment_id = client.create_experiment(f"mlflow-basic-{secrets.token_hex(4)}")
    run = client.create_run(experiment_id)
    client.log_metric(run.info.run_id, "acc", 0.5, step=1)
    assert client.get_run(run.info.run_id).info.user_id == username
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password + "x")
    with pytest.raises(MlflowException) as refused:
        client.get_run(run.info.run_id)
    assert refused.value.error_code == "UNAUTHENTICATED"


def test_mlflow_limits_and_errors_come_in_mlflow_shape(server: str, member: dict[str, str]) -> None:
    client = MlflowClient()
    experiment_id = client.create_experiment(f"mlflow-limits-{secrets.token_hex(4)}")
    run_id = client.create_run(experiment_id).info.run_id
    url = f"{server}/api/2.0/mlflow/runs/log-batch"
    metrics = [{"key": "m", "value": 1.0, "timestamp": 0, "step": s} for s in range(1001)]
    r = httpx.post(url, json={"run_id": run_id, "metrics": metrics}, headers=member)
    assert r.status_code == 400
    assert r.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert "at most 1000 metrics" in r.json()["message"]
    params = [{"key": f"p{i}", "value": "1"} for i in range(101)]
    r = httpx.post(url, json={"run_id": run_id, "params": params}, headers=member)
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_PARAMETER_VALUE")
    client.log_param(run_id, "lr", "0.1")
    client.log_param(run_id, "lr", "0.1")  # the same value again is fine
    with pytest.raises(MlflowException) as refused:
        client.log_param(run_id, "lr", "0.2")
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE"
    with pytest.raises(MlflowException) as refused:
        client.get_run("999999")
    assert refused.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    r = httpx.get(f"{server}/api/2.0/mlflow/runs/get", params={"run_id": run_id})
    assert (r.status_code, r.json()["error_code"]) == (401, "UNAUTHENTICATED")
    big = {"run_id": run_id, "tags": [{"key": "t", "value": "x" * 2_000_000}]}
    r = httpx.post(url, json=big, headers=member)
    assert r.status_code == 413


def test_tags_deleted_and_a_run_deleted(server: str, member: dict[str, str]) -> None:
    client = MlflowClient()
    experiment_id = client.create_experiment(f"mlflow-delete-{secrets.token_hex(4)}")
    run_id = client.create_run(experiment_id).info.run_id
    client.log_batch(run_id, tags=[RunTag("stage", "dev")])
    client.log_metric(run_id, "loss", float("nan"), step=1)
    assert client.get_run(run_id).data.tags["stage"] == "dev"
    client.delete_tag(run_id, "stage")
    assert "stage" not in client.get_run(run_id).data.tags
    assert math.isnan(client.get_metric_history(run_id, "loss")[0].value)  # NaN comes back
    client.delete_run(run_id)  # still running: ended, then deleted
    r = httpx.get(f"{server}/api/runs/{run_id}", headers=member)
    assert r.status_code == 404


def test_a_job_run_is_read_but_its_status_and_deletion_stay_torchyard_s(
    server: str, member: dict[str, str]
) -> None:
    """A job's run, seen through MLflow: readable; its status is its worker's (INVALID_STATE),
    and a delete while it is queued is refused by the deletion's own rule, in MLflow's shape."""
    token = member["Authorization"].split()[1]
    with session_scope() as session:
        from app.auth.service import check_token

        owner = check_token(session, token=token)
        assert isinstance(owner, User)
        run_id = str(add_run(session, owner_id=owner.id, config={"seed": 1}, status="queued"))
    client = MlflowClient()
    assert client.get_run(run_id).info.status == "SCHEDULED"
    with pytest.raises(MlflowException) as refused:
        client.set_terminated(run_id)
    assert refused.value.error_code == "INVALID_STATE"
    with pytest.raises(MlflowException) as refused:
        client.delete_run(run_id)
    assert refused.value.error_code == "INVALID_STATE"
    assert "has not ended" in refused.value.message


def test_log_batch_refusals_come_in_the_order_the_dependencies_gave(
    server: str, member: dict[str, str]
) -> None:
    """log-batch runs as one worker-thread hop (app/mlflow/routes.py), not as FastAPI
    dependencies: a body that is not JSON first, then who asks, then the batch's shape."""
    url = f"{server}/api/2.0/mlflow/runs/log-batch"
    client = MlflowClient()
    run_id = client.create_run(
        client.create_experiment(f"order-{secrets.token_hex(4)}")
    ).info.run_id
    as_json = {"Content-Type": "application/json"}
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({"content": b'{"run_id": ', "headers": as_json}, 400, "INVALID_PARAMETER_VALUE", "JSON"),
        ({"json": {"metrics": "x"}}, 401, "UNAUTHENTICATED", "MLFLOW_TRACKING_TOKEN"),
        ({"headers": member}, 400, "INVALID_PARAMETER_VALUE", "required parameter 'body'"),
        ({"json": {"run_id": run_id, "params": "x"}, "headers": member}, 400, "", "params"),
        ({"json": {"run_id": run_id, "tags": [{"value": "v"}]}, "headers": member}, 400, "", "key"),
        ({"json": {"run_id": "999999"}, "headers": member}, 404, "RESOURCE_DOES_NOT_EXIST", ""),
    ]
    for kwargs, status, code, says in cases:
        r = httpx.post(url, **kwargs)
        assert r.status_code == status, (kwargs, r.text)
        assert r.json()["error_code"] == (code or "INVALID_PARAMETER_VALUE"), r.text
        assert says in r.json()["message"], r.text
    r = httpx.post(
        url, json={"run_id": run_id, "metrics": [{"key": "m", "value": 1}]}, headers=member
    )
    assert (r.status_code, r.json()) == (200, {})
    assert r.headers["content-type"] == "application/json"
