"""The experiments list's "best" column (app/experiments/best.py): each experiment by its own
metric, the one chosen for it (PATCH /api/experiments/{id}), else its newest sweep's, else
its config's checkpoint metric, else none (issue 31: the list hard-coded the max of val/acc)."""

from __future__ import annotations

import re
import secrets

import pytest

from tests.conftest import make_user
from tests.test_pages import launch, log_points, new_experiment, user  # noqa: F401


def _best_cell(client, name: str) -> str:
    html = client.get("/", params={"q": name, "owner": "everyone"}).text
    rows = re.findall(r'<tr data-experiment-id="\d+">(.*?)</tr>', html, re.S)
    assert len(rows) == 1, html
    cell = re.search(r'<td class="num best"[^>]*>.*?</td>', rows[0], re.S)
    assert cell, rows[0]
    return cell.group(0)


def test_best_uses_the_newest_sweeps_metric_and_goal(client, user) -> None:  # noqa: F811
    name = f"best-sweep-{secrets.token_hex(3)}"
    exp = new_experiment(client, user, name=name)
    a, b = (launch(client, user, exp["id"])["id"] for _ in range(2))
    log_points(a, [("val/loss", 1, 0.9), ("val/loss", 2, 0.4), ("val/acc", 2, 0.99)])
    log_points(b, [("val/loss", 1, 0.7), ("val/loss", 2, 0.25)])
    body = {
        "experiment_id": exp["id"],
        "method": "random",
        "metric": {"name": "val/loss", "goal": "minimize"},
        "parameters": {"params.lr": {"values": [0.1]}},
        "max_runs": 1,
    }
    r = client.post("/api/sweeps", json=body, headers=user)
    assert r.status_code == 201, r.text
    cell = _best_cell(client, name)
    assert 'data-metric="val/loss"' in cell and 'data-goal="min"' in cell, cell
    assert ">0.25 <" in cell, cell  # the least of the minima, not val/acc's 0.99


def test_best_falls_back_to_the_configs_checkpoint_metric(client, user) -> None:  # noqa: F811
    name = f"best-ckpt-{secrets.token_hex(3)}"
    checkpoints = {"metric": "train/acc", "mode": "max"}
    exp = new_experiment(client, user, name=name, checkpoints=checkpoints)
    a, b = (launch(client, user, exp["id"])["id"] for _ in range(2))
    log_points(a, [("train/acc", 1, 0.5), ("train/acc", 2, 0.625), ("val/acc", 2, 0.875)])
    log_points(b, [("train/acc", 1, 0.75), ("train/acc", 2, 0.5)])
    cell = _best_cell(client, name)
    assert 'data-metric="train/acc"' in cell and 'data-goal="max"' in cell, cell
    assert ">0.75 <" in cell, cell


def test_best_is_empty_without_a_metric_of_the_experiments_own(client, user) -> None:  # noqa: F811
    name = f"best-none-{secrets.token_hex(3)}"
    exp = new_experiment(client, user, name=name)
    run = launch(client, user, exp["id"])["id"]
    log_points(run, [("val/acc", 1, 0.875)])
    cell = _best_cell(client, name)
    assert "data-metric" not in cell and "0.875" not in cell, cell


