"""The sweeps API in-process: each bad spec a 422 naming its field, the first trials launched
(never more than max_concurrent), the grid's points, cancel, and the advance's guarantees
(idempotent, no duplicate trial) on the real database. Runs enqueued here go to the in-memory
broker: no worker trains them (tests/test_e2e_sweeps.py does)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.db import session_scope
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle
from app.sweeps.models import Sweep, SweepTrial
from app.sweeps.sampling import grid_point, grid_size
from app.sweeps.service import advance

TINY = {"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 3}


@pytest.fixture
def experiment_id(client, user_headers) -> int:
    r = client.post("/api/experiments", json={"name": "sw", "config": TINY}, headers=user_headers)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def spec(experiment_id: int, **changes: object) -> dict:
    body: dict = {
        "experiment_id": experiment_id,
        "method": "random",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"params.lr": {"distribution": "log_uniform", "min": 1e-4, "max": 1e-1}},
        "max_runs": 5,
        "max_concurrent": 2,
        "seed": 11,
    }
    body.update(changes)
    return body


def count(model: type) -> int:
    with session_scope() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


LR = "params.lr"


@pytest.mark.parametrize(
    ("changes", "loc", "needle"),
    [
        (
            {"parameters": {"params.warmup": {"values": [1, 2]}}},
            ["body", "parameters", "params.warmup"],
            "unknown config path",
        ),
        (
            {"parameters": {"colour": {"values": ["red"]}}},
            ["body", "parameters", "colour"],
            "unknown config path",
        ),
        (
            {"parameters": {LR: {"distribution": "uniform", "min": 0.1, "max": 0.1}}},
            ["body", "parameters", LR, "min"],
            "must be below max",
        ),
        (
            {"parameters": {LR: {"distribution": "log_uniform", "min": 0, "max": 0.1}}},
            ["body", "parameters", LR, "min"],
            "log_uniform needs min > 0",
        ),
        (
            {
                "method": "grid",
                "parameters": {LR: {"distribution": "uniform", "min": 0.01, "max": 0.1}},
            },
            ["body", "parameters", LR, "distribution"],
            "grid cannot enumerate",
        ),
        ({"max_concurrent": 0}, ["body", "max_concurrent"], "greater than or equal to 1"),
        ({"max_runs": 0}, ["body", "max_runs"], "greater than or equal to 1"),
        ({"max_runs": 100_000}, ["body", "max_runs"], "at most 1000 trials"),
        (
            {"metric": {"name": "val/accuracy", "goal": "maximize"}},
            ["body", "metric", "name"],
            "never logs 'val/accuracy'",
        ),
        ({"method": "bayes"}, ["body", "method"], "'grid', 'random' or 'tpe'"),
        (
            {"parameters": {LR: {"values": [0.1, 20.0]}}},
            ["body", "parameters", LR],
            "less than or equal to 10",
        ),
        (
            {
                "parameters": {
                    "params.epochs": {"distribution": "int_uniform", "min": 1.5, "max": 3}
                }
            },
            ["body", "parameters", "params.epochs", "min"],
            "whole number",
        ),
        (
            {"parameters": {"recipe": {"values": ["digits_cnn"]}}},
            ["body", "parameters", "recipe"],
            "fixed",
        ),
        ({"parameters": {LR: {"min": 0.1, "max": 1}}}, ["body", "parameters", LR], "either values"),
        (
            {"early_stop": {"type": "hyperband"}},
            ["body", "early_stop", "type"],
            "'median' or 'asha'",
        ),
    ],
)
def test_bad_spec_is_422_naming_the_field_and_launches_nothing(
    client, user_headers, experiment_id, changes, loc, needle
) -> None:
    runs, sweeps = count(Run), count(Sweep)
    r = client.post("/api/sweeps", json=spec(experiment_id, **changes), headers=user_headers)
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert any(e["loc"] == loc and needle in e["msg"] for e in errors), errors
    assert (count(Run), count(Sweep)) == (runs, sweeps)


def test_a_script_experiment_takes_any_params_key_and_any_metric(client, user_headers) -> None:
    from tests.conftest import WORKSPACE_DIR

    (WORKSPACE_DIR / "sweep_me.py").write_text("print('hi')\n")
    exp = client.post(
        "/api/experiments",
        json={"name": "s", "config": {"script": "sweep_me.py", "seed": 1}},
        headers=user_headers,
    ).json()
    body = spec(
        exp["id"],
        metric={"name": "objective", "goal": "minimize"},
        parameters={"params.momentum": {"distribution": "uniform", "min": 0.0, "max": 0.99}},
        max_runs=1,
    )
    r = client.post("/api/sweeps", json=body, headers=user_headers)
    assert r.status_code == 201, r.text
    run = client.get(f"/api/sweeps/{r.json()['id']}", headers=user_headers).json()["runs"][0]
    assert 0.0 <= run["config"]["params"]["momentum"] <= 0.99
    assert run["config"]["script"] == "sweep_me.py"


def test_post_launches_max_concurrent_trials_tagged_with_the_sweep(
    client, user_headers, experiment_id
) -> None:
    r = client.post("/api/sweeps", json=spec(experiment_id), headers=user_headers)
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "running"
    sweep_id = r.json()["id"]
    got = client.get(f"/api/sweeps/{sweep_id}", headers=user_headers).json()
    assert got["counts"] == {"queued": 2} and got["planned_runs"] == 5 and got["best"] is None
    assert [t["number"] for t in got["trials"]] == [0, 1]
    for trial, run in zip(got["trials"], got["runs"], strict=True):
        lr = trial["params"][LR]
        assert 1e-4 <= lr <= 1e-1 and run["config"]["params"]["lr"] == lr
        assert run["sweep_id"] == sweep_id and run["params"]["params.lr"] == lr
        assert run["config"]["params"]["epochs"] == 1  # the experiment's config underneath
    assert got["trials"][0]["params"] != got["trials"][1]["params"]
    listed = client.get("/api/runs", params={"sweep_id": sweep_id}, headers=user_headers).json()
    assert sorted(x["id"] for x in listed["runs"]) == sorted(t["run_id"] for t in got["trials"])
    briefs = client.get(
        "/api/sweeps", params={"experiment_id": experiment_id}, headers=user_headers
    ).json()
    assert [b["id"] for b in briefs] == [sweep_id] and briefs[0]["counts"] == {"queued": 2}


def test_advance_is_idempotent_and_refills_as_trials_end(
    client, user_headers, experiment_id
) -> None:
    sweep_id = client.post(
        "/api/sweeps", json=spec(experiment_id, max_runs=3), headers=user_headers
    ).json()["id"]
    for _ in range(3):  # nothing ended: nothing new, however often it is called
        with session_scope() as session:
            assert advance(session, sweep_id=sweep_id) == []
    with session_scope() as session:
        first = session.scalar(
            select(SweepTrial.run_id).where(SweepTrial.sweep_id == sweep_id, SweepTrial.number == 0)
        )
        assert first is not None
        lifecycle.cancel(session, run_id=first)  # a trial ended (cancelled by hand)
    with session_scope() as session:
        new = advance(session, sweep_id=sweep_id)
        assert len(new) == 1
    with session_scope() as session:
        assert advance(session, sweep_id=sweep_id) == []  # 3 planned, 3 exist
        numbers = session.scalars(
            select(SweepTrial.number).where(SweepTrial.sweep_id == sweep_id)
        ).all()
        assert sorted(numbers) == [0, 1, 2]


def test_cancel_cancels_queued_trials_and_stops_the_sweep(
    client, user_headers, experiment_id
) -> None:
    sweep_id = client.post("/api/sweeps", json=spec(experiment_id), headers=user_headers).json()[
        "id"
    ]
    r = client.post(f"/api/sweeps/{sweep_id}/cancel", headers=user_headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "cancelled" and body["counts"] == {"cancelled": 2}
    with session_scope() as session:
        assert advance(session, sweep_id=sweep_id) == []  # a cancelled sweep launches nothing
    again = client.post(f"/api/sweeps/{sweep_id}/cancel", headers=user_headers)
    assert again.status_code == 409 and "already ended" in again.json()["detail"]


def test_grid_runs_exactly_its_points_in_order() -> None:
    params = {"a": {"values": [1, 2, 3]}, "b": {"distribution": "int_uniform", "min": 0, "max": 1}}
    assert grid_size(params) == 6
    points = [grid_point(params, n) for n in range(6)]
    assert points == [{"a": a, "b": b} for a in (1, 2, 3) for b in (0, 1)]


def test_a_grid_plans_its_points_when_max_runs_is_larger(
    client, user_headers, experiment_id
) -> None:
    body = spec(
        experiment_id,
        method="grid",
        parameters={LR: {"values": [0.01, 0.1]}, "params.batch_size": {"values": [16, 32]}},
        max_runs=10,
        max_concurrent=10,
    )
    sweep_id = client.post("/api/sweeps", json=body, headers=user_headers).json()["id"]
    got = client.get(f"/api/sweeps/{sweep_id}", headers=user_headers).json()
    assert got["planned_runs"] == 4 and len(got["trials"]) == 4
    seen = {(t["params"][LR], t["params"]["params.batch_size"]) for t in got["trials"]}
    assert seen == {(0.01, 16), (0.01, 32), (0.1, 16), (0.1, 32)}
    client.post(f"/api/sweeps/{sweep_id}/cancel", headers=user_headers)


def test_another_member_reads_but_may_not_sweep_or_cancel(
    client, user_headers, experiment_id
) -> None:
    from tests.conftest import make_user

    other = make_user()[2]
    r = client.post("/api/sweeps", json=spec(experiment_id), headers=other)
    assert r.status_code == 403, r.text
    sweep_id = client.post("/api/sweeps", json=spec(experiment_id), headers=user_headers).json()[
        "id"
    ]
    assert client.get(f"/api/sweeps/{sweep_id}", headers=other).status_code == 200
    assert client.post(f"/api/sweeps/{sweep_id}/cancel", headers=other).status_code == 403
    assert client.get("/api/sweeps/999999", headers=other).status_code == 404
    client.post(f"/api/sweeps/{sweep_id}/cancel", headers=user_headers)


def _trained(session, run_id: int, values: list[float]) -> None:
    """The run started and logged val/acc once per epoch (10 steps each)."""
    from app.metrics.ingest import ingest_points
    from app.timeutil import utcnow

    assert lifecycle.start(session, run_id=run_id, host="h", gpu_indices="", started_at=utcnow())
    points = [("val/acc", 10 * (i + 1), v, 1.0) for i, v in enumerate(values)]
    ingest_points(session, run_id=run_id, points=points)


def test_a_failed_trial_counts_and_the_best_is_the_best_succeeded_one(
    client, user_headers, experiment_id
) -> None:
    body = spec(
        experiment_id,
        method="grid",
        parameters={LR: {"values": [0.01, 0.1, 0.3]}},
        max_runs=3,
        max_concurrent=3,
    )
    sweep_id = client.post("/api/sweeps", json=body, headers=user_headers).json()["id"]
    trials = client.get(f"/api/sweeps/{sweep_id}", headers=user_headers).json()["trials"]
    ids = [t["run_id"] for t in trials]
    with session_scope() as session:
        for run_id, curve in zip(ids, ([0.5, 0.7], [0.6, 0.9], [0.8, 0.99]), strict=True):
            _trained(session, run_id, curve)
        for run_id in ids[:2]:
            assert lifecycle.finish(
                session,
                run_id=run_id,
                attempt=1,
                status=RunStatus.succeeded,
                exit_code=0,
                error=None,
            )
        # The best curve of all, but its run failed: it counts, and is never the best.
        assert lifecycle.fail(session, run_id=ids[2], attempt=1, reason="boom")
    with session_scope() as session:
        assert advance(session, sweep_id=sweep_id) == []
    got = client.get(f"/api/sweeps/{sweep_id}", headers=user_headers).json()
    assert got["status"] == "succeeded" and got["finished_at"]
    assert got["counts"] == {"succeeded": 2, "failed": 1}
    assert got["best"] == {"run_id": ids[1], "value": 0.9, "params": {LR: 0.1}}
    assert [(t["value"], t["steps"]) for t in got["trials"]] == [(0.7, 20), (0.9, 20), (0.99, 20)]
    assert [r["summary"]["val/acc"]["last"] for r in got["runs"]] == [0.7, 0.9, 0.99]
