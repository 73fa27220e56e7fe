"""The run page in-process: who may see it, and the hooks the browser tests rely on."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.conftest import make_user
from tests.page_modules import assert_modules_preloaded


def logged_in(app) -> tuple[TestClient, dict[str, str]]:
    username, password, headers = make_user()
    client = TestClient(app)
    r = client.post(
        "/login", data={"username": username, "password": password}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    return client, headers


def new_run(client: TestClient, headers: dict[str, str]) -> dict:
    exp = client.post(
        "/api/experiments",
        json={"name": "page", "config": {"recipe": "tiny_mlp", "params": {}, "seed": 5}},
        headers=headers,
    )
    assert exp.status_code == 201, exp.text
    run = client.post(f"/api/experiments/{exp.json()['id']}/runs", headers=headers)
    assert run.status_code == 201, run.text
    return run.json()


def test_run_page_renders_for_its_owner_with_the_dom_hooks(app) -> None:
    client, headers = logged_in(app)
    run = new_run(client, headers)
    r = client.get(f"/runs/{run['id']}")
    assert r.status_code == 200
    html = r.text
    for hook in (
        'id="run-status"',
        'data-status="queued"',
        'id="smoothing"',
        'id="log-scale"',
        'id="x-axis"',
        'id="log-tail"',
        'id="checkpoints"',
        'id="cancel-run"',
        f'href="/experiments/{run["experiment_id"]}"',
        "/static/run.js",
        "/static/vendor/chart-",
        "/static/chart.js",
    ):
        assert hook in html, hook
    assert f"Run {run['id']}" in html and ">5</dd>" in html  # id and seed


def test_run_page_redirects_to_login_when_logged_out(client, user_headers) -> None:
    run = new_run(client, user_headers)
    r = client.get(f"/runs/{run['id']}", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == f"/login?next=/runs/{run['id']}"


def test_run_page_of_another_user_is_readable_without_a_cancel_button(app, user_headers) -> None:
    client, _headers = logged_in(app)
    run = new_run(client, user_headers)
    r = client.get(f"/runs/{run['id']}")
    assert r.status_code == 200 and "/static/run.js" in r.text
    assert 'id="cancel-run"' not in r.text and 'data-may-write="false"' in r.text
    own = new_run(client, _headers)
    assert 'id="cancel-run"' in client.get(f"/runs/{own['id']}").text


def test_unknown_run_page_is_a_friendly_404(app) -> None:
    client, _headers = logged_in(app)
    r = client.get("/runs/987654321")
    assert r.status_code == 404
    assert "run 987654321 not found" in r.text and 'id="current-user"' in r.text


def test_the_session_cookie_reads_the_api_but_writes_need_the_csrf_header(app) -> None:
    client, headers = logged_in(app)
    run = new_run(client, headers)
    assert client.get(f"/api/runs/{run['id']}/metrics?max_points=4000").status_code == 200
    assert client.post(f"/api/runs/{run['id']}/cancel").status_code == 403
    csrf = {"X-CSRF-Token": client.cookies["ty_csrf"]}
    assert client.post(f"/api/runs/{run['id']}/cancel", headers=csrf).status_code == 202


def test_malformed_run_id_is_a_404_page(app) -> None:
    client, _headers = logged_in(app)
    assert client.get("/runs/abc").status_code == 404


def test_every_module_of_the_run_page_is_preloaded(app) -> None:
    """A fresh browser fetched the run page's 22 modules an import level a round trip (issue
    43: most of the first view's 1.38 s): the page names each for preloading at once."""
    client, headers = logged_in(app)
    page = client.get(f"/runs/{new_run(client, headers)['id']}").text
    # the deepest of the import chains, and the history's early download
    assert_modules_preloaded(
        page, ("/static/run/charts.js", "/static/lib/join.js", "/static/run/prefetch.js")
    )
