"""app.runs.nodes: a multi-node run's nodes in the database (its barrier, node 0's port, each
node's heartbeat and failure), on this suite's database."""

from __future__ import annotations

import secrets
from datetime import timedelta

from sqlalchemy.orm import Session

import app.models as models
from app.gpus.service import touch_host
from app.runs import nodes
from app.runs.models import RunStatus
from app.runs.state.answers import Standing
from app.timeutil import utcnow


def running_run(db: Session) -> int:
    user = models.User(username=f"u-{secrets.token_hex(6)}", password_hash="-")
    db.add(user)
    db.flush()
    exp = models.Experiment(name="nodes", config={}, owner_id=user.id)
    db.add(exp)
    db.flush()
    config = {"recipe": "tiny_mlp", "resources": {"gpus": 2, "nproc": 2, "nodes": 2}}
    run = models.Run(
        experiment_id=exp.id,
        owner_id=user.id,
        config=config,
        seed=0,
        status=RunStatus.running,
        attempt=1,
        started_at=utcnow(),
        heartbeat_at=utcnow(),
    )
    db.add(run)
    db.flush()
    nodes.open_nodes(db, run_id=run.id, attempt=1, nodes=[("a", (0, 1)), ("b", (0, 1))])
    return run.id


def test_a_node_is_taken_once_and_no_node_starts_before_every_node_is_ready(db: Session) -> None:
    run_id = running_run(db)
    touch_host(db, host="a", gpus=[0, 1], now=utcnow(), address="10.0.0.5")
    claim = nodes.claim_node(db, run_id=run_id, attempt=1, node=1)
    assert claim is not None and (claim.host, claim.gpu_indices, claim.nodes) == ("b", (0, 1), 2)
    assert nodes.claim_node(db, run_id=run_id, attempt=1, node=1) is None  # redelivered
    assert nodes.claim_node(db, run_id=run_id, attempt=2, node=1) is None  # another attempt
    assert nodes.report_ready(db, run_id=run_id, attempt=1, node=1)
    waiting = nodes.barrier(db, run_id=run_id, attempt=1)
    assert not waiting.ready
    assert waiting.missing == ("node 0 (a) is preparing its code and environment",)
    assert nodes.report_ready(db, run_id=run_id, attempt=1, node=0, port=29611)
    met = nodes.barrier(db, run_id=run_id, attempt=1)
    assert (met.ready, met.master_address, met.port) == (True, "10.0.0.5", 29611)
    # every node's address, by node (the job network's peers); b has none: its host name
    assert met.addresses == ("10.0.0.5", "b")
    assert nodes.node_check_in(db, run_id=run_id, attempt=1, node=1) is Standing.OWNED


def test_the_run_fails_with_the_first_failure_of_any_node(db: Session) -> None:
    run_id = running_run(db)
    later = nodes.NodeFailure("RuntimeError: peer closed", 0, 200.0)
    first = nodes.NodeFailure("ValueError: bad batch", 2, 100.0)
    nodes.node_ended(db, run_id=run_id, attempt=1, node=0, exit_code=1, failure=later)
    nodes.node_ended(db, run_id=run_id, attempt=1, node=1, exit_code=1, failure=first)
    assert nodes.fail_as_one(db, run_id=run_id, attempt=1, exit_code=1)
    run = db.get(models.Run, run_id)
    assert run is not None and run.status == RunStatus.failed
    assert run.error == "node 1 (b), rank 2: ValueError: bad batch"
    # the other node's check-in sees the run ended: it stops its job
    assert nodes.node_check_in(db, run_id=run_id, attempt=1, node=0) is Standing.NOT_OWNED


def test_node_0_finishes_the_run_only_once_every_other_node_recorded_its_end(
    db: Session,
) -> None:
    """So that a run that reads "succeeded" has each node's log whole: the multi-node resume
    test read node 1's log right after the run succeeded and found only its first lines (node
    0 had finished the run while node 1's worker still had its last lines to ship)."""
    run_id = running_run(db)
    assert not nodes.peers_ended(db, run_id=run_id, attempt=1)
    nodes.node_ended(db, run_id=run_id, attempt=1, node=1, exit_code=0)
    assert nodes.peers_ended(db, run_id=run_id, attempt=1)
    # A run another node already ended (failed as one) has nothing to wait for.
    other = running_run(db)
    db.get_one(models.Run, other).status = RunStatus.failed
    db.flush()
    assert nodes.peers_ended(db, run_id=other, attempt=1)


