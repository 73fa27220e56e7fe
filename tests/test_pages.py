"""HTML pages in-process: the experiments list, the new-experiment form, an experiment, compare.

Logged in the way a browser is (POST /login sets the session cookie); data made through the
real API and services. Runs are queued on the in-memory broker and never executed.
"""

from __future__ import annotations

import re
import secrets

import pytest

from app.compare.views import config_diff, flatten, parse_run_ids
from app.db import session_scope
from app.metrics.service import ingest_points
from app.metrics.summary import RunSummary, run_summaries
from tests.conftest import make_user
from torchyard.recipes.catalog import RECIPES


def login(client, username: str, password: str) -> None:
    r = client.post(
        "/login", data={"username": username, "password": password}, follow_redirects=False
    )
    assert r.status_code == 303, r.text
    assert "ty_session" in client.cookies


@pytest.fixture
def user(client):
    """A fresh user, logged in on `client`; yields their API headers."""
    username, password, headers = make_user()
    login(client, username, password)
    return headers


def new_experiment(client, headers, name="exp", **config):
    config = {"recipe": "tiny_mlp", "params": {}, **config}
    r = client.post("/api/experiments", json={"name": name, "config": config}, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


def launch(client, headers, experiment_id, overrides=None) -> dict:
    r = client.post(
        f"/api/experiments/{experiment_id}/runs",
        json={"overrides": overrides or {}},
        headers=headers,
    )
    assert r.status_code == 201, r.text
    return r.json()


def row_ids(html: str, attr: str) -> list[int]:
    return [int(x) for x in re.findall(rf'<tr {attr}="(\d+)"', html)]


def log_points(run_id: int, points: list[tuple[str, int, float | None]]) -> None:
    with session_scope() as session:
        ingest_points(session, run_id=run_id, points=[(k, s, v, 1.0e9 + s) for k, s, v in points])


# --- experiments list ----------------------------------------------------------------------


def test_logged_out_home_redirects_to_login(client) -> None:
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=/"


def test_list_shows_everyones_experiments_and_mine_filters_to_own(client, user) -> None:
    mine = new_experiment(client, user, name="mine-" + secrets.token_hex(3))
    their_name, _, their_headers = make_user()
    theirs = new_experiment(client, their_headers, name="theirs-" + secrets.token_hex(3))
    html = client.get("/").text
    ids = row_ids(html, "data-experiment-id")
    assert mine["id"] in ids and theirs["id"] in ids
    assert f'href="/experiments/{mine["id"]}"' in html and theirs["name"] in html
    assert 'id="owner-everyone" aria-current="page"' in html
    html = client.get("/?owner=mine").text
    ids = row_ids(html, "data-experiment-id")
    assert mine["id"] in ids and theirs["id"] not in ids
    assert 'id="owner-mine" aria-current="page"' in html
    assert '<input type="hidden" name="owner" value="mine">' in html  # a search keeps it
    ids = row_ids(client.get(f"/?owner={their_name}").text, "data-experiment-id")
    assert ids == [theirs["id"]]
    assert row_ids(client.get("/?owner=nobody-at-all").text, "data-experiment-id") == []


def test_list_shows_runs_last_status_and_best_of_its_metric(client, user) -> None:
    # The best of the experiment's own metric (app/experiments/best.py): here the config's.
    exp = new_experiment(client, user, checkpoints={"metric": "val/acc", "mode": "max"})
    first = launch(client, user, exp["id"])
    second = launch(client, user, exp["id"])
    client.post(f"/api/runs/{second['id']}/cancel", headers=user)
    log_points(first["id"], [("val/acc", 10, 0.5), ("val/acc", 20, 0.875)])
    log_points(second["id"], [("val/acc", 10, 0.25)])
    html = client.get("/").text
    row = re.search(rf'<tr data-experiment-id="{exp["id"]}">(.*?)</tr>', html, re.S)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    assert cells[2] == "2"  # runs
    assert 'class="badge status-cancelled"' in cells[3]  # the last run's status
    assert cells[4].startswith("0.875 ") and "val/acc" in cells[4]  # best val/acc of its runs


def test_admin_sees_every_users_experiments(client) -> None:
    other = new_experiment(client, make_user()[2], name="someone-" + secrets.token_hex(3))
    username, password, _ = make_user(admin=True)
    login(client, username, password)
    assert other["id"] in row_ids(client.get("/").text, "data-experiment-id")


def test_search_filters_by_name_case_insensitively(client, user) -> None:
    tag = secrets.token_hex(3)
    hit = new_experiment(client, user, name=f"Digits-{tag}-baseline")
    miss = new_experiment(client, user, name=f"mlp-{tag}")
    ids = row_ids(client.get("/", params={"q": f"DIGITS-{tag}"}).text, "data-experiment-id")
    assert ids == [hit["id"]]
    assert miss["id"] not in ids
    html = client.get("/", params={"q": "no-such-name-" + tag}).text
    assert 'class="empty"' in html and "Clear the search" in html


def test_search_treats_like_wildcards_literally(client, user) -> None:
    new_experiment(client, user, name="plain")
    html = client.get("/", params={"q": "%"}).text
    assert row_ids(html, "data-experiment-id") == []


def test_pagination_newest_first_twenty_per_page(client, user) -> None:
    made = [new_experiment(client, user, name=f"p{i}")["id"] for i in range(23)]
    first = client.get("/?owner=mine").text
    assert row_ids(first, "data-experiment-id") == made[::-1][:20]
    assert 'rel="next" href="/?owner=mine&amp;page=2"' in first and 'rel="prev"' not in first
    second = client.get("/?owner=mine&page=2").text
    assert row_ids(second, "data-experiment-id") == made[::-1][20:]
    assert 'rel="prev" href="/?owner=mine&amp;page=1"' in second and 'rel="next"' not in second
    assert client.get("/?page=nonsense").status_code == 200


def test_empty_list_invites_to_create_one(client, user) -> None:
    html = client.get("/?owner=mine").text
    assert "No experiments yet" in html and 'href="/experiments/new"' in html
    assert 'id="experiments"' not in html


# --- new experiment form -------------------------------------------------------------------


def test_new_form_renders_every_recipe_param_with_its_default(client, user) -> None:
    html = client.get("/experiments/new").text
    assert 'id="experiment-form"' in html and "novalidate" in html
    assert 'id="create-and-launch"' in html
    for name in ("name", "seed", "deterministic", "resources.gpus", "resources.nproc"):
        assert f'name="{name}"' in html
    first = next(iter(RECIPES))
    for recipe in RECIPES.values():
        assert f'<option value="{recipe.name}"' in html
        for param in recipe.params:
            field = re.search(
                rf'<(input|select)[^>]*id="param-{recipe.name}-{param.name}"[^>]*>', html
            )
            assert field is not None, (recipe.name, param.name)
            # only the shown recipe's fields carry the name the form submits
            assert (f'name="params.{param.name}"' in field.group(0)) == (recipe.name == first)
            if param.choices:
                assert f'<option value="{param.default}" selected>' in html
            else:
                assert f'value="{param.default}"' in field.group(0)
    assert html.count('name="params.lr"') == 1


def test_clone_prefills_from_the_experiment(client, user) -> None:
    source = new_experiment(
        client,
        user,
        name="tuned",
        params={"lr": 0.25, "optimizer": "adamw", "epochs": 7},
        seed=99,
        deterministic=True,
        resources={"gpus": 0, "nproc": 2},
    )
    html = client.get(f"/experiments/new?from={source['id']}").text
    assert 'value="tuned (copy)"' in html
    assert re.search(r'<option value="tiny_mlp" selected>', html)
    assert re.search(r'id="param-tiny_mlp-lr"[^>]*name="params.lr"[^>]*value="0.25"', html)
    assert re.search(r'id="param-tiny_mlp-epochs"[^>]*value="7"', html)
    assert '<option value="adamw" selected>' in html
    assert re.search(r'name="seed"[^>]*value="99"', html)
    assert re.search(r'name="deterministic" checked', html)
    assert re.search(r'name="resources.nproc"[^>]*value="2"', html)


def test_a_teammates_experiment_can_be_cloned_into_your_own(client, user) -> None:
    theirs = new_experiment(client, make_user()[2], name="their-digits")
    r = client.get(f"/experiments/new?from={theirs['id']}")
    assert r.status_code == 200 and "their-digits (copy)" in r.text


# --- one experiment ------------------------------------------------------------------------


def test_experiment_page_shows_config_runs_and_launch_controls(client, user) -> None:
    exp = new_experiment(client, user, name="digits-ish", params={"lr": 0.125})
    runs = [launch(client, user, exp["id"]) for _ in range(2)]
    log_points(runs[0]["id"], [("train/loss", 1, 2.0), ("train/loss", 2, 1.5)])
    html = client.get(f"/experiments/{exp['id']}").text
    assert 'id="experiment-config"' in html and "0.125" in html
    assert row_ids(html, "data-run-id") == [runs[1]["id"], runs[0]["id"]]
    assert f'href="/runs/{runs[0]["id"]}"' in html
    assert 'class="badge status-queued"' in html
    assert ">1.5<" in html  # last train/loss
    assert 'id="overrides"' in html and 'id="launch-run"' in html
    assert f'id="clone-experiment" class="button" href="/experiments/new?from={exp["id"]}"' in html


def test_experiment_page_without_runs_says_how_to_start(client, user) -> None:
    exp = new_experiment(client, user)
    html = client.get(f"/experiments/{exp['id']}").text
    assert "No runs yet" in html and 'id="runs"' not in html


def test_a_member_launches_a_run_of_another_users_experiment_as_their_own(client, user) -> None:
    theirs = new_experiment(client, make_user()[2], params={"lr": 0.375})
    r = client.get(f"/experiments/{theirs['id']}")
    assert r.status_code == 200 and "0.375" in r.text
    assert 'id="launch-run"' in r.text and 'id="launch-theirs"' in r.text
    assert 'id="clone-experiment"' in r.text  # a member may still copy it into their own
    me = client.get("/api/users/me", headers=user).json()["id"]
    run = launch(client, user, theirs["id"], {"params": {"lr": 0.5}})  # what the form posts
    assert run["owner_id"] == me and run["experiment_id"] == theirs["id"]
    viewer = make_user(role="viewer")[2]
    refused = client.post(f"/api/experiments/{theirs['id']}/runs", json={}, headers=viewer)
    assert refused.status_code == 403 and "viewer" in refused.json()["detail"]


def test_missing_experiment_is_a_friendly_404(client, user) -> None:
    for path in ("/experiments/999999999", "/experiments/not-a-number"):
        r = client.get(path)
        assert r.status_code == 404 and "text/html" in r.headers["content-type"], path
        assert "Not found" in r.text


# --- compare -------------------------------------------------------------------------------


def test_an_address_no_route_serves_is_a_page_for_a_browser_and_json_for_a_client(client) -> None:
    # issue 41: a browser got FastAPI's raw {"detail":"Not Found"} at /users
    page = client.get("/users", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "There is no page at /users." in page.text and "your experiments" in page.text
    for path, accept in (
        ("/users", "application/json"),
        ("/users", "*/*"),
        ("/api/nope", "text/html"),
    ):
        r = client.get(path, headers={"Accept": accept})
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}, (path, accept)
    # other statuses stay FastAPI's: a method a route does not take
    r = client.delete("/login", headers={"Accept": "text/html"})
    assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}


