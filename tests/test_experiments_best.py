"""The experiments list's "best" column (app/experiments/best.py): each experiment by its own
metric, its newest sweep's, else its config's checkpoint metric, else none (issue 31: the
list hard-coded the max of val/acc)."""

from __future__ import annotations

import re
import secrets

from tests.test_pages import launch, log_points, new_experiment, user  # noqa: F401


def _best_cell(client, name: str) -> str:  # type: ignore[no-untyped-def]
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
