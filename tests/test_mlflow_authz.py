"""Who may call what on MLflow's API (app/mlflow): anonymous / viewer / owner / other member /
admin against every MLflow route. The torchyard table (tests/test_authz_matrix.py) leaves these
routes to this one: their errors are MLflow's (``error_code``), and they take a token or a
password, never the session cookie (so a cookie-only request is anonymous: no CSRF to check).

    rule     anonymous  viewer  owner  other  admin
    READ     401        ok      ok     ok     ok
    WRITER   401        403     ok     ok     ok     creates (an experiment, a run)
    OWNED    401        403     ok     403    ok     logs into the owner's run
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import make_user
from tests.test_authz_matrix import app_routes

READ, WRITER, OWNED = "read", "writer", "owned"
CODES = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"}
M = "/api/2.0/mlflow"
A = "/api/2.0/mlflow-artifacts"


@dataclass
class World:
    headers: dict[str, dict[str, str]]
    experiment_id: str = ""
    experiment_name: str = ""
    run_id: str = ""

    def fresh_experiment(self, client: Any, tag: str | None = None) -> str:
        owner = self.headers["owner"]
        r = client.post(
            f"{M}/experiments/create", json={"name": secrets.token_hex(6)}, headers=owner
        )
        assert r.status_code == 200, r.text
        experiment_id = str(r.json()["experiment_id"])
        if tag is not None:
            body = {"experiment_id": experiment_id, "key": tag, "value": "v"}
            r = client.post(f"{M}/experiments/set-experiment-tag", json=body, headers=owner)
            assert r.status_code == 200, r.text
        return experiment_id

    def fresh_run(self, client: Any) -> str:
        r = client.post(
            f"{M}/runs/create",
            json={"experiment_id": self.experiment_id},
            headers=self.headers["owner"],
        )
        assert r.status_code == 200, r.text
        return str(r.json()["run"]["info"]["run_id"])


Build = Callable[[World, Any], tuple[str, dict[str, Any]]]


def _rid(w: World, c: Any) -> str:
    return w.run_id


ROUTES: dict[tuple[str, str], tuple[str, Build]] = {
    ("GET", f"{M}/experiments/get-by-name"): (
        READ,
        lambda w, c: (
            f"{M}/experiments/get-by-name",
            {"params": {"experiment_name": w.experiment_name}},
        ),
    ),
    ("POST", f"{M}/experiments/create"): (
        WRITER,
        lambda w, c: (f"{M}/experiments/create", {"json": {"name": secrets.token_hex(6)}}),
    ),
    ("GET", f"{M}/experiments/get"): (
        READ,
        lambda w, c: (f"{M}/experiments/get", {"params": {"experiment_id": w.experiment_id}}),
    ),
    ("POST", f"{M}/experiments/search"): (
        READ,
        lambda w, c: (f"{M}/experiments/search", {"json": {}}),
    ),
    ("POST", f"{M}/experiments/delete"): (
        OWNED,
        lambda w, c: (
            f"{M}/experiments/delete",
            {"json": {"experiment_id": w.fresh_experiment(c)}},
        ),
    ),
    ("POST", f"{M}/experiments/restore"): (
        OWNED,
        lambda w, c: (f"{M}/experiments/restore", {"json": {"experiment_id": w.experiment_id}}),
    ),
    ("POST", f"{M}/experiments/update"): (
        OWNED,
        lambda w, c: (
            f"{M}/experiments/update",
            {"json": {"experiment_id": w.fresh_experiment(c), "new_name": secrets.token_hex(6)}},
        ),
    ),
    ("POST", f"{M}/experiments/set-experiment-tag"): (
        OWNED,
        lambda w, c: (
            f"{M}/experiments/set-experiment-tag",
            {"json": {"experiment_id": w.experiment_id, "key": "k", "value": "v"}},
        ),
    ),
    ("POST", f"{M}/experiments/delete-experiment-tag"): (
        OWNED,
        lambda w, c: (
            f"{M}/experiments/delete-experiment-tag",
            {"json": {"experiment_id": w.fresh_experiment(c, tag="k"), "key": "k"}},
        ),
    ),
    ("GET", f"{M}/artifacts/list"): (
        READ,
        lambda w, c: (f"{M}/artifacts/list", {"params": {"run_id": w.run_id}}),
    ),
    ("POST", f"{M}/runs/create"): (
        WRITER,
        lambda w, c: (f"{M}/runs/create", {"json": {"experiment_id": w.experiment_id}}),
    ),
    ("GET", f"{M}/runs/get"): (
        READ,
        lambda w, c: (f"{M}/runs/get", {"params": {"run_id": w.run_id}}),
    ),
    ("POST", f"{M}/runs/update"): (
        OWNED,
        lambda w, c: (f"{M}/runs/update", {"json": {"run_id": w.run_id, "run_name": "renamed"}}),
    ),
    ("POST", f"{M}/runs/delete"): (
        OWNED,
        lambda w, c: (f"{M}/runs/delete", {"json": {"run_id": w.fresh_run(c)}}),
    ),
    ("POST", f"{M}/runs/search"): (
        READ,
        lambda w, c: (f"{M}/runs/search", {"json": {"experiment_ids": [w.experiment_id]}}),
    ),
    ("POST", f"{M}/runs/log-batch"): (
        OWNED,
        lambda w, c: (
            f"{M}/runs/log-batch",
            {"json": {"run_id": w.run_id, "metrics": [{"key": "m", "value": 1, "step": 1}]}},
        ),
    ),
    ("POST", f"{M}/runs/log-metric"): (
        OWNED,
        lambda w, c: (
            f"{M}/runs/log-metric",
            {"json": {"run_id": w.run_id, "key": "m", "value": 2, "step": 2, "timestamp": 0}},
        ),
    ),
    ("POST", f"{M}/runs/log-parameter"): (
        OWNED,
        lambda w, c: (
            f"{M}/runs/log-parameter",
            {"json": {"run_id": w.run_id, "key": secrets.token_hex(4), "value": "1"}},
        ),
    ),
    ("POST", f"{M}/runs/set-tag"): (
        OWNED,
        lambda w, c: (
            f"{M}/runs/set-tag",
            {"json": {"run_id": w.run_id, "key": "k", "value": "v"}},
        ),
    ),
    ("POST", f"{M}/runs/delete-tag"): (
        OWNED,
        lambda w, c: (
            f"{M}/runs/delete-tag",
            {"json": {"run_id": w.run_id, "key": "mlflow.runName"}},
        ),
    ),
    ("POST", f"{M}/runs/log-inputs"): (
        OWNED,
        lambda w, c: (f"{M}/runs/log-inputs", {"json": {"run_id": w.run_id, "datasets": []}}),
    ),
    ("POST", f"{M}/logged-models/search"): (
        READ,
        lambda w, c: (f"{M}/logged-models/search", {"json": {}}),
    ),
    ("GET", f"{M}/metrics/get-history"): (
        READ,
        lambda w, c: (
            f"{M}/metrics/get-history",
            {"params": {"run_id": w.run_id, "metric_key": "m"}},
        ),
    ),
    ("PUT", f"{A}/artifacts/{{path:path}}"): (
        OWNED,
        lambda w, c: (
            f"{A}/artifacts/{w.experiment_id}/{w.run_id}/artifacts/a.txt",
            {"content": b"an artifact"},
        ),
    ),
    ("GET", f"{A}/artifacts/{{path:path}}"): (
        READ,
        lambda w, c: (f"{A}/artifacts/{w.experiment_id}/{w.run_id}/artifacts/seen.txt", {}),
    ),
    ("GET", f"{A}/artifacts"): (
        READ,
        lambda w, c: (
            f"{A}/artifacts",
            {"params": {"path": f"{w.experiment_id}/{w.run_id}/artifacts"}},
        ),
    ),
}


# MLflow's ENDPOINT_NOT_FOUND for every other path under the prefix: the same 404 for anyone,
# signed in or not (it names only the path asked for).
CATCH_ALL = f"{M}/{{path:path}}"


def test_every_mlflow_route_is_in_the_table(app: Any) -> None:
    found = {r for r in app_routes(list(app.routes)) if r[1].startswith((M + "/", A + "/"))}
    assert {r for r in found if r[1] != CATCH_ALL} == set(ROUTES)
    assert {r for r in found if r[1] == CATCH_ALL}


@pytest.mark.parametrize("actor", ["anonymous", "viewer", "owner"])
def test_an_unknown_mlflow_path_is_not_found_for_anyone(
    client: Any, world: World, actor: str
) -> None:
    r = client.post(f"{M}/registered-models/create", json={}, headers=world.headers[actor])
    assert r.status_code == 404 and r.json()["error_code"] == "ENDPOINT_NOT_FOUND"


@pytest.fixture(scope="module")
def world(app: Any) -> World:
    from fastapi.testclient import TestClient

    actors = {"owner": make_user(), "other": make_user(), "admin": make_user(admin=True)}
    actors["viewer"] = make_user(role="viewer")
    w = World({name: a[2] for name, a in actors.items()} | {"anonymous": {}})
    with TestClient(app) as client:
        w.experiment_name = f"authz-{secrets.token_hex(4)}"
        r = client.post(
            f"{M}/experiments/create",
            json={"name": w.experiment_name},
            headers=w.headers["owner"],
        )
        w.experiment_id = r.json()["experiment_id"]
        w.run_id = w.fresh_run(client)
        r = client.put(
            f"{A}/artifacts/{w.experiment_id}/{w.run_id}/artifacts/seen.txt",
            content=b"seen",
            headers=w.headers["owner"],
        )
        assert r.status_code == 200, r.text
    return w


def _want(rule: str, actor: str) -> int:
    if actor == "anonymous":
        return 401
    if actor == "viewer" and rule != READ:
        return 403
    if actor == "other" and rule == OWNED:
        return 403
    return 200


@pytest.mark.parametrize("key", sorted(ROUTES), ids=lambda k: f"{k[0]} {k[1]}")
def test_mlflow_route_authorization(client: Any, world: World, key: tuple[str, str]) -> None:
    method, _ = key
    rule, build = ROUTES[key]
    for actor in ("anonymous", "viewer", "other", "owner", "admin"):
        url, kwargs = build(world, client)
        r = client.request(method, url, headers=world.headers[actor], **kwargs)
        want = _want(rule, actor)
        assert r.status_code == want, (actor, r.status_code, r.text[:300])
        if want != 200:
            assert r.json()["error_code"] == CODES[want], (actor, r.text[:300])
    if method != "GET":  # the session cookie alone is no login here: nothing to forge
        token = world.headers["owner"]["Authorization"].split()[1]
        url, kwargs = build(world, client)
        client.cookies.clear()
        r = client.request(
            method, url, headers={"Cookie": f"ty_session={token}; ty_csrf=x"}, **kwargs
        )
        client.cookies.clear()
        assert r.status_code == 401 and r.json()["error_code"] == "UNAUTHENTICATED"