def test_compare_diffs_only_differing_keys_and_charts_every_metric(client, user) -> None:
    exp = new_experiment(client, user, seed=5)
    a = launch(client, user, exp["id"], {"params": {"lr": 0.1}})
    b = launch(client, user, exp["id"], {"params": {"lr": 0.2}})
    log_points(a["id"], [("train/loss", 1, 1.0)])
    log_points(b["id"], [("val/acc", 1, 0.5)])
    html = client.get(f"/compare?runs={a['id']},{b['id']}").text
    assert re.findall(r'<tr data-key="([^"]+)"', html) == ["params.lr"]
    assert re.findall(r'<div class="metric-chart" data-key="([^"]+)"', html) == [
        "train/loss",
        "val/acc",
    ]
    assert f'data-runs="{a["id"]},{b["id"]}"' in html
    for run_id in (a["id"], b["id"]):
        assert re.search(rf'<input type="checkbox" name="run" value="{run_id}" checked>', html)
    assert 'id="compare-apply"' in html and "/static/vendor/chart-" in html


def test_compare_identical_configs_says_no_differences(client, user) -> None:
    exp = new_experiment(client, user, seed=5)
    a, b = launch(client, user, exp["id"]), launch(client, user, exp["id"])
    html = client.get(f"/compare?runs={a['id']},{b['id']}").text
    assert 'id="config-diff"' in html and "<tr data-key=" not in html
    assert "No differences" in html


