"""A 2-node run on the Slurm pool (issue 40): two slurmd nodes, each in a network namespace of
its own (tests/slurm_cluster.py), one Slurm job whose batch script starts one torchrun per node
through srun, meeting on the allocation's first node: one world of 4 ranks, disjoint shards;
a failing rank on the second node fails the run with its exception, and a cancel ends the
whole job, on both nodes, within 10 s. Its ranks share the nodes' network (their peers must
reach them) but not the nodes' loopback (worker.slurm.batch's fence of the run uids).

Submitted through the API like any run: that it needs two hosts of GPUs while the Slurm pool's
worker is one host with none does not refuse it (a Slurm pool is Slurm's to place,
app.gpus.pools.outside_pools)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.slurm_cluster import free_port, slurm_cluster
from tests.test_slurm_executor import (
    POOL,
    SCRIPT,
    SlurmStack,
    ended,
    slurm_stack,
    slurm_state,
    steps,
    until,
)
from tests.waits import wait_for

pytestmark = pytest.mark.slow

TWO_BY_TWO = {"nodes": 2, "nproc": 2, "gpus": 2, "cpus": 1, "memory_gb": 1.5, "pool": POOL}


@pytest.fixture(scope="module")
def stack(database: str) -> Iterator[SlurmStack]:
    with slurm_cluster(nodes=2) as cluster, slurm_stack(cluster, "slurm-2") as s:
        yield s


def submit(stack: SlurmStack, name: str, **params: object) -> int:
    config = {"script": SCRIPT, "params": {"epochs": 2, **params}, "seed": 7}
    config["resources"] = TWO_BY_TWO
    exp = stack.api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = stack.api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    return int(run.json()["id"])


def test_a_two_node_run_is_one_world_with_disjoint_shards(stack: SlurmStack) -> None:
    run_id = submit(stack, "slurm-2-nodes", step_sleep=0.05)
    run = ended(stack.api, run_id)
    log = stack.api.get(f"/api/runs/{run_id}/logs", params={"tail": 40}).text
    assert run["status"] == "succeeded", f"{run['error']}\n{log}"
    series = stack.api.get(f"/api/runs/{run_id}/metrics").json()["series"]
    assert set(series["world_size"]["value"]) == {4.0}
    assert set(series["shards_disjoint"]["value"]) == {1.0}
    got = steps(stack.api, run_id)
    assert len(got) == len(set(got))


def test_a_failing_rank_on_the_second_node_fails_the_run(stack: SlurmStack) -> None:
    run_id = submit(stack, "slurm-2-fail", epochs=50, fail_rank=2, fail_step=4, step_sleep=0.1)
    run = ended(stack.api, run_id)
    assert run["status"] == "failed", run
    assert "rank 2 fails on purpose at step 4" in (run["error"] or ""), run["error"]


@pytest.mark.timed  # the cancel ends the Slurm job within 10 s
def test_a_cancel_ends_the_two_node_job_on_both_nodes(stack: SlurmStack) -> None:
    run_id = submit(stack, "slurm-2-cancel", epochs=200, step_sleep=0.2)
    job = until(
        stack.api, run_id, lambda r: r["external_id"] and steps(stack.api, run_id), "trains"
    )
    assert stack.cluster.node_states().keys() == set(stack.cluster.node_names)
    asked = time.monotonic()
    assert stack.api.post(f"/api/runs/{run_id}/cancel").status_code in (200, 202)
    wait_for(
        lambda: slurm_state(job["external_id"]) not in {"RUNNING", "PENDING", "COMPLETING"},
        timeout=10,
        every=0.1,
        what="the run's Slurm job ended",
    )
    assert time.monotonic() - asked <= 10
    assert ended(stack.api, run_id, 30)["status"] == "cancelled"
    # Both nodes given back: no rank of the job is left on either.
    wait_for(
        lambda: set(stack.cluster.node_states().values()) == {"idle"},
        timeout=30,
        what=lambda: f"both nodes idle: {stack.cluster.node_states()}",
    )


LISTEN = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print("listening", flush=True)
time.sleep(3600)
"""


def test_a_two_node_runs_ranks_cannot_reach_the_nodes_loopback(stack: SlurmStack) -> None:
    """A listener on each node's 127.0.0.1 (slurmd's and munge's kind of service): no rank
    reaches it, while the ranks still meet across the nodes (the run succeeds)."""
    port = free_port()
    listeners = []
    try:
        for name in stack.cluster.node_names:
            argv = stack.cluster.node_argv(name, [sys.executable, "-c", LISTEN, str(port)])
            listener = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
            listeners.append(listener)
            assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
        run_id = submit(stack, "slurm-2-loopback", probe=f"127.0.0.1:{port}")
        run = ended(stack.api, run_id)
        # A rank that reaches it raises ("probe ...: reached"), failing the run.
        assert run["status"] == "succeeded", run["error"]
    finally:
        for listener in listeners:
            listener.kill()
            listener.wait()
            if listener.stdout is not None:
                listener.stdout.close()
