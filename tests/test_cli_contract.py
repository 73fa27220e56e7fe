"""The client CLI against the server's API document: every request the CLI makes is an
endpoint of torchyard/cli/endpoints.py, and each of them exists in the app factory's
`/openapi.json` with that method, those path parameters, query parameters the operation
declares and the kind of body it takes. A path, method, query name or body the server does not
have fails here, before a user meets a 404 or a 422 (issue 38)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import Match

from app.main import create_app
from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api
from torchyard.cli.config import Target

CLI = Path(ep.__file__).resolve().parent
MEDIA = {
    "json": "application/json",
    "form": "application/x-www-form-urlencoded",
    "multipart": "multipart/form-data",
}


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app()


@pytest.fixture(scope="module")
def document(app: FastAPI) -> dict[str, Any]:
    return app.openapi()


def is_routed(app: FastAPI, page: ep.Endpoint) -> bool:
    """Whether a route of the app takes ``page`` (its placeholders filled): the pages are not
    in the OpenAPI document, so the router itself is asked."""
    path = re.sub(r"\{\w+\}", "1", page.template)
    scope = {"type": "http", "path": path, "method": page.method, "root_path": ""}
    return any(route.matches(scope)[0] is Match.FULL for route in app.routes)


def contract_problems(endpoints: Iterable[ep.Endpoint], document: dict[str, Any]) -> list[str]:
    """What each endpoint names that the OpenAPI document does not have."""
    problems = []
    for e in endpoints:
        where = f"{e.method} {e.template}"
        operation = document["paths"].get(e.template, {}).get(e.method.lower())
        if operation is None:
            problems.append(f"{where}: no such operation in /openapi.json")
            continue
        parameters = operation.get("parameters", [])
        path = {p["name"] for p in parameters if p["in"] == "path"}
        if path != e.path_params:
            problems.append(f"{where}: path parameters {sorted(path)} in the API")
        query = {p["name"] for p in parameters if p["in"] == "query"}
        if e.query - query:
            problems.append(f"{where}: no query parameter {sorted(e.query - query)}")
        body = operation.get("requestBody")
        if e.body is not None and MEDIA[e.body] not in (body or {}).get("content", {}):
            problems.append(f"{where}: takes no {MEDIA[e.body]} body")
        if e.body is None and body is not None and body.get("required"):
            problems.append(f"{where}: needs a body the CLI does not send")
    return problems


def test_every_endpoint_the_cli_uses_is_in_the_openapi_document(document: dict[str, Any]) -> None:
    assert len(ep.ALL) >= 30
    assert contract_problems(ep.ALL, document) == []


def test_every_page_the_cli_links_to_is_a_route_of_the_app(app: FastAPI) -> None:
    assert [p.template for p in ep.PAGES if not is_routed(app, p)] == []
    assert not is_routed(app, ep.Endpoint("GET", "/runz/{run_id}"))  # the check can fail


def test_every_mlflow_route_the_importer_writes_through_is_a_route_of_the_app(
    app: FastAPI,
) -> None:
    assert [e.template for e in ep.MLFLOW if not is_routed(app, e)] == []


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        (ep.Endpoint("GET", "/api/run/{run_id}"), "no such operation"),  # a wrong path
        (ep.Endpoint("PUT", "/api/runs/{run_id}/cancel"), "no such operation"),  # wrong method
        (ep.Endpoint("GET", "/api/runs/{run_id}/logs", query=frozenset({"lines"})), "query"),
        (ep.Endpoint("POST", "/api/auth/token", body="json"), "takes no application/json"),
        (ep.Endpoint("POST", "/api/experiments"), "needs a body"),
    ],
)
def test_the_check_fails_on_what_the_server_does_not_have(
    document: dict[str, Any], endpoint: ep.Endpoint, problem: str
) -> None:
    (found,) = contract_problems([endpoint], document)
    assert problem in found


def test_the_cli_names_no_api_path_outside_the_endpoint_table() -> None:
    """Every URL goes through endpoints.py: a literal `/api/...` anywhere else in the CLI (an
    f-string's text too) would be a request the contract test never sees."""
    found = []
    for path in sorted(CLI.rglob("*.py")):
        if path.name == "endpoints.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            # a URL's text starts a string or an f-string (a docstring or message may name one)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith("/api"):
                    found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert found == []


def test_a_call_fills_its_path_and_is_held_to_its_endpoint() -> None:
    assert ep.RUN_FILE(run_id=3, path="out/a b#1.pt").path == "/api/runs/3/files/out/a%20b%231.pt"
    assert ep.RUN_CHECKPOINT(run_id=3, name="x/y").path == "/api/runs/3/checkpoints/x%2Fy"
    with pytest.raises(TypeError, match="run_id"):
        ep.RUN(run=3)
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": 3})

    with Api(Target("http://box", "t"), transport=httpx.MockTransport(server)) as api:
        assert api.json(ep.RUN_LOGS(run_id=3), params={"tail": 1}) == {"id": 3}
        with pytest.raises(TypeError, match="no query"):
            api.json(ep.RUN_LOGS(run_id=3), params={"lines": 1})
        with pytest.raises(TypeError, match="no json body"):
            api.json(ep.RUN_CANCEL(run_id=3), json={})
    assert [str(r.url) for r in seen] == ["http://box/api/runs/3/logs?tail=1"]
