"""A run on the `local` pool and one on a Slurm pool side by side in one experiment (issue 40's
acceptance): a real API, a process worker of the local pool and a Slurm worker (the stack of
tests/test_slurm_executor.py, whose submit host has no GPUs) on a private Slurm cluster. Both
succeed, and the compare page's endpoint (GET /api/compare/metrics) gives both curves for one
chart, every step once. Without Slurm the module skips, except on CI (CI=true): it fails."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.slurm_cluster import slurm_cluster
from tests.stack import start_logged, stop_process, wait_for_hosts
from tests.test_slurm_executor import BOTH_GPUS, SCRIPT, SlurmStack, ended, slurm_stack
from tests.waits import wait_for
from torchyard.compose.processes import worker_argv

pytestmark = pytest.mark.slow

LOCAL_HOST = "side-by-side-local"
KEY = "train/loss"


@pytest.fixture(scope="module")
def stack(database: str) -> Iterator[SlurmStack]:
    """The Slurm stack with a process worker of the local pool beside its Slurm worker (the
    same API, broker and database)."""
    with slurm_cluster() as cluster, slurm_stack(cluster, "side") as s:
        env = dict(
            s.env,
            TORCHYARD_WORKER_EXECUTOR="process",
            TORCHYARD_WORKER_POOL="local",
            TORCHYARD_WORKER_HOST=LOCAL_HOST,
        )
        since = time.monotonic()
        local = start_logged(worker_argv(1), env, s.logs / "worker-local.log")
        try:
            wait_for_hosts((LOCAL_HOST,), since)
            yield s
        finally:
            stop_process(local)


def launch(api: httpx.Client, experiment_id: int, resources: dict[str, object]) -> int:
    run = api.post(
        f"/api/experiments/{experiment_id}/runs", json={"overrides": {"resources": resources}}
    )
    assert run.status_code == 201, run.text
    return int(run.json()["id"])


def test_a_local_run_and_a_slurm_run_of_one_experiment_compare_on_one_chart(
    stack: SlurmStack,
) -> None:
    api = stack.api
    pools: dict[str, dict] = {}

    def both_pools_live() -> bool:
        # The Slurm worker heartbeats on its own time: the fixture waits for the local one
        # only (CI: on a loaded box the pool 'cluster' was not listed yet, KeyError).
        pools.clear()
        pools.update((p["name"], p) for p in api.get("/api/pools").json()["pools"])
        return "cluster" in pools and LOCAL_HOST in pools.get("local", {}).get("hosts", ())

    wait_for(both_pools_live, timeout=60, every=0.2, what=lambda: f"both pools live: {pools}")
    # Among the local pool's live hosts (a worker of an earlier module of the pass may still
    # count as live on the suite's database: CI's services pass listed this box's own name).
    assert LOCAL_HOST in pools["local"]["hosts"] and pools["local"]["executor"] == "process"
    assert pools["cluster"]["executor"] == "slurm"
    config = {"script": SCRIPT, "params": {"epochs": 2, "step_sleep": 0.05}, "seed": 7}
    exp = api.post("/api/experiments", json={"name": "side-by-side", "config": config})
    assert exp.status_code == 201, exp.text
    # Both fake GPUs of the Slurm node: more than its worker's submit host has (none).
    on_slurm = launch(api, exp.json()["id"], BOTH_GPUS)
    # DDP of two ranks on CPUs there (the script needs a process group).
    on_local = launch(api, exp.json()["id"], {"gpus": 0, "nproc": 2, "pool": "local"})
    runs = {run_id: ended(api, run_id) for run_id in (on_slurm, on_local)}
    assert {r["status"] for r in runs.values()} == {"succeeded"}, runs
    assert runs[on_slurm]["external_id"], "the Slurm run records its job"
    assert runs[on_local]["worker_host"] == LOCAL_HOST and not runs[on_local]["external_id"]
    chart = api.get(
        "/api/compare/metrics",
        params={"runs": f"{on_local},{on_slurm}", "keys": KEY, "max_points": 4000},
    )
    assert chart.status_code == 200, chart.text
    curves = chart.json()["runs"]
    assert set(curves) == {str(on_local), str(on_slurm)}
    for run_id, curve in curves.items():
        assert curve["status"] == "succeeded"
        got = [int(s) for s in curve["series"][KEY]["step"]]
        assert got, f"run {run_id}: no curve"
        assert got == sorted(set(got)), f"run {run_id}: steps doubled or out of order: {got}"
        assert got == list(range(got[0], got[-1] + 1)), f"run {run_id}: steps lost: {got}"
    # The same script, seed and data: both curves span the same steps.
    spans = {run_id: curve["series"][KEY]["step"] for run_id, curve in curves.items()}
    assert spans[str(on_local)][-1] == spans[str(on_slurm)][-1], spans
