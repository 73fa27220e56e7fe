"""GET /api/compare/metrics (many runs' series of a key in one request) and the compare page's
run filter, in-process against the real app and SQLite."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import func, select

from app.db import session_scope
from app.metrics.models import MetricOverview
from app.runs.models import Checkpoint, Run, RunStatus
from app.runs.state import recovery
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
    many = ",".join(str(i) for i in range(1, 1002))  # at most 1,000 runs (issue 43)
    r = client.get("/api/compare/metrics", params={"runs": many, "keys": "k"}, headers=user)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "runs"]
    # one number of thousands of digits: refused as past any id, not a 500 (int() refuses it)
    r = client.get("/api/compare/metrics", params={"runs": "9" * 11_999, "keys": "k"}, headers=user)
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


def test_a_requeued_run_is_overlaid_from_its_next_attempts_points(client, user) -> None:  # noqa: F811
    """A requeue drops the points past the checkpoint and their overviews: the overlay shows
    what is left, then the next attempt's rewritten steps, never the old attempt's."""
    exp = new_experiment(client, user)
    run_id = launch(client, user, exp["id"])["id"]
    with session_scope() as s:
        run = s.get(Run, run_id)
        assert run is not None
        run.status = RunStatus.running  # as the worker's start would leave it
        s.add(Checkpoint(run_id=run_id, name="c.pt", epoch=1, step=1000, size_bytes=1, path="c.pt"))
    log_points(run_id, [("train/loss", s, 5.0 if s != 1500 else 99.0) for s in range(1, 3001)])

    def overlaid() -> dict[str, list[Any]]:
        r = client.get(
            "/api/compare/metrics",
            params={"runs": str(run_id), "keys": "train/loss", "max_points": 100},
            headers=user,
        )
        assert r.status_code == 200, r.text
        series: dict[str, list[Any]] = r.json()["runs"][str(run_id)]["series"]["train/loss"]
        assert len(series["step"]) <= 100
        return series

    assert max(overlaid()["value"]) == 99.0
    with session_scope() as s:
        run = s.get(Run, run_id)
        assert run is not None and recovery.requeue(s, run=run, reason="worker lost")
    left = overlaid()
    assert left["step"][0] == 1 and left["step"][-1] == 1000 and set(left["value"]) == {5.0}
    log_points(run_id, [("train/loss", s, -1.0) for s in range(1001, 2001)])
    again = overlaid()
    assert again["step"][-1] == 2000 and set(again["value"]) == {5.0, -1.0}
    with session_scope() as s:
        assert s.execute(select(func.count()).select_from(MetricOverview)).scalar_one() >= 1
