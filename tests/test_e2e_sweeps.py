"""Sweeps end to end: a real server and a real Celery worker (this module's own stack, so it
can restart it) train every trial of tiny_mlp. Random and grid sweeps run exactly their
planned trials, never more than max_concurrent at once, and name the truly best run; the
median rule stops a clearly bad trial early; a sweep survives a restart of API and worker."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_PASSWORD, BASE_DIR, DATA_DIR
from tests.stack import LiveStack, running_stack

pytestmark = pytest.mark.slow

ENV = dict(
    os.environ,
    # Its own broker: the suite's shared stack (if up) never takes these trials' tasks.
    TORCHYARD_BROKER_URL=f"sqla+sqlite:///{DATA_DIR / 'broker-sweeps.db'}",
    PYTHONUNBUFFERED="1",
    TORCHYARD_SHUTDOWN_GRACE_SECONDS="1",
    # Only the start's pass of the safety net (app.periodic: a round at start, the next one
    # an hour later): what moves these sweeps is each trial's end.
    TORCHYARD_SWEEP_ADVANCE_SECONDS="3600",
)
TINY = {
    "recipe": "tiny_mlp",
    "params": {"epochs": 2, "steps_per_epoch": 10, "batch_size": 32},
    "seed": 5,
}
ENDED = {"succeeded", "failed", "cancelled"}
OBJECTIVE = "synthetic_objective.py"


@pytest.fixture(scope="module")
def stack() -> Iterator[LiveStack]:
    with running_stack(ENV, BASE_DIR / "logs-sweeps", admin_password=ADMIN_PASSWORD) as s:
        yield s


@pytest.fixture(scope="module")
def api(stack: LiveStack) -> Iterator[httpx.Client]:
    with stack.admin_client() as client:
        yield client


def start_sweep(api: httpx.Client, config: dict, **spec: object) -> int:
    exp = api.post("/api/experiments", json={"name": "sweep", "config": config})
    assert exp.status_code == 201, exp.text
    body = {"experiment_id": exp.json()["id"], "metric": {"name": "val/acc", "goal": "maximize"}}
    r = api.post("/api/sweeps", json={**body, **spec})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def wait_sweep(api: httpx.Client, sweep_id: int, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sweep = api.get(f"/api/sweeps/{sweep_id}").json()
        if sweep["status"] != "running":
            return sweep
        time.sleep(0.3)
    raise AssertionError(f"sweep {sweep_id} still running after {timeout}s: {sweep['counts']}")


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def most_at_once(runs: list[dict], start: str) -> int:
    """The most runs alive at one instant, each from `start` to finished_at."""
    events = sorted(
        [(at(r[start]), 1) for r in runs] + [(at(r["finished_at"]), -1) for r in runs],
        key=lambda e: (e[0], e[1]),  # an end before a start at the same instant
    )
    alive = most = 0
    for _, change in events:
        alive += change
        most = max(most, alive)
    return most


def last_value(api: httpx.Client, run_id: int, key: str = "val/acc") -> float:
    series = api.get(f"/api/runs/{run_id}/metrics", params={"keys": key}).json()["series"][key]
    return float(series["value"][-1])


def check_finished(api: httpx.Client, sweep: dict, *, planned: int, at_once: int) -> None:
    assert sweep["status"] == "succeeded", sweep
    runs = sweep["runs"]
    assert len(runs) == len(sweep["trials"]) == planned
    assert sorted(t["number"] for t in sweep["trials"]) == list(range(planned))
    assert all(r["status"] == "succeeded" for r in runs), [r["status"] for r in runs]
    listed = api.get("/api/runs", params={"sweep_id": sweep["id"], "limit": 100}).json()["runs"]
    assert len(listed) == planned  # no run beyond the plan
    # Queued or running, never more than max_concurrent (created_at: from the moment it queued)
    assert most_at_once(runs, "created_at") <= at_once
    assert most_at_once(runs, "started_at") <= at_once
    truth = {r["id"]: last_value(api, r["id"]) for r in runs}
    best = max(truth, key=lambda i: truth[i])
    assert sweep["best"]["run_id"] == best or truth[sweep["best"]["run_id"]] == truth[best], truth
    assert sweep["best"]["value"] == pytest.approx(truth[best])


@pytest.mark.local_only  # the driver's SQL on both stacks: test_sweeps_*
def test_random_sweep_runs_its_budget_two_at_a_time_and_names_the_best(api) -> None:
    sweep_id = start_sweep(
        api,
        TINY,
        method="random",
        parameters={"params.lr": {"distribution": "log_uniform", "min": 1e-4, "max": 0.5}},
        max_runs=4,
        max_concurrent=2,
        seed=7,
    )
    sweep = wait_sweep(api, sweep_id)
    check_finished(api, sweep, planned=4, at_once=2)
    lrs = {t["params"]["params.lr"] for t in sweep["trials"]}
    assert len(lrs) == 4 and all(1e-4 <= lr <= 0.5 for lr in lrs)
    assert sweep["best"]["params"]["params.lr"] in lrs


@pytest.mark.local_only  # the driver's SQL on both stacks: test_sweeps_*
def test_grid_sweep_runs_exactly_its_points_one_at_a_time(api) -> None:
    sweep_id = start_sweep(
        api,
        TINY,
        method="grid",
        parameters={"params.lr": {"values": [0.001, 0.05, 0.3]}},
        max_runs=10,
        max_concurrent=1,
    )
    sweep = wait_sweep(api, sweep_id)
    check_finished(api, sweep, planned=3, at_once=1)
    assert [t["params"]["params.lr"] for t in sweep["trials"]] == [0.001, 0.05, 0.3]


@pytest.mark.timed
@pytest.mark.local_only  # the driver's SQL on both stacks: test_sweeps_*
def test_median_rule_stops_a_clearly_bad_trial_early(api) -> None:
    config = {
        **TINY,
        "params": {"epochs": 4, "steps_per_epoch": 20, "batch_size": 32, "step_sleep": 0.05},
    }
    sweep_id = start_sweep(
        api,
        config,
        method="grid",
        # grid order: two good trials finish first, then one that cannot learn in time
        parameters={"params.lr": {"values": [0.2, 0.1, 1e-7]}},
        max_runs=3,
        max_concurrent=1,
        early_stop={"type": "median", "min_trials": 2},
    )
    sweep = wait_sweep(api, sweep_id)
    assert sweep["status"] == "succeeded", sweep
    bad = sweep["trials"][2]
    assert bad["status"] == "cancelled", sweep["trials"]
    assert bad["stopped_early"] and bad["stopped_early"].startswith(
        "stopped early by the sweep (median rule:"
    ), bad
    good_steps = [t["steps"] for t in sweep["trials"][:2]]
    assert good_steps == [80, 80] and bad["steps"] < 80, sweep["trials"]
    run = api.get(f"/api/runs/{bad['run_id']}").json()
    assert bad["stopped_early"] in run["notices"]  # said on the run, as the run page shows it
    # The lease goes with the final status (lifecycle.finish): within 2 s of the decision.
    with_decision = _decision_time(bad["run_id"])
    freed = at(run["finished_at"]) - with_decision
    # The trial is killed at once (no cancel grace): measured 0.08-0.39 s on the shared 2-core box
    # (was 1.8-2.0 s while the job got a SIGTERM and its exit was waited for).
    print(f"lease freed {freed:.2f} s after the decision")  # shown by pytest -rP
    assert freed < 2.0, f"lease freed {freed:.2f} s after the decision (limit 2 s)"
    assert sweep["best"]["run_id"] in {t["run_id"] for t in sweep["trials"][:2]}


def _decision_time(run_id: int) -> float:
    from app.db import session_scope
    from app.runs.models import Run

    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.notices
        return datetime.fromisoformat(run.notices["stopped_early"]["at"]).timestamp()


def test_a_sweep_survives_a_restart_of_api_and_worker() -> None:
    """Stop server and worker mid-sweep, start new ones: the sweep reaches max_runs, each trial
    number once (a trial cut by the shutdown counts as failed: a failed trial counts). Its own
    stacks on their own broker, so the module's stack takes none of its tasks."""
    env = {**ENV, "TORCHYARD_BROKER_URL": f"sqla+sqlite:///{DATA_DIR / 'broker-restart.db'}"}
    with running_stack(env, BASE_DIR / "logs-restart-1", admin_password=ADMIN_PASSWORD) as first:
        with first.admin_client() as api:
            sweep_id = start_sweep(
                api,
                TINY,
                method="random",
                parameters={"params.lr": {"distribution": "log_uniform", "min": 1e-3, "max": 0.3}},
                max_runs=4,
                max_concurrent=1,
                seed=3,
            )
            deadline = time.monotonic() + 120
            while len(api.get(f"/api/sweeps/{sweep_id}").json()["trials"]) < 2:
                assert time.monotonic() < deadline, "the first trial never ended"
                time.sleep(0.2)
    with running_stack(env, BASE_DIR / "logs-restart-2", admin_password=ADMIN_PASSWORD) as again:
        with again.admin_client() as api:
            sweep = wait_sweep(api, sweep_id)
    assert sweep["status"] == "succeeded", sweep
    numbers = [t["number"] for t in sweep["trials"]]
    assert numbers == [0, 1, 2, 3], numbers
    assert len({t["run_id"] for t in sweep["trials"]}) == 4
    assert all(t["status"] in ENDED for t in sweep["trials"]), sweep["trials"]
    assert sum(t["status"] == "succeeded" for t in sweep["trials"]) >= 3, sweep["trials"]


