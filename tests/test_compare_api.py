"""GET /api/compare/metrics (many runs' series of a key in one request) and the compare page's
run filter, in-process against the real app and SQLite."""

from __future__ import annotations

import re

from tests.test_pages import launch, log_points, new_experiment, user  # noqa: F401


def test_many_runs_series_of_a_key_with_status_unknown_ids_left_out(client, user) -> None:  # noqa: F811
    exp = new_experiment(client, user)
    a, b = launch(client, user, exp["id"]), launch(client, user, exp["id"])
    log_points(a["id"], [("train/loss", s, 1.0 / s) for s in range(1, 101)])
    log_points(b["id"], [("train/loss", 1, 2.0), ("val/acc", 1, 0.5)])
    r = client.get(
        "/api/compare/metrics",
        params={"runs": f"{b['id']},{a['id']},987654", "keys": "train/loss", "max_points": 10},
        headers=user,
    )
    assert r.status_code == 200, r.text
    runs = r.json()["runs"]
    assert list(runs) == [str(b["id"]), str(a["id"])]  # in the asked order, 987654 left out
    assert runs[str(b["id"])] == {
        "status": "queued",
        "series": {"train/loss": {"step": [1], "value": [2.0]}},
    }
    steps = runs[str(a["id"])]["series"]["train/loss"]["step"]
    assert len(steps) <= 10 and steps[0] == 1 and steps[-1] == 100  # downsampled, ends kept


def test_many_runs_series_refuses_too_many_runs_or_keys(client, user) -> None:  # noqa: F811
    many = ",".join(str(i) for i in range(1, 202))
    r = client.get("/api/compare/metrics", params={"runs": many, "keys": "k"}, headers=user)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "runs"]
    keys = ",".join(f"k{i}" for i in range(51))
    r = client.get("/api/compare/metrics", params={"runs": "1", "keys": keys}, headers=user)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "keys"]


def test_compare_page_picks_runs_by_filter_newest_first(client, user) -> None:  # noqa: F811
    exp = new_experiment(client, user)
    runs = [launch(client, user, exp["id"], {"params": {"lr": lr}}) for lr in (0.1, 0.01, 0.001)]
    other = new_experiment(client, user)
    launch(client, user, other["id"], {"params": {"lr": 0.001}})
    html = client.get(
        "/compare",
        params={"experiment_id": exp["id"], "filter": "params.params.lr<0.05\n"},
    ).text
    checked = [int(i) for i in re.findall(r'name="run" value="(\d+)" checked', html)]
    assert checked == [runs[2]["id"], runs[1]["id"]]
    r = client.get("/compare", params={"filter": "params.lr~~1"})
    assert r.status_code == 422
