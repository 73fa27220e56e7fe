"""Multi-node runs for real (issue 30, docs/multi-node.md), on one shared cluster
(tests/multi_node_cluster.py): the API in this namespace, two worker hosts that are network
namespaces with 2 fake GPUs each, one database, one broker and one artifact store. A run of 2
nodes x 2 processes trains as one gloo world of 4, fails as one when a rank of node 1 raises,
cancels as one, two such runs submitted at once run one after the other, node 1's worker
killed and restarted re-adopts its node's job, and a resumed run goes on from its checkpoint
whichever hosts it lands on. The job's network for real (worker/job_firewall.py,
docs/security.md): every rank is refused the database (PostgreSQL), the broker, loopback and
the hosts' other ports, each reachable from the hosts themselves, while DDP across the nodes
succeeds, and no rule is left on either host afterwards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import DATABASE_URL
from tests.multi_node_cluster import (
    LISTENER,
    REACH,
    RUN_LOST_SECONDS,
    TWO_BY_TWO,
    Cluster,
    ended,
    gone_within,
    running_cluster,
    series,
    submit,
    succeeded,
    training_on_both,
)
from tests.netns_hosts import python_in
from tests.stack import stop_process
from tests.waits import wait_for
from torchyard.contract import RunPaths
from worker import job_firewall

pytestmark = pytest.mark.slow

# A port below every ephemeral range and not a rendezvous port: each host listens on it on its
# loopback and on its own address for the job network's test.
LISTEN_PORT = 24_117


@pytest.fixture(scope="module")
def cluster(database: str) -> Iterator[Cluster]:
    with running_cluster() as built:
        yield built


def test_a_two_node_run_is_one_world_of_four_matching_one_host_of_four(cluster: Cluster) -> None:
    api = cluster.api
    multi = succeeded(api, submit(api, "mn-2x2", TWO_BY_TWO))
    single = succeeded(api, submit(api, "mn-1x4", {"nproc": 4, "gpus": 0}))
    got, want = series(api, multi["id"]), series(api, single["id"])
    steps = list(range(1, 17))  # 256 samples, a global batch of 32, 2 epochs
    assert got["world_size"]["value"] == [4.0] * 16 == want["world_size"]["value"]
    assert got["shards_disjoint"]["value"] == [1.0] * 16  # each rank's shard its own
    assert got["train/loss"]["step"] == steps == want["train/loss"]["step"]
    assert got["train/loss"]["value"] == pytest.approx(want["train/loss"]["value"], rel=1e-5)
    assert multi["worker_host"] == "host-0" or multi["worker_host"] == "host-1"
    assert cluster.leases(multi["id"]) == []
    # node 1's output reaches the API from its host, labelled: it holds global ranks 2 and 3
    # (node 0's log is read from its run directory, which these hosts' API does not share)
    node_1 = api.get(f"/api/runs/{multi['id']}/logs", params={"node": 1}).text
    assert "rank 2 of 4 on node 1" in node_1 and "rank 3 of 4 on node 1" in node_1, node_1
    rank_3 = api.get(f"/api/runs/{multi['id']}/logs", params={"rank": 3}).text
    assert "rank 3 of 4 on node 1" in rank_3 and "rank 2 of 4" not in rank_3, rank_3


def test_a_multi_node_job_reaches_its_peers_and_none_of_the_hosts_services(
    cluster: Cluster,
) -> None:
    """Every rank first connects to each target and raises if one answers: the database's
    (PostgreSQL) and the broker's address:port as the workers reach them, a listener on each
    host's loopback, one on its own address and one on its peer's."""
    a, b = cluster.hosts.hosts
    targets = [
        *cluster.services,
        f"127.0.0.1:{LISTEN_PORT}",
        f"{a.address}:{LISTEN_PORT}",  # node a's own address, and its peer's for node b
        f"{b.address}:{LISTEN_PORT}",
    ]
    want = 2 if DATABASE_URL.startswith("postgresql") else 1  # the database, the broker
    assert len(cluster.services) == want, cluster.services
    api = cluster.api
    with cluster.listening(LISTEN_PORT):
        # root on each host reaches each target: what the job is refused is the fence's doing
        wait_for(
            lambda: not cluster.unreached(targets),
            timeout=60,
            every=0.5,
            what=lambda: f"root on the hosts reaching {cluster.unreached(targets)}",
        )
        run_id = submit(api, "mn-network", TWO_BY_TWO, epochs=1, probe=",".join(targets))
        run = ended(api, run_id, timeout=300)
    node_1 = api.get(f"/api/runs/{run_id}/logs", params={"node": 1}).text
    assert run["status"] == "succeeded", f"{run['error']}\nnode 1's log:\n{node_1}"
    # the training went across the nodes: one world of 4
    assert set(series(api, run_id)["world_size"]["value"]) == {4.0}
    # every rank tried every target and was refused (the script raises if one answers)
    run_dir = cluster.data_dirs[run["worker_host"]] / "runs" / str(run_id)
    node_0 = RunPaths(run_dir).log.read_text()
    for log in (node_0, node_1):
        for target in targets:
            assert log.count(f"probe {target}: not reached") == 2, (target, log)
    assert "Connection refused" in node_1
    # and no rule of a run is left on either host once its worker is done with the node
    # (node k's may still be stopping its job when node 0 has ended the run)
    wait_for(
        lambda: not cluster.run_rules(),
        timeout=60,
        every=0.5,
        what=lambda: str(cluster.run_rules()),
    )


# Another multi-node run on the same hosts: its store's port in the ephemeral range, where a
# run's stores and ranks listen.
OTHER_STORE_PORT = 40_117


def other_run(api: httpx.Client) -> int:
    """Another run's id: its uid far from this module's runs, and its source ports not those
    of the next runs (ids equal modulo SOURCE_PORT_SLOTS share them, and their fences refuse
    to start side by side: test_job_firewall). The CI's second stream had made that run 55,
    of 99,999's slot."""
    newest = max((r["id"] for r in api.get("/api/runs").json()["runs"]), default=0)
    slots = job_firewall.SOURCE_PORT_SLOTS
    return 99_999 - 99_999 % slots + (newest + slots // 2) % slots


def _fence_code(action: str, peers: tuple[str, ...], other: int) -> str:
    """The other run's rules on a host, installed or removed as its own worker would."""
    return f"""
from app.settings import get_settings
from worker import job_firewall, sandbox
settings = get_settings()
uid = sandbox.run_uid({other}, settings.job_uid_base, settings.job_uid_count)
fence = job_firewall.Fence(uid=uid, peers={peers!r}, port={OTHER_STORE_PORT},
    ephemeral=job_firewall.ephemeral_ports(), source=job_firewall.source_ports({other}))
if {action!r} == "install":
    job_firewall.install("nft", fence)
else:
    job_firewall.remove("nft", [uid])
print(uid)
"""


def test_a_multi_node_job_cannot_reach_another_runs_store_on_its_peers(cluster: Cluster) -> None:
    """Issue 37: the fence let a job reach every peer's ephemeral range, where other runs'
    torchrun stores and ranks listen (TCPStore has no credentials): a 2-node job wrote a key
    into another run's store. Another multi-node run's store listens on host b, fenced as its
    worker fences it: its own uid reaches it from host a, while every rank of this run, on
    either host, is refused it, and this run's DDP across the hosts still trains."""
    a, b = cluster.hosts.hosts
    peers = (a.address, b.address)
    other = other_run(cluster.api)
    uid = int(python_in(a, _fence_code("install", peers, other)))
    python_in(b, _fence_code("install", peers, other))
    target = f"{b.address}:{OTHER_STORE_PORT}"
    as_other = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    listener = cluster.hosts.start(
        b,
        [*as_other, sys.executable, "-I", "-c", LISTENER, str(OTHER_STORE_PORT), b.address],
        dict(os.environ),
        cluster.logs / "other-store.log",
    )
    try:
        reach = f"import sys; sys.argv = ['reach', {target!r}]\n{REACH}"

        def its_own_run_reaches_it() -> bool:
            done = subprocess.run(
                a.argv([*as_other, sys.executable, "-I", "-c", reach]),
                capture_output=True,
                text=True,
                timeout=60,
            )
            return done.returncode == 0 and done.stdout.strip() == ""

        wait_for(its_own_run_reaches_it, timeout=60, every=0.5, what="the other run's store up")
        api = cluster.api
        run_id = submit(api, "mn-other-store", TWO_BY_TWO, epochs=1, probe=target)
        run = ended(api, run_id, timeout=300)
        node_1 = api.get(f"/api/runs/{run_id}/logs", params={"node": 1}).text
        assert run["status"] == "succeeded", f"{run['error']}\nnode 1's log:\n{node_1}"
        assert set(series(api, run_id)["world_size"]["value"]) == {4.0}
        run_dir = cluster.data_dirs[run["worker_host"]] / "runs" / str(run_id)
        for log in (RunPaths(run_dir).log.read_text(), node_1):
            assert log.count(f"probe {target}: not reached") == 2, log
    finally:
        stop_process(listener, timeout=10)
        for host in (a, b):
            python_in(host, _fence_code("remove", peers, other))


@pytest.mark.timed
def test_a_failing_rank_on_node_1_fails_the_run_on_both_hosts(cluster: Cluster) -> None:
    api = cluster.api
    run_id = submit(api, "mn-fail", TWO_BY_TWO, epochs=50, fail_rank=2, fail_step=4, step_sleep=0.2)
    run = ended(api, run_id)
    assert run["status"] == "failed", run
    error = run["error"] or ""
    assert "node 1" in error and "rank 2" in error, error
    assert "rank 2 fails on purpose at step 4" in error, error
    # every process of the run on both hosts is gone within 10 s of the rank's failure (the
    # time its record says, written as it raised)
    node_1 = next(
        d
        for d in cluster.data_dirs.values()
        if (d / "runs" / str(run_id)).is_dir()
        and (d / "runs" / str(run_id) / "errors" / "rank2.json").is_file()
    )
    raised = json.loads((node_1 / "runs" / str(run_id) / "errors" / "rank2.json").read_text())
    gone_within(cluster, run_id, 10)
    took = time.time() - float(raised["time"])
    print(f"rank 2 raised -> every process on both hosts gone: at most {took:.1f} s")
    assert took < 10, took
    assert cluster.leases(run_id) == []


@pytest.mark.timed
def test_a_cancel_stops_every_process_on_both_hosts_and_frees_every_lease(
    cluster: Cluster,
) -> None:
    api = cluster.api
    run_id = submit(api, "mn-cancel", TWO_BY_TWO, epochs=50, step_sleep=0.2)
    training_on_both(cluster, run_id)
    assert len(cluster.leases(run_id)) == 4
    assert api.post(f"/api/runs/{run_id}/cancel").status_code == 202
    t0 = time.monotonic()
    gone_within(cluster, run_id, 5)
    took = time.monotonic() - t0
    print(f"cancel -> every process on both hosts gone: {took:.1f} s")
    assert took < 5
    assert ended(api, run_id, timeout=30)["status"] == "cancelled"
    assert cluster.leases(run_id) == []


def test_two_two_node_runs_submitted_at_once_run_one_after_the_other(cluster: Cluster) -> None:
    api = cluster.api
    first = submit(api, "mn-gang-a", TWO_BY_TWO, step_sleep=0.05)
    second = submit(api, "mn-gang-b", TWO_BY_TWO, step_sleep=0.05)
    runs = [succeeded(api, first), succeeded(api, second)]
    runs.sort(key=lambda r: r["started_at"])
    # never both partly: the later one started only after the earlier one had finished
    assert runs[0]["finished_at"] <= runs[1]["started_at"], runs


@pytest.mark.timed
def test_node_1s_worker_killed_and_restarted_re_adopts_its_job_and_the_run_succeeds(
    cluster: Cluster,
) -> None:
    """kill -9 of node 1's worker mid-run, restarted well within run_lost_seconds: the new
    worker takes the node's job over (its processes are the same ones), the run goes on and
    succeeds with every step once, and node 1's log is shipped once, not again from its
    start."""
    api = cluster.api
    epochs = 25  # 200 steps of at least 0.2 s: it outlasts the kill and the restart
    run_id = submit(api, "mn-readopt", TWO_BY_TWO, epochs=epochs, step_sleep=0.2)
    training_on_both(cluster, run_id)
    node_0, node_1 = cluster.node_hosts(run_id)
    before = set(cluster.processes(run_id)[node_1])
    cluster.kill_worker(node_1)
    killed = time.monotonic()
    cluster.restart_worker(node_1)
    took = time.monotonic() - killed
    wait_for(
        lambda: f"run {run_id}: re-adopted node 1's job" in cluster.worker_log(node_1),
        timeout=RUN_LOST_SECONDS,
        what="the restarted worker re-adopting node 1's job",
    )
    print(f"node 1's worker killed -> its restart heartbeating: {took:.1f} s")
    assert api.get(f"/api/runs/{run_id}").json()["status"] == "running"
    assert before <= set(cluster.processes(run_id)[node_1])  # the same job, taken over
    run = succeeded(api, run_id, timeout=300)
    got = series(api, run_id)
    assert got["train/loss"]["step"] == list(range(1, 8 * epochs + 1))  # each step once
    assert got["world_size"]["value"] == [4.0] * 8 * epochs
    log_1 = api.get(f"/api/runs/{run_id}/logs", params={"node": 1}).text
    on_host = (cluster.data_dirs[node_1] / "runs" / str(run_id) / "output.log").read_text()
    line = "rank 2 of 4 on node 1"
    assert log_1.count(line) == on_host.count(line) >= 1, log_1[:2000]
    assert run["worker_host"] == node_0
    assert cluster.leases(run_id) == []
    gone_within(cluster, run_id, 10)


def test_a_resumed_two_node_run_goes_on_from_its_checkpoint_on_whichever_hosts(
    cluster: Cluster,
) -> None:
    """A 2-node run's checkpoint reaches the artifact store from node 0's host; its run
    folders are then removed from both hosts, so wherever the resumed run's nodes land
    (node 0 on the other host or not), each fetches the checkpoint from the store. It goes
    on at the checkpoint's step, with the curve the uninterrupted run had."""
    api = cluster.api
    first = succeeded(api, submit(api, "mn-resume", TWO_BY_TWO, epochs=4, checkpoint=1))
    whole = series(api, first["id"])["train/loss"]
    assert whole["step"] == list(range(1, 33))
    for data_dir in cluster.data_dirs.values():
        shutil.rmtree(data_dir / "runs" / str(first["id"]), ignore_errors=True)
    # the newest two are kept (checkpoint retention): epoch-0002.pt is after step 24
    resumed = api.post(f"/api/runs/{first['id']}/resume", json={"checkpoint": "epoch-0002.pt"})
    assert resumed.status_code == 201, resumed.text
    second = succeeded(api, int(resumed.json()["id"]))
    node_0, node_1 = cluster.node_hosts(second["id"])
    print(f"first run's node 0: {first['worker_host']}; resumed run's node 0: {node_0}")
    got = series(api, second["id"])["train/loss"]
    assert got["step"] == list(range(25, 33))  # epoch 3 only: from the checkpoint's step
    assert got["value"] == pytest.approx(whole["value"][24:], rel=1e-5)
    log_1 = api.get(f"/api/runs/{second['id']}/logs", params={"node": 1}).text
    assert "rank 2 of 4 on node 1" in log_1, log_1[:2000]
    assert cluster.leases(second["id"]) == []


@pytest.mark.timed
def test_the_worker_of_node_1_killed_mid_run_fails_the_run_and_leaves_nothing_on_node_0(
    cluster: Cluster,
) -> None:
    """Killed and not restarted: its job trains on under its keeper, but nothing speaks for
    node 1 any more: once its heartbeat is older than run_lost_seconds the run fails as one
    with the reason, and node 0's worker stops every process of its node. Node 1's worker is
    then restarted (the cluster stays whole for any later test), and it stops what is left
    of the node's job: the run is not its any more."""
    api = cluster.api
    run_id = submit(api, "mn-lost", TWO_BY_TWO, epochs=50, step_sleep=0.2)
    training_on_both(cluster, run_id)
    node_0, node_1 = cluster.node_hosts(run_id)
    cluster.kill_worker(node_1)  # SIGKILL: its job is left behind
    try:
        run = ended(api, run_id, timeout=RUN_LOST_SECONDS * 4)
        assert run["status"] == "failed", run
        assert f"node 1 ({node_1}) lost" in (run["error"] or ""), run["error"]
        wait_for(
            lambda: not cluster.processes(run_id)[node_0],
            timeout=10,
            every=0.1,
            what=lambda: f"processes of run {run_id} left on node 0: {cluster.processes(run_id)}",
        )
        assert cluster.leases(run_id) == []
    finally:
        cluster.restart_worker(node_1)
    gone_within(cluster, run_id, 30)  # node 1's too, once its worker is back


@pytest.mark.timed
@pytest.mark.parametrize(
    ("exceed", "resources", "named"),
    [
        ("disk", {"disk_gb": 0.2}, "disk full: the run's limit is 0.2 GB"),
        ("memory", {"memory_gb": 2}, "out of memory: the run's limit is 2 GiB"),
    ],
)
def test_node_1_is_held_to_the_runs_limits_and_the_run_fails_naming_the_limit(
    cluster: Cluster, exceed: str, resources: dict, named: str
) -> None:
    """Node k's job is supervised by the loop node 0's is (worker.supervision, issue 38), its
    limits guard included: a rank of node 1 that writes past the run's disk_gb gets the job
    stopped, one that allocates past memory_gb is killed by the kernel, and either way the run
    fails on both hosts with the limit named as node 1's (the limit first, before the error
    of node 0's ranks on their broken process group)."""
    api = cluster.api
    run_id = submit(
        api,
        f"mn-{exceed}",
        {**TWO_BY_TWO, **resources},
        epochs=50,
        step_sleep=0.1,
        fail_rank=2,
        fail_step=3,
        exceed=exceed,
    )
    run = ended(api, run_id, timeout=300)
    node_1 = api.get(f"/api/runs/{run_id}/logs", params={"node": 1}).text
    assert run["status"] == "failed", f"{run}\nnode 1's log:\n{node_1[-3000:]}"
    error = run["error"] or ""
    assert error.startswith("node 1 (") and named in error.splitlines()[0], error
    gone_within(cluster, run_id, 30)
    assert cluster.leases(run_id) == []
