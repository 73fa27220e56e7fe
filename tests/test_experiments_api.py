from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.db import session_scope
from app.experiments.models import Experiment
from app.runs.models import Run
from tests.factories import DEFAULT_LIMITS


def digits(**params: object) -> dict:
    return {"recipe": "digits_cnn", "params": params, "seed": 1029, "deterministic": True}


def count(model: type) -> int:
    with session_scope() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_create_experiment_fills_defaults(client, user_headers) -> None:
    r = client.post(
        "/api/experiments",
        json={"name": "digits", "config": digits(epochs=3)},
        headers=user_headers,
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["config"]["params"]["epochs"] == 3
    assert body["config"]["params"]["batch_size"] == 64  # default filled in
    assert body["config"]["resources"] == {
        "gpus": 0,
        "nproc": 1,
        "launcher": "torchrun",
        "pool": "local",
        **DEFAULT_LIMITS,
    }
    got = client.get(f"/api/experiments/{body['id']}", headers=user_headers).json()
    assert got["name"] == "digits" and got["run_count"] == 0


@pytest.mark.parametrize(
    ("config", "loc", "needle"),
    [
        ({"recipe": "resnet9000"}, ["body", "config", "recipe"], "unknown or missing recipe"),
        ({"params": {"epochs": 1}}, ["body", "config", "recipe"], "digits_cnn"),
        (digits(lr=-0.1), ["body", "config", "params", "lr"], "greater than 0"),
        (digits(epochs=0), ["body", "config", "params", "epochs"], "greater than or equal to 1"),
        (digits(epochs="ten"), ["body", "config", "params", "epochs"], "valid integer"),
        (digits(optimizer="lbfgs"), ["body", "config", "params", "optimizer"], "'sgd'"),
        (digits(warmup=3), ["body", "config", "params", "warmup"], "unknown key 'warmup'"),
        ({**digits(), "colour": "red"}, ["body", "config", "colour"], "unknown key 'colour'"),
        (
            {**digits(), "resources": {"gpus": -1}},
            ["body", "config", "resources", "gpus"],
            "greater than or equal to 0",
        ),
        (
            {**digits(), "resources": {"memory_gb": 0}},
            ["body", "config", "resources", "memory_gb"],
            "greater than 0",
        ),
        (
            {**digits(), "resources": {"max_processes": 2}},
            ["body", "config", "resources", "max_processes"],
            "greater than or equal to 16",
        ),
        (
            {**digits(), "resources": {"disk_gb": "lots"}},
            ["body", "config", "resources", "disk_gb"],
            "valid number",
        ),
        (
            {**digits(), "resources": {"cpus": -1}},
            ["body", "config", "resources", "cpus"],
            "greater than 0",
        ),
    ],
)
def test_bad_config_is_422_naming_the_field_and_stores_nothing(
    client, user_headers, config, loc, needle
) -> None:
    before = count(Experiment)
    r = client.post("/api/experiments", json={"name": "x", "config": config}, headers=user_headers)
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert any(e["loc"] == loc and needle in e["msg"] for e in errors), errors
    assert count(Experiment) == before


def test_missing_name_is_422(client, user_headers) -> None:
    r = client.post("/api/experiments", json={"config": digits()}, headers=user_headers)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "name"]


def test_bad_json_is_422(client, user_headers) -> None:
    r = client.post(
        "/api/experiments",
        content=b"{not json",
        headers={**user_headers, "Content-Type": "application/json"},
    )
    assert r.status_code == 422


def test_everyone_reads_every_experiment_and_any_member_launches_from_it(
    client, user_headers, admin_headers
) -> None:
    """Members launch runs in any experiment, and the run is theirs (design.md, issue 31);
    a viewer launches none."""
    from tests.conftest import make_user

    other = make_user()[2]
    other_id = client.get("/api/users/me", headers=other).json()["id"]
    viewer = make_user(role="viewer")[2]
    mine = client.post(
        "/api/experiments", json={"name": "mine", "config": digits()}, headers=user_headers
    ).json()
    assert client.get(f"/api/experiments/{mine['id']}", headers=other).status_code == 200
    assert mine["id"] in [e["id"] for e in client.get("/api/experiments", headers=other).json()]
    r = client.post(f"/api/experiments/{mine['id']}/runs", json={}, headers=other)
    assert r.status_code == 201 and r.json()["owner_id"] == other_id, r.text
    r = client.post(f"/api/experiments/{mine['id']}/runs", json={}, headers=viewer)
    assert r.status_code == 403, r.text
    assert client.get(f"/api/experiments/{mine['id']}", headers=admin_headers).status_code == 200
    assert client.get("/api/experiments/999999", headers=user_headers).status_code == 404


def test_experiments_filter_by_owner(client, user_headers) -> None:
    from tests.conftest import make_user

    other_name, _, other = make_user()
    theirs = client.post(
        "/api/experiments", json={"name": "theirs", "config": digits()}, headers=other
    ).json()

    def ids(query: str) -> list[int]:
        listed = client.get(f"/api/experiments?{query}", headers=user_headers).json()
        return [e["id"] for e in listed]

    assert theirs["id"] in ids("owner=everyone") and theirs["id"] in ids(f"owner={other_name}")
    assert theirs["id"] not in ids("owner=me")
    r = client.get("/api/experiments?owner=nobody-here", headers=user_headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "owner"]


def test_run_on_missing_experiment_is_404(client, user_headers) -> None:
    before = count(Run)
    r = client.post("/api/experiments/999999/runs", json={}, headers=user_headers)
    assert r.status_code == 404 and "experiment 999999 not found" in r.json()["detail"]
    assert count(Run) == before


def test_an_experiment_created_with_its_run_commits_both(client, user_headers) -> None:
    r = client.post(
        "/api/experiments",
        json={"name": "atomic", "config": digits(epochs=1), "run": {"priority": 3}},
        headers=user_headers,
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["run"]["status"] == "queued" and body["run"]["experiment_id"] == body["id"]
    assert body["run"]["priority"] == 3 and body["run_count"] == 1
    runs = client.get(f"/api/experiments/{body['id']}/runs", headers=user_headers).json()
    assert [run["id"] for run in runs] == [body["run"]["id"]]


def test_a_submission_whose_run_is_refused_leaves_no_experiment(client, user_headers) -> None:
    """Issue 39: the experiment and its run were two requests, and a run refused (or a request
    cut) after the first left an experiment with no run. One request, one transaction now."""
    before = count(Experiment)
    r = client.post(
        "/api/experiments",
        json={"name": "orphan", "config": digits(epochs=1), "run": {"priority": 11}},
        headers=user_headers,
    )
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "run", "priority"], r.text
    assert "TORCHYARD_MAX_USER_PRIORITY" in r.text
    assert count(Experiment) == before
