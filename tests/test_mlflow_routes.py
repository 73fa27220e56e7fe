"""MLflow's error shapes on its routes (app/mlflow/routes.py, app/mlflow/errors.py) and the
tracking API's own artifact listing, as MLflow's tests (tests/tracking/test_rest_tracking.py)
expect them: ENDPOINT_NOT_FOUND for a path MLflow does not serve here, the parameter named in
INVALID_PARAMETER_VALUE, RESOURCE_DOES_NOT_EXIST for any unknown run id."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import mlflow
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

M = "/api/2.0/mlflow"


@pytest.fixture
def api(mlflow_server: str, mlflow_login: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=mlflow_server, headers=mlflow_login, timeout=30) as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/registered-models/get"), ("POST", "/no/such/route"), ("DELETE", "/runs/get")],
)
def test_an_unknown_route_is_endpoint_not_found(api: httpx.Client, method: str, path: str) -> None:
    r = api.request(method, M + path)
    assert r.status_code == 404
    assert r.json()["error_code"] == "ENDPOINT_NOT_FOUND", r.text


def test_bad_parameters_are_named_as_mlflow_names_them(api: httpx.Client) -> None:
    run_id = MlflowClient().create_run(MlflowClient().create_experiment(secrets.token_hex(6)))
    rid = run_id.info.run_id
    point = {"run_id": rid, "key": "metric", "value": 41, "timestamp": 59, "step": 26}
    cases = [
        ("log-metric", {**point, "run_id": 31}, "Invalid value 31 for parameter 'run_id' supplied"),
        ("log-metric", {**point, "key": 31}, "Invalid value 31 for parameter 'key' supplied"),
        ("log-metric", {**point, "step": "foo"}, "Invalid value \"foo\" for parameter 'step'"),
        ("log-metric", {**point, "run_id": None}, "Missing value for required parameter 'run_id'"),
        ("log-metric", {**point, "key": None}, "Missing value for required parameter 'key'"),
        # the worker's system series: forged GPU use would hide an idle run (issue 42)
        ("log-metric", {**point, "key": "sys/gpu0/util"}, "are the worker's system series"),
        (
            "log-batch",
            {"run_id": rid, "metrics": [{**point, "key": "sys/run/gpu_util_mean"}]},
            "are the worker's system series",
        ),
        ("set-tag", {"run_id": rid, "key": "k", "value": 41}, "Invalid value 41 for parameter"),
        ("set-tag", {"run_id": rid, "value": "v"}, "Missing value for required parameter 'key'"),
        ("log-batch", {"run_id": rid, "params": "foo"}, 'Invalid value "foo" for parameter'),
        (
            "log-batch",
            {"run_id": rid, "metrics": [{"key": "mae", "value": "x", "timestamp": 1}]},
            "for parameter 'metrics[0].value' supplied",
        ),
    ]
    for route, body, words in cases:
        r = api.post(f"{M}/runs/{route}", json=body)
        assert r.status_code == 400, (route, body, r.text)
        assert r.json()["error_code"] == "INVALID_PARAMETER_VALUE"
        assert words in r.json()["message"], (route, body, r.text)


@pytest.mark.parametrize("run_id", ["fake_run_id", "99999999", "9" * 40, "0x1f"])
def test_any_unknown_run_id_does_not_exist(mlflow_login: dict[str, str], run_id: str) -> None:
    client = MlflowClient()
    for call in (lambda: client.get_run(run_id), lambda: client.delete_tag(run_id, "taggity")):
        with pytest.raises(MlflowException, match=r"Run .+ not found") as found:
            call()
        assert found.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_the_tracking_api_lists_a_run_s_artifacts(
    api: httpx.Client, mlflow_login: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("bb")
    mlflow.set_experiment(f"artifacts-{secrets.token_hex(4)}")
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(tmp_path / "a.txt"))
        mlflow.log_artifact(str(tmp_path / "b.txt"), artifact_path="reports/deep")
    rid = run.info.run_id
    top = api.get(f"{M}/artifacts/list", params={"run_id": rid}).json()
    assert top["root_uri"] == run.info.artifact_uri
    assert top["files"] == [
        {"path": "a.txt", "is_dir": False, "file_size": 1},
        {"path": "reports", "is_dir": True},
    ]
    deep = api.get(f"{M}/artifacts/list", params={"run_id": rid, "path": "reports/deep"})
    assert deep.json()["files"] == [{"path": "reports/deep/b.txt", "is_dir": False, "file_size": 2}]
    bad = api.get(f"{M}/artifacts/list", params={"run_id": rid, "path": "../path"})
    assert bad.status_code == 400
    assert bad.json() == {"error_code": "INVALID_PARAMETER_VALUE", "message": "Invalid path"}


def test_search_runs_breaks_ties_and_bounds_pages_as_mlflow(api: httpx.Client) -> None:
    """MLflow's SqlAlchemyStore: the clauses, then start_time DESC (unless sorted by it), then
    the run id ascending; max_results 1..50,000, else its words."""
    client = MlflowClient()
    experiment_id = client.create_experiment(f"ties-{secrets.token_hex(4)}")
    same = [client.create_run(experiment_id, start_time=1_000).info.run_id for _ in range(3)]
    later = client.create_run(experiment_id, start_time=2_000).info.run_id
    for run_id in [*same, later]:
        client.log_metric(run_id, "m", 1.0, step=1)

    def order(*order_by: str) -> list[str]:
        found = client.search_runs([experiment_id], order_by=list(order_by))
        return [r.info.run_id for r in found]

    assert order() == [later, *same]
    assert order("metrics.m DESC") == [later, *same]
    assert order("attributes.start_time ASC") == [*same, later]
    assert order("metrics.m", "attributes.start_time") == [*same, later]

    for bad, words in ((0, "It must be a positive integer"), (50_001, "It must be at most 50000")):
        body = {"experiment_ids": [experiment_id], "max_results": bad}
        for route in ("runs/search", "experiments/search"):
            r = api.post(f"{M}/{route}", json=body)
            assert r.status_code == 400, r.text
            message = r.json()["message"]
            assert f"Invalid value {bad} for parameter 'max_results' supplied" in message
            assert words in message
