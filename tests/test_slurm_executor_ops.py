"""The Slurm pool when Slurm takes a job away (issue 40's operational points), on a real private
cluster (tests/slurm_cluster.py) with a real API and Slurm worker (tests/test_slurm_executor's
stack): a node set DOWN under a running job (NODE_FAIL, as Slurm reports a failed node), an
operator's `scontrol requeue`, a run that asks more GPUs than any node has (sbatch's own
refusal), a job past its time limit (TIMEOUT), and the CLI's `submit --pool` and `ls`. Without
Slurm the module skips, except on CI (CI=true), where it fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.slurm_cluster import SlurmCluster, slurm_cluster
from tests.test_slurm_executor import (
    POOL,
    SCRIPT,
    SlurmStack,
    assert_every_step_once,
    ended,
    slurm_stack,
    slurm_state,
    steps,
    until,
)
from tests.waits import wait_for

pytestmark = pytest.mark.slow

ONE_GPU = {"nproc": 2, "gpus": 1, "cpus": 1, "memory_gb": 1.0, "pool": POOL}


@pytest.fixture(scope="module")
def stack(database: str) -> Iterator[SlurmStack]:
    with slurm_cluster() as cluster, slurm_stack(cluster, "slurm-ops") as s:
        yield s


def submit(api: httpx.Client, name: str, resources: dict, **config: object) -> int:
    full = {"script": SCRIPT, "seed": 7, "resources": resources, **config}
    exp = api.post("/api/experiments", json={"name": name, "config": full})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    return int(run.json()["id"])


def log_of(api: httpx.Client, run_id: int) -> str:
    return api.get(f"/api/runs/{run_id}/logs").text


def only_node(cluster: SlurmCluster) -> str:
    return cluster.node_names[0]


def test_a_node_failure_requeues_the_attempt_with_slurms_reason(stack: SlurmStack) -> None:
    """Node DOWN under the running job: Slurm ends it NODE_FAIL (NodeDown); the attempt is
    handed over as a local retry is: attempt 2, a new Slurm job, resumed from its checkpoint,
    every step once; the run and its log say what Slurm said."""
    api = stack.api
    params = {"epochs": 4, "step_sleep": 0.25, "checkpoint": 1}
    run_id = submit(api, "slurm-node-fail", ONE_GPU, params=params, max_restarts=1)
    first = until(api, run_id, lambda r: len(steps(api, run_id)) > 12, "past one checkpoint")
    stack.cluster.fail_node(only_node(stack.cluster), "disk on fire")
    requeued = until(api, run_id, lambda r: r["attempt"] == 2, "the next attempt", 120)
    assert "NODE_FAIL (NodeDown)" in (requeued["error"] or ""), requeued
    run = ended(api, run_id)
    assert run["status"] == "succeeded", run
    assert run["attempt"] == 2
    assert run["external_id"] and run["external_id"] != first["external_id"]
    assert slurm_state(first["external_id"]) == "NODE_FAIL"
    assert_every_step_once(api, run_id)
    assert f"Slurm job {first['external_id']}: NODE_FAIL (NodeDown)" in log_of(api, run_id)


def test_a_node_failure_fails_a_run_without_restarts_with_slurms_reasons(
    stack: SlurmStack,
) -> None:
    """The node stays down (its slurmd stopped, as a dead node's): the run's error has the
    job's reason and the node's, the operator's words."""
    api = stack.api
    run_id = submit(api, "slurm-node-fail-once", ONE_GPU, params={"epochs": 50, "step_sleep": 0.2})
    job_id = until(api, run_id, lambda r: r["external_id"] and steps(api, run_id), "a point")[
        "external_id"
    ]
    node = only_node(stack.cluster)
    stack.cluster.stop_node(node)
    try:
        stack.cluster.fail_node(node, "lost its power")
        run = ended(api, run_id, 120)
    finally:  # back in service; its slurmd ends the job's steps left running
        stack.cluster.start_node(node)
        wait_for(
            lambda: stack.cluster.node_states().get(node) == "idle",
            timeout=60,
            what=lambda: f"{node} idle: {stack.cluster.node_states()}",
        )
    assert run["status"] == "failed", run
    assert run["attempt"] == 1
    said = f"Slurm job {job_id}: NODE_FAIL (NodeDown); {node}: lost its power"
    assert said in (run["error"] or ""), run["error"]


@pytest.fixture(scope="module")
def time_limited(stack: SlurmStack) -> int:
    """A run of a one-minute time limit, submitted before the tests that use this fixture and
    checked by the last of them: Slurm ends it TIMEOUT only 60-90 s after it starts (the limit is
    whole minutes, slurmctld checks it every 30 s), so that minute passes while the tests between
    run their own jobs beside it (it holds one of the node's two GPUs; theirs ask one or more
    than the node has). After the node failures above: a failed node would end it NODE_FAIL."""
    limited = {**ONE_GPU, "time_limit_minutes": 1}
    return submit(stack.api, "slurm-time-limit", limited, params={"epochs": 500, "step_sleep": 0.2})


@pytest.mark.usefixtures("time_limited")
def test_an_operators_scontrol_requeue_is_refused_and_the_run_goes_on(stack: SlurmStack) -> None:
    """One attempt is one job (`sbatch --no-requeue`): Slurm refuses to requeue it, so it never
    runs twice under one id; the run's retries are torchyard's (the node failure above)."""
    api = stack.api
    run_id = submit(api, "slurm-requeue", ONE_GPU, params={"epochs": 3, "step_sleep": 0.2})
    job_id = until(api, run_id, lambda r: r["external_id"] and steps(api, run_id), "a point")[
        "external_id"
    ]
    done = stack.cluster.run("scontrol", "requeue", job_id)
    assert done.returncode != 0
    assert "disabled" in done.stderr, done.stderr
    run = ended(api, run_id)
    assert run["status"] == "succeeded", run
    assert run["attempt"] == 1
    assert_every_step_once(api, run_id)


@pytest.mark.usefixtures("time_limited")
def test_a_run_asking_more_gpus_than_any_node_has_fails_with_sbatchs_refusal(
    stack: SlurmStack,
) -> None:
    api = stack.api
    too_many = {**ONE_GPU, "gpus": stack.cluster.gpus_per_node + 1}
    run_id = submit(api, "slurm-too-many-gpus", too_many, params={"epochs": 1})
    run = ended(api, run_id, 120)
    assert run["status"] == "failed", run
    error = run["error"] or ""
    assert "Slurm refused the job" in error, error
    assert "Requested node configuration is not available" in error, error
    assert "worker error" not in error


@pytest.mark.usefixtures("time_limited")
def test_the_cli_submits_to_a_pool_and_ls_names_the_slurm_job(
    stack: SlurmStack, tmp_path: Path
) -> None:
    """`torchyard submit SPEC --pool NAME` sets resources.pool; `torchyard ls` shows the run's
    Slurm job (external_id) beside its GPUs."""
    api = stack.api
    spec = tmp_path / "on-slurm.yaml"
    spec.write_text(
        f"script: {SCRIPT}\nparams:\n  epochs: 1\nseed: 7\n"
        "resources:\n  nproc: 2\n  gpus: 1\n  cpus: 1\n  memory_gb: 1.0\n"
    )
    login = ["--server", str(api.base_url), "--token", api.headers["Authorization"].split()[-1]]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "torchyard.cli", *args, *login],
            env={**os.environ, "TORCHYARD_CLI_CONFIG": str(tmp_path / "c.json"), "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done

    done = cli("submit", str(spec), "--pool", POOL, "--no-code")
    run_id = int(done.stdout.split()[1])  # "run 12 queued (experiment 5): ..."
    run = ended(api, run_id)
    assert run["status"] == "succeeded", run
    assert run["config"]["resources"]["pool"] == POOL
    listed = json.loads(cli("ls", "--json").stdout)
    assert next(r for r in listed if r["id"] == run_id)["external_id"] == run["external_id"]
    assert f"slurm job {run['external_id']}" in cli("ls", "--limit", "3").stdout


def test_a_run_past_its_time_limit_fails_saying_slurm_time_limit(
    stack: SlurmStack, time_limited: int
) -> None:
    """resources.time_limit_minutes is the job's sbatch --time: Slurm ends it TIMEOUT (its
    time-limit check runs every 30 s or so, then KillWait), and the run fails saying so."""
    api = stack.api
    run_id = time_limited
    job_id = until(api, run_id, lambda r: r["external_id"], "its Slurm job")["external_id"]
    shown = stack.cluster.run("scontrol", "show", "job", job_id).stdout
    assert "TimeLimit=00:01:00" in shown, shown
    run = ended(api, run_id, 240)
    assert run["status"] == "failed", run
    assert slurm_state(job_id) == "TIMEOUT"
    assert "Slurm time limit" in (run["error"] or ""), run["error"]