def test_compare_shows_teammates_runs_and_lists_recent_ones(client, user) -> None:
    mine = launch(client, user, new_experiment(client, user, name="pickme")["id"])
    other_headers = make_user()[2]
    theirs = launch(
        client, other_headers, new_experiment(client, other_headers, name="yours")["id"]
    )
    html = client.get(f"/compare?runs={theirs['id']}").text
    assert f'value="{theirs["id"]}"' in html and "yours" in html
    assert f"Not shown: run {theirs['id']}" not in html
    assert f'name="run" value="{mine["id"]}"' in html and "pickme" in html
    assert "Not shown: run 987654321" in client.get("/compare?runs=987654321").text


def test_compare_without_selection_explains_what_to_do(client, user) -> None:
    html = client.get("/compare").text
    assert "Pick two or more runs" in html
    assert 'id="config-diff"' not in html


# --- helpers -------------------------------------------------------------------------------


def test_run_summaries_last_loss_and_best_acc_for_many_runs(client, user) -> None:
    exp = new_experiment(client, user)
    a, b, c = (launch(client, user, exp["id"])["id"] for _ in range(3))
    log_points(a, [("train/loss", 1, 3.0), ("train/loss", 9, 1.25), ("train/loss", 5, 0.5)])
    log_points(a, [("val/acc", 3, 0.5), ("val/acc", 9, 0.75), ("val/acc", 6, 0.625)])
    log_points(b, [("train/loss", 1, float("nan")), ("val/acc", 1, None)])
    with session_scope() as session:
        got = run_summaries(session, run_ids=[a, b, c])
    assert got == {
        a: RunSummary(last_loss=1.25, best_acc=0.75),
        b: RunSummary(last_loss=None, best_acc=None),
        c: RunSummary(),
    }


def test_config_helpers() -> None:
    assert parse_run_ids(["3, 1,x,3", "2"]) == [3, 1, 2]
    assert flatten({"a": {"b": 1, "c": {}}, "d": [1]}) == {"a.b": 1, "a.c": {}, "d": [1]}
    assert config_diff([{"p": {"x": 1, "y": 2}}, {"p": {"x": 1}, "z": True}]) == [
        ("p.y", ["2", "–"]),
        ("z", ["–", "true"]),
    ]
    assert config_diff([{"p": 1}]) == []
