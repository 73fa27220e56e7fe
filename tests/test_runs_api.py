"""Run routes in-process (the broker is kombu's in-memory transport: nothing is executed)."""

from __future__ import annotations

from app.settings import get_settings
from tests.conftest import make_user


def tiny(**params: object) -> dict:
    return {"recipe": "tiny_mlp", "params": params}


def new_experiment(client, headers, config=None) -> dict:
    r = client.post(
        "/api/experiments", json={"name": "e", "config": config or tiny()}, headers=headers
    )
    assert r.status_code == 201, r.text
    return r.json()


def test_create_run_is_queued_with_merged_config_and_a_seed(client, user_headers) -> None:
    exp = new_experiment(client, user_headers, tiny(epochs=2))
    r = client.post(
        f"/api/experiments/{exp['id']}/runs",
        json={"overrides": {"params": {"lr": 0.2}}},
        headers=user_headers,
    )
    assert r.status_code == 201, r.text
    run = r.json()
    assert run["status"] == "queued" and run["experiment_id"] == exp["id"]
    assert run["config"]["params"]["epochs"] == 2 and run["config"]["params"]["lr"] == 0.2
    assert isinstance(run["seed"], int) and run["config"]["seed"] == run["seed"]
    assert client.get(f"/api/runs/{run['id']}", headers=user_headers).json()["id"] == run["id"]


def test_priority_is_stored_and_bounded(client, user_headers) -> None:
    exp = new_experiment(client, user_headers)
    run = client.post(
        f"/api/experiments/{exp['id']}/runs", json={"priority": 5}, headers=user_headers
    ).json()
    assert run["priority"] == 5
    assert client.get(f"/api/runs/{run['id']}", headers=user_headers).json()["priority"] == 5
    default = client.post(f"/api/experiments/{exp['id']}/runs", headers=user_headers).json()
    assert default["priority"] == 0
    r = client.post(
        f"/api/experiments/{exp['id']}/runs", json={"priority": 10**6}, headers=user_headers
    )
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "priority"]


def test_run_without_body_uses_experiment_config(client, user_headers) -> None:
    exp = new_experiment(client, user_headers, {**tiny(), "seed": 7})
    run = client.post(f"/api/experiments/{exp['id']}/runs", headers=user_headers).json()
    assert run["seed"] == 7


def test_bad_overrides_are_422_under_overrides(client, user_headers) -> None:
    exp = new_experiment(client, user_headers)
    r = client.post(
        f"/api/experiments/{exp['id']}/runs",
        json={"overrides": {"params": {"lr": 0}}},
        headers=user_headers,
    )
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "overrides", "params", "lr"]
    runs = client.get(f"/api/experiments/{exp['id']}/runs", headers=user_headers).json()
    assert runs == []


def test_cancel_queued_run_ends_it_and_second_cancel_conflicts(client, user_headers) -> None:
    exp = new_experiment(client, user_headers)
    run = client.post(f"/api/experiments/{exp['id']}/runs", headers=user_headers).json()
    r = client.post(f"/api/runs/{run['id']}/cancel", headers=user_headers)
    assert r.status_code == 202 and r.json()["status"] == "cancelled"
    again = client.post(f"/api/runs/{run['id']}/cancel", headers=user_headers)
    assert again.status_code == 409 and "already finished" in again.json()["detail"]


def test_other_users_read_a_run_but_only_admins_change_it(
    client, user_headers, admin_headers
) -> None:
    exp = new_experiment(client, user_headers)
    run = client.post(f"/api/experiments/{exp['id']}/runs", headers=user_headers).json()
    other = make_user()[2]
    for path in ("", "/metrics", "/logs", "/checkpoints"):
        r = client.get(f"/api/runs/{run['id']}{path}", headers=other)
        assert r.status_code == 200, (path, r.text)
    r = client.post(f"/api/runs/{run['id']}/cancel", headers=other)
    assert r.status_code == 403 and "another user" in r.json()["detail"], r.text
    # A member launches a run of another's experiment: the new run is theirs (issue 31).
    r = client.post(f"/api/experiments/{exp['id']}/runs", headers=other)
    assert r.status_code == 201, r.text
    assert run["id"] in [x["id"] for x in client.get("/api/runs", headers=other).json()["runs"]]
    assert run["id"] not in [
        x["id"] for x in client.get("/api/runs?owner=me", headers=other).json()["runs"]
    ]
    assert client.post(f"/api/runs/{run['id']}/cancel", headers=admin_headers).status_code == 202


