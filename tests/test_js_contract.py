"""The front-end's URL builders against the server's own contract: app/static/lib/urls.js's
builders, every call site of the pages and the templates' delete URLs name only a (method,
path) that the app's /openapi.json has (the page builders: one of its HTML routes).

The document comes from the app factory, as /openapi.json serves it, and goes to
tests/js/contract/check.js (node), which imports the builders themselves: a URL is checked as
the browser would ask for it, not as a test's literal string says. That checker's own tests
(tests/js/urls_contract.test.js, `make js-check`) show it refusing a wrong path, a wrong
method, a builder without a sample and a call with a method its builder does not name."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from tests.test_authz_matrix import app_routes

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "tests" / "js" / "contract" / "check.js"
# `{name:path}` in a route's path: a parameter that takes several segments (the document
# writes it `{name}`).
PATH_PARAM = re.compile(r"\{(\w+):path\}")


def routes_document() -> dict[str, Any]:
    """The OpenAPI paths, which of their parameters span segments, and the HTML routes."""
    app = create_app()
    path_params: dict[str, list[str]] = {}
    pages: dict[str, set[str]] = {}
    for method, path in app_routes(list(app.routes)):
        multi = PATH_PARAM.findall(path)
        if multi:
            path_params[PATH_PARAM.sub(r"{\1}", path)] = multi
        if not path.startswith("/api/"):
            pages.setdefault(path, set()).add(method)
    return {
        "paths": app.openapi()["paths"],
        "pathParams": path_params,
        "pages": [{"path": p, "methods": sorted(m)} for p, m in sorted(pages.items())],
    }


def node() -> str:
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is missing: the front-end's contract cannot be checked")
        pytest.skip("node is not installed")
    return found


def run_checker(tmp_path: Path, document: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps(document))
    return subprocess.run(
        [node(), str(CHECKER), str(routes)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_every_url_builder_and_call_names_a_route_of_openapi(tmp_path: Path) -> None:
    done = run_checker(tmp_path, routes_document())
    assert done.returncode == 0, done.stderr + done.stdout
    assert "0 problem(s)" in done.stdout


def test_a_route_gone_from_the_document_fails_the_check(tmp_path: Path) -> None:
    """The break a real change makes: the server renames or drops a route the pages use
    (here the sweep's cancel, and PATCH of a run), and the check names both."""
    document = routes_document()
    del document["paths"]["/api/sweeps/{sweep_id}/cancel"]
    del document["paths"]["/api/runs/{run_id}"]["patch"]
    done = run_checker(tmp_path, document)
    assert done.returncode == 1
    assert "api.sweepCancel: /api/sweeps/5/cancel matches no path" in done.stderr
    assert "api.run: PATCH /api/runs/7" in done.stderr