# The samplers' quality, not the driver's: the trials run one at a time, so what each sampler
# asks is the same on either stack (the driver itself is the tests above); first pass only.
@pytest.mark.local_only
def test_tpe_beats_random_on_a_synthetic_objective(api) -> None:
    """Same script, same budget (20 trials), same seed: TPE's best beats random's (trials
    sequential, so the result is deterministic). Both start with the same 5 random draws (TPE's
    startup trials); simulated through Optuna alone over seeds 1-8, TPE's best was the better
    in 7 of 8 (seed 2, used here: TPE -0.042, random -0.118)."""
    import shutil

    from tests.conftest import WORKSPACE_DIR

    shutil.copy(Path(__file__).parent / "workspace_scripts" / OBJECTIVE, WORKSPACE_DIR / OBJECTIVE)
    config = {"script": OBJECTIVE, "params": {"lr": 0.01, "momentum": 0.5}, "seed": 1}
    spec = {
        "metric": {"name": "objective", "goal": "maximize"},
        "parameters": {
            "params.lr": {"distribution": "log_uniform", "min": 1e-5, "max": 1.0},
            "params.momentum": {"distribution": "uniform", "min": 0.0, "max": 0.99},
        },
        "max_runs": 20,
        "seed": 2,
    }
    ids = {
        method: start_sweep(api, config, method=method, max_concurrent=1, **spec)
        for method in ("random", "tpe")
    }
    best = {}
    for method, sweep_id in ids.items():
        sweep = wait_sweep(api, sweep_id, timeout=600)
        assert sweep["status"] == "succeeded" and len(sweep["runs"]) == 20, sweep["counts"]
        assert sweep["counts"] == {"succeeded": 20}, sweep["counts"]
        best[method] = sweep["best"]["value"]
    assert best["tpe"] > best["random"], (
        f"best objective: tpe {best['tpe']:.4f}, random {best['random']:.4f}"
    )
