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
from tests.mlflow_server import serving

STEPS = 1000
BATCH = 250


@pytest.fixture(scope="module")
def server(app: Any) -> Iterator[str]:
    with serving(app) as url:
        yield url


@pytest.fixture
def member(server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A member whose token the MLflow client sends (MLFLOW_TRACKING_TOKEN)."""
    _name, _password, headers = make_user()
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", headers["Authorization"].split()[1])
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    mlflow.set_tracking_uri(server)
    return headers


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


def test_a_history_read_in_pages_keeps_every_point(server: str, member: dict[str, str]) -> None:
    """metrics/get-history's pages (the database writes their JSON: app/mlflow/history.py):
    every point comes back as logged, page by page, NaN as NaN. Timestamps are the logged
    milliseconds (they were truncated: 1.001 s stored read back as 1000 ms)."""
    client = MlflowClient()
    run_id = client.create_run(client.create_experiment(f"h-{secrets.token_hex(4)}")).info.run_id
    values = [float("nan") if s == 7 else 0.5 + s for s in range(2500)]
    for start in range(0, 2500, 1000):
        client.log_batch(
            run_id,
            metrics=[
                Metric("loss", values[s], 1000 + s, s)
                for s in range(start, min(2500, start + 1000))
            ],
        )
    got, token = [], None
    while True:
        params = {"run_id": run_id, "metric_key": "loss", "max_results": 1000}
        r = httpx.get(
            f"{server}/api/2.0/mlflow/metrics/get-history",
            params=params | ({"page_token": token} if token else {}),
            headers=member,
        )
        r.raise_for_status()
        got += r.json()["metrics"]
        token = r.json().get("next_page_token")
        if not token:
            break
    assert [p["step"] for p in got] == list(range(2500))
    assert [p["timestamp"] for p in got] == [1000 + s for s in range(2500)]
    assert got[7]["value"] == "NaN"
    assert [p["value"] for p in got if p["step"] != 7] == [v for v in values if v == v]
    r = httpx.get(f"{server}/api/2.0/mlflow/runs/get", params={"run_id": run_id}, headers=member)
    assert r.json()["run"]["data"]["metrics"] == [
        {"key": "loss", "value": 2499.5, "timestamp": 3499, "step": 2499}
    ]
    assert len(client.get_metric_history(run_id, "loss")) == 2500


# What the database writes for each value must read back as the same double (app/mlflow/history.py):
# the edges of SQLite's printf path (1e-100 < |v| < 1e100), PostgreSQL's whole numbers (written
# without a fraction there), the shortest texts, the longest mantissas, the extremes.
EDGE_VALUES = [
    0.0,
    -0.0,
    3.0,
    -7.0,
    1e15,
    1e15 - 1,
    1e16,
    2.0**53,
    2.0**53 + 2,
    0.1,
    1 / 3,
    2 / 3,
    0.30000000000000004,
    1e-05,
    -2.5e-07,
    123456789.125,
    1.2345678901234568e17,
    1.0000000000000002,
    0.9999999999999999,
    1e-100,
    1.0000000000000001e-100,
    1e100,
    9.999999999999999e99,
    -1e300,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    2.2250738585072014e-308,
    5e-324,
    -5e-324,
    *(1.0 / (1 + s) for s in range(1, 400)),
    *(math.pi * 10.0**e for e in range(-120, 121, 7)),
]


def test_a_history_s_values_read_back_as_the_same_doubles(
    server: str, member: dict[str, str]
) -> None:
    """Every finite value comes back as the double logged (a JSON float: ``3.0``, not ``3``);
    NaN and both infinities as "NaN" (torchyard stores them as a gap); -0.0 keeps its sign on
    PostgreSQL (SQLite stores an integral REAL as an integer: 0.0 there, as before); big
    timestamps and steps as integers; the real client reads the same values."""
    from tests.conftest import DATABASE_URL

    client = MlflowClient()
    run_id = client.create_run(client.create_experiment(f"v-{secrets.token_hex(4)}")).info.run_id
    values = [math.nan, math.inf, -math.inf, *EDGE_VALUES]
    base = 1_764_200_000_123
    steps = [s * 1_000_003 for s in range(len(values))]
    client.log_batch(
        run_id, metrics=[Metric("v", v, base + s, steps[s]) for s, v in enumerate(values)]
    )
    r = httpx.get(
        f"{server}/api/2.0/mlflow/metrics/get-history",
        params={"run_id": run_id, "metric_key": "v"},
        headers=member,
    )
    r.raise_for_status()
    got = r.json()["metrics"]
    assert [p["step"] for p in got] == steps
    assert [p["timestamp"] for p in got] == [base + s for s in range(len(values))]
    assert [p["key"] for p in got] == ["v"] * len(values)
    assert [p["value"] for p in got[:3]] == ["NaN"] * 3
    finite = [p["value"] for p in got[3:]]
    assert all(type(v) is float for v in finite), [v for v in finite if type(v) is not float]
    assert finite == EDGE_VALUES
    negative_zero = math.copysign(1.0, finite[1])
    assert negative_zero == (-1.0 if DATABASE_URL.startswith("postgresql") else 1.0)
    read = client.get_metric_history(run_id, "v")
    assert all(math.isnan(m.value) for m in read[:3])
    assert [m.value for m in read[3:]] == EDGE_VALUES
    assert r.headers["content-type"] == "application/json"


def test_a_history_s_key_is_written_as_json_whatever_its_characters(
    server: str, member: dict[str, str]
) -> None:
    """The key is part of each point's text the database writes: quotes, backslashes, printf's
    % and non-ASCII come back as logged (a raw log-batch: the client allows fewer names)."""
    client = MlflowClient()
    run_id = client.create_run(client.create_experiment(f"k-{secrets.token_hex(4)}")).info.run_id
    key = 'loss %s %d %% "q" \\ ü\'s/å'
    body = {"run_id": run_id, "metrics": [{"key": key, "value": 0.5, "timestamp": 7, "step": 3}]}
    httpx.post(
        f"{server}/api/2.0/mlflow/runs/log-batch", json=body, headers=member
    ).raise_for_status()
    r = httpx.get(
        f"{server}/api/2.0/mlflow/metrics/get-history",
        params={"run_id": run_id, "metric_key": key},
        headers=member,
    )
    assert r.json() == {"metrics": [{"key": key, "value": 0.5, "timestamp": 7, "step": 3}]}