def test_missing_run_is_404_everywhere(client, user_headers) -> None:
    for path in (
        "/api/runs/424242",
        "/api/runs/424242/metrics",
        "/api/runs/424242/logs",
        "/api/runs/424242/checkpoints",
        "/api/runs/424242/checkpoints/final.pt",
    ):
        r = client.get(path, headers=user_headers)
        assert r.status_code == 404 and "run 424242 not found" in r.json()["detail"], path


def test_unknown_checkpoint_is_404(client, user_headers) -> None:
    exp = new_experiment(client, user_headers)
    run = client.post(f"/api/experiments/{exp['id']}/runs", headers=user_headers).json()
    r = client.get(f"/api/runs/{run['id']}/checkpoints/../../etc/passwd", headers=user_headers)
    assert r.status_code == 404
    r = client.get(f"/api/runs/{run['id']}/checkpoints/final.pt", headers=user_headers)
    assert r.status_code == 404 and "checkpoint" in r.json()["detail"]


def test_metrics_of_a_run_without_points_is_empty(client, user_headers) -> None:
    exp = new_experiment(client, user_headers)
    run = client.post(f"/api/experiments/{exp['id']}/runs", headers=user_headers).json()
    r = client.get(f"/api/runs/{run['id']}/metrics?max_points=100", headers=user_headers)
    assert r.status_code == 200 and r.json() == {"series": {}}
    bad = client.get(f"/api/runs/{run['id']}/metrics?max_points=1", headers=user_headers)
    assert bad.status_code == 422


def test_a_non_admin_cannot_set_a_priority_above_the_ceiling(
    client, user_headers, admin_headers
) -> None:
    ceiling = get_settings().max_user_priority
    exp = new_experiment(client, user_headers)
    r = client.post(
        f"/api/experiments/{exp['id']}/runs", json={"priority": 1000}, headers=user_headers
    )
    assert r.status_code == 422
    error = r.json()["detail"][0]
    assert error["loc"] == ["body", "priority"] and f"at most {ceiling}" in error["msg"]
    ok = client.post(
        f"/api/experiments/{exp['id']}/runs", json={"priority": ceiling}, headers=user_headers
    )
    assert ok.status_code == 201
    # an admin may (on anyone's experiment)
    r = client.post(
        f"/api/experiments/{exp['id']}/runs", json={"priority": 1000}, headers=admin_headers
    )
    assert r.status_code == 201 and r.json()["priority"] == 1000


def test_a_multi_node_run_is_refused_where_the_server_turned_them_off(
    client, user_headers, monkeypatch
) -> None:
    """On by default; a deployment whose workers cannot fence a multi-node job's network
    turns them off (docs/multi-node.md)."""
    exp = new_experiment(client, user_headers)
    body = {"overrides": {"resources": {"nodes": 2, "nproc": 1, "gpus": 0}}}
    with monkeypatch.context() as env:
        env.setenv("TORCHYARD_MULTI_NODE_RUNS", "false")
        get_settings.cache_clear()
        try:
            r = client.post(f"/api/experiments/{exp['id']}/runs", json=body, headers=user_headers)
        finally:
            env.undo()
            get_settings.cache_clear()
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "overrides", "resources", "nodes"]
    assert "TORCHYARD_MULTI_NODE_RUNS" in error["msg"]
    assert client.get(f"/api/experiments/{exp['id']}/runs", headers=user_headers).json() == []