def test_the_experiments_own_choice_wins_over_its_sweep(client, user) -> None:  # noqa: F811
    """PATCH /api/experiments/{id} {best}: the list's column uses it before the sweep's metric;
    `best: null` gives the sweep's back."""
    name = f"best-own-{secrets.token_hex(3)}"
    exp = new_experiment(client, user, name=name)
    a, b = (launch(client, user, exp["id"])["id"] for _ in range(2))
    log_points(a, [("val/loss", 1, 0.5), ("train/acc", 1, 0.25), ("train/acc", 2, 0.5)])
    log_points(b, [("val/loss", 1, 0.125), ("train/acc", 1, 0.375)])
    sweep = {
        "experiment_id": exp["id"],
        "method": "random",
        "metric": {"name": "val/loss", "goal": "minimize"},
        "parameters": {"params.lr": {"values": [0.1]}},
        "max_runs": 1,
    }
    assert client.post("/api/sweeps", json=sweep, headers=user).status_code == 201
    assert 'data-metric="val/loss"' in _best_cell(client, name)

    r = client.patch(
        f"/api/experiments/{exp['id']}",
        json={"best": {"metric": "train/acc", "mode": "min"}},
        headers=user,
    )
    assert r.status_code == 200, r.text
    assert r.json()["best"] == {"metric": "train/acc", "mode": "min"}
    assert r.json()["name"] == name  # absent fields stay
    got = client.get(f"/api/experiments/{exp['id']}", headers=user).json()
    assert got["best"] == {"metric": "train/acc", "mode": "min"}
    cell = _best_cell(client, name)
    assert 'data-metric="train/acc"' in cell and 'data-goal="min"' in cell, cell
    assert 'data-source="experiment"' in cell and ">0.25 <" in cell, cell
    page = client.get(f"/experiments/{exp['id']}").text
    assert '<code id="best-key">train/acc</code>' in page
    assert 'data-source="experiment"' in page

    r = client.patch(f"/api/experiments/{exp['id']}", json={"best": None}, headers=user)
    assert r.status_code == 200 and r.json()["best"] is None, r.text
    cell = _best_cell(client, name)
    assert 'data-metric="val/loss"' in cell and 'data-source="sweep"' in cell, cell


def test_an_experiment_with_no_metric_gets_one_by_choice(client, user) -> None:  # noqa: F811
    name = f"best-chosen-{secrets.token_hex(3)}"
    exp = new_experiment(client, user, name=name)
    run = launch(client, user, exp["id"])["id"]
    log_points(run, [("val/acc", 1, 0.875), ("val/acc", 2, 0.75)])
    r = client.patch(
        f"/api/experiments/{exp['id']}",
        json={"best": {"metric": "val/acc"}, "description": "now judged by val/acc"},
        headers=user,
    )
    assert r.status_code == 200, r.text
    assert r.json()["best"] == {"metric": "val/acc", "mode": "max"}  # max unless told
    assert r.json()["description"] == "now judged by val/acc"
    cell = _best_cell(client, name)
    assert ">0.875 <" in cell and 'data-goal="max"' in cell, cell


def test_editing_another_members_experiment_is_refused(client, user) -> None:  # noqa: F811
    exp = new_experiment(client, user, name=f"best-theirs-{secrets.token_hex(3)}")
    other = make_user()[2]
    viewer = make_user(role="viewer")[2]
    body = {"best": {"metric": "val/acc", "mode": "max"}}
    r = client.patch(f"/api/experiments/{exp['id']}", json=body, headers=other)
    assert r.status_code == 403 and "belongs to another user" in r.json()["detail"], r.text
    r = client.patch(f"/api/experiments/{exp['id']}", json=body, headers=viewer)
    assert r.status_code == 403 and "viewer" in r.json()["detail"], r.text
    assert client.get(f"/api/experiments/{exp['id']}", headers=user).json()["best"] is None
    admin = make_user(admin=True)[2]
    r = client.patch(f"/api/experiments/{exp['id']}", json=body, headers=admin)
    assert r.status_code == 200 and r.json()["best"]["metric"] == "val/acc", r.text
    r = client.patch("/api/experiments/999999999", json=body, headers=user)
    assert r.status_code == 404, r.text


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"best": {"metric": ""}}, ["body", "best", "metric"]),
        ({"best": {"metric": "x" * 256}}, ["body", "best", "metric"]),
        ({"best": {"metric": "a\nb"}}, ["body", "best", "metric"]),
        ({"best": {"metric": "val/acc", "mode": "maximize"}}, ["body", "best", "mode"]),
        ({"best": {"metric": "val/acc", "goal": "max"}}, ["body", "best", "goal"]),
        ({"best": "val/acc"}, ["body", "best"]),
        ({"config": {"recipe": "tiny_mlp"}}, ["body", "config"]),
        ({"name": ""}, ["body", "name"]),
    ],
)
def test_a_bad_edit_is_a_422_naming_the_field(client, user, body, loc) -> None:  # noqa: F811
    exp = new_experiment(client, user, name=f"best-bad-{secrets.token_hex(3)}")
    r = client.patch(f"/api/experiments/{exp['id']}", json=body, headers=user)
    assert r.status_code == 422, r.text
    assert any(e["loc"] == loc for e in r.json()["detail"]), r.text