def test_a_node_whose_worker_stopped_heartbeating_fails_the_run_as_lost(db: Session) -> None:
    run_id = running_run(db)
    assert nodes.reap_lost_nodes(db, lost_after_seconds=60) == []
    later = utcnow() + timedelta(seconds=61)
    assert nodes.reap_lost_nodes(db, lost_after_seconds=60, now=later) == [run_id]
    run = db.get(models.Run, run_id)
    assert run is not None and run.status == RunStatus.failed
    assert (run.error or "").startswith("node 1 (b) lost: its worker stopped heartbeating")


def test_a_node_waiting_for_a_slot_on_a_live_host_is_not_lost(db: Session) -> None:
    """Issue 37: node 1's task waited in its host's queue (every slot busy) while both hosts
    heartbeated, and the run failed "node 1 lost" after run_lost_seconds. Not taken yet, a
    node is lost only once its host's worker stopped heartbeating; the barrier says it waits."""
    run_id = running_run(db)
    later = utcnow() + timedelta(seconds=61)
    touch_host(db, host="b", gpus=[0, 1], now=later, address="10.0.0.6")
    assert nodes.reap_lost_nodes(db, lost_after_seconds=60, now=later) == []
    waiting = nodes.barrier(db, run_id=run_id, attempt=1)
    assert waiting.missing == (
        "node 0 (a) is preparing its code and environment",
        "node 1 (b) waits for a free slot on its worker",
    )
    # Its host's worker gone too: lost.
    much_later = later + timedelta(seconds=61)
    assert nodes.reap_lost_nodes(db, lost_after_seconds=60, now=much_later) == [run_id]
    # A node its worker took heartbeats itself: its own heartbeat decides.
    other = running_run(db)
    assert nodes.claim_node(db, run_id=other, attempt=1, node=1) is not None
    touch_host(db, host="b", gpus=[0, 1], now=much_later + timedelta(seconds=61))
    gone = much_later + timedelta(seconds=61)
    assert nodes.reap_lost_nodes(db, lost_after_seconds=60, now=gone) == [other]


def test_a_restarted_worker_re_adopts_its_node_until_the_node_is_lost(db: Session) -> None:
    """readopt_node (worker.adoption): node 1's job is taken over by its own host's next worker
    while the run runs as its attempt; not by another host, not for another attempt, and not
    once the node was declared lost (the run failed as one: its job is stopped instead)."""
    run_id = running_run(db)
    assert nodes.readopt_node(db, run_id=run_id, attempt=1, node=1, host="b")
    assert not nodes.readopt_node(db, run_id=run_id, attempt=1, node=1, host="a")
    assert not nodes.readopt_node(db, run_id=run_id, attempt=2, node=1, host="b")
    later = utcnow() + timedelta(seconds=61)
    assert nodes.reap_lost_nodes(db, lost_after_seconds=60, now=later) == [run_id]
    assert not nodes.readopt_node(db, run_id=run_id, attempt=1, node=1, host="b")


def test_a_node_whose_heartbeat_is_refused_stops_its_job(db: Session) -> None:
    """Fencing per node: a node's check-in that stamps no row of a running attempt (its end
    was recorded already, or another attempt's nodes replaced it) is NOT_OWNED, whatever the
    run's own standing; a requested cancel still says cancel."""
    run_id = running_run(db)
    assert nodes.node_check_in(db, run_id=run_id, attempt=1, node=1) is Standing.OWNED
    assert nodes.node_check_in(db, run_id=run_id, attempt=1, node=2) is Standing.NOT_OWNED
    nodes.node_ended(db, run_id=run_id, attempt=1, node=1, exit_code=0)
    assert nodes.node_check_in(db, run_id=run_id, attempt=1, node=1) is Standing.NOT_OWNED
    assert not nodes.readopt_node(db, run_id=run_id, attempt=1, node=1, host="b")
    run = db.get(models.Run, run_id)
    assert run is not None
    run.cancel_requested = True
    db.flush()
    assert nodes.node_check_in(db, run_id=run_id, attempt=1, node=1) is Standing.CANCEL_REQUESTED
