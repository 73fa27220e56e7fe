"""A multi-node run's nodes (issue 30, docs/multi-node.md): the one module that writes
``run_nodes``.

The scheduler leases every node's GPUs in one transaction (app.gpus.service.try_start), which
opens the nodes here and, once committed, sends one task per node to its host's own queue
(app.broker.send_node; node 0 runs on the worker that asked). From then on each node's worker:

- prepares (code, environment), then reports ready; node 0 with the rendezvous port it picked
  on its host. No node starts its torchrun before every node is ready (``barrier``): a node
  that is still building an environment must not make the others' rendezvous time out.
- while its job trains, checks in (``node_check_in``): its node's heartbeat, and whether the
  run still runs as its attempt. A node stops its job when the run was cancelled (node 0's
  worker finishes it cancelled) or ended (another node failed it).
- records how its job ended (``node_ended``). A node whose job failed fails the whole run
  (``fail_as_one``) with the earliest failure of any node: the first rank to fail is the cause,
  the others then fail on their broken process group. Every node composes the error from the
  same records, so whichever node's transaction wins, the error names the same node and rank.

A node whose worker stops heartbeating is lost (``reap_lost_nodes``, the reaper's round): the
run fails as one with the reason, and every other node's job stops on its next check-in. A
worker restarted on node k's host before that takes the node's job over (``readopt_node``,
worker.adoption); a node's refused heartbeat (``node_check_in``) stops its job at once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, delete, select, update
from sqlalchemy.orm import Session

from app.db import after_commit
from app.experiments.config.model import run_config
from app.gpus.models import WorkerHost
from app.runs.models import Run, RunNode, RunStatus
from app.runs.state import lifecycle
from app.runs.state.answers import Standing
from app.timeutil import as_utc, utcnow

NodePlacement = tuple[str, tuple[int, ...]]  # (host, GPU indices): app.gpus.scheduler's


def _indices(text: str) -> tuple[int, ...]:
    return tuple(int(i) for i in text.split(",") if i)


def open_nodes(
    session: Session, *, run_id: int, attempt: int, nodes: Sequence[NodePlacement]
) -> None:
    """The attempt's nodes, in the transaction that starts it; each node but 0 (the worker
    that started it) gets its task on its host's queue once that transaction commits."""
    from app.broker import send_node

    session.execute(delete(RunNode).where(RunNode.run_id == run_id))
    now = utcnow()
    for index, (host, gpus) in enumerate(nodes):
        session.add(
            RunNode(
                run_id=run_id,
                node=index,
                attempt=attempt,
                host=host,
                gpu_indices=",".join(str(i) for i in gpus),
                heartbeat_at=now,
            )
        )
    session.flush()
    for index, (host, _gpus) in enumerate(nodes):
        if index:
            after_commit(session, functools.partial(send_node, run_id, attempt, index, host))


@dataclass(frozen=True)
class NodeClaim:
    """What a node's worker needs of the run it trains a node of."""

    run_id: int
    attempt: int
    node: int
    nodes: int
    host: str
    gpu_indices: tuple[int, ...]
    config: dict[str, object]
    resume_from: str | None
    sweep_id: int | None
    owner_id: int


def claim_node(session: Session, *, run_id: int, attempt: int, node: int) -> NodeClaim | None:
    """The node's part of the run, taken once, while the run still runs as `attempt` (None: it
    ended, was handed over or cancelled before this node's task came by, or the node was
    taken already: nothing to do)."""
    run = session.get(Run, run_id)
    if run is None or run.status != RunStatus.running or run.attempt != attempt:
        return None
    if run.cancel_requested:
        return None
    rows = session.scalars(
        select(RunNode).where(RunNode.run_id == run_id, RunNode.attempt == attempt)
    ).all()
    mine = [r for r in rows if r.node == node]
    taken = session.execute(
        update(RunNode)
        .where(_this(run_id, attempt, node), RunNode.taken_at.is_(None))
        .values(taken_at=utcnow(), heartbeat_at=utcnow())
    )
    if not mine or not taken.rowcount:  # type: ignore[attr-defined]  # an UPDATE's CursorResult
        return None  # a redelivered task: the node is another's already
    return NodeClaim(
        run_id=run_id,
        attempt=attempt,
        node=node,
        nodes=len(rows),
        host=mine[0].host,
        gpu_indices=_indices(mine[0].gpu_indices),
        config=dict(run.config),
        resume_from=run.resume_from,
        sweep_id=run.sweep_id,
        owner_id=run.owner_id,
    )


def _this(run_id: int, attempt: int, node: int) -> ColumnElement[bool]:
    return and_(RunNode.run_id == run_id, RunNode.attempt == attempt, RunNode.node == node)


def report_ready(
    session: Session, *, run_id: int, attempt: int, node: int, port: int | None = None
) -> bool:
    """The node has prepared (code, environment); node 0 says the rendezvous port too."""
    now = utcnow()
    values: dict[str, object] = {"ready_at": now, "heartbeat_at": now}
    if port is not None:
        values["port"] = port
    done = session.execute(update(RunNode).where(_this(run_id, attempt, node)).values(**values))
    return bool(done.rowcount)  # type: ignore[attr-defined]  # a CursorResult for an UPDATE


# What a node not ready yet waits for (Barrier.missing: the run's log and its error say it).
WAITING_FOR_SLOT = "waits for a free slot on its worker"
PREPARING = "is preparing its code and environment"


@dataclass(frozen=True)
class Barrier:
    """Where the attempt's nodes stand before any starts."""

    ready: bool  # every node reported ready: each may start its torchrun now
    # "node 1 (host-1) waits for a free slot on its worker" of each node not ready yet
    missing: tuple[str, ...] = ()
    master_address: str = ""  # node 0's worker address (worker_hosts.address)
    port: int = 0  # node 0's rendezvous port
    # every node's worker address, by node (the job network's peers: worker.job_firewall)
    addresses: tuple[str, ...] = ()


def barrier(session: Session, *, run_id: int, attempt: int) -> Barrier:
    rows = session.scalars(
        select(RunNode)
        .where(RunNode.run_id == run_id, RunNode.attempt == attempt)
        .order_by(RunNode.node)
    ).all()
    missing = tuple(
        # node 0 runs on the worker that started the run: never waiting for a slot
        f"node {r.node} ({r.host}) {WAITING_FOR_SLOT if r.node and not r.taken_at else PREPARING}"
        for r in rows
        if r.ready_at is None
    )
    if missing or not rows:
        return Barrier(False, missing)
    hosts = [r.host for r in rows]
    listed = select(WorkerHost.host, WorkerHost.address).where(WorkerHost.host.in_(hosts))
    known = {host: address for host, address in session.execute(listed)}
    addresses = tuple(known.get(host) or host for host in hosts)
    return Barrier(True, (), addresses[0], rows[0].port or 0, addresses)


def node_check_in(session: Session, *, run_id: int, attempt: int, node: int) -> Standing:
    """A node's round while it prepares, waits or trains: its heartbeat, and the run's
    standing as node 0's worker would see it (without stamping the run's own heartbeat, which
    is node 0's). A refused heartbeat (no such node of a running attempt: the run ended, the
    node was declared lost, a new attempt's nodes replaced it) is NOT_OWNED unless a cancel
    says more: the node stops its job at once (fencing per node)."""
    beat = session.execute(
        update(RunNode)
        .where(_this(run_id, attempt, node), RunNode.exit_code.is_(None))
        .values(heartbeat_at=utcnow())
    )
    standing = lifecycle.check_in(
        session, run_id=run_id, attempt=attempt, renew_leases=False, beat=False
    )
    refused = not beat.rowcount  # type: ignore[attr-defined]  # a CursorResult for an UPDATE
    return Standing.NOT_OWNED if refused and standing is Standing.OWNED else standing


def readopt_node(session: Session, *, run_id: int, attempt: int, node: int, host: str) -> bool:
    """Node k's job, left training by the previous worker on `host` (worker.adoption): taken
    over while the run still runs as `attempt` and the node, on this host, has not ended. Its
    heartbeat is stamped at once. A node declared lost failed its run already
    (``reap_lost_nodes``): then False, and the job left behind is stopped."""
    run = session.get(Run, run_id, populate_existing=True)
    if run is None or run.status != RunStatus.running or run.attempt != attempt:
        return False
    beat = session.execute(
        update(RunNode)
        .where(_this(run_id, attempt, node), RunNode.host == host, RunNode.exit_code.is_(None))
        .values(heartbeat_at=utcnow())
    )
    return bool(beat.rowcount)  # type: ignore[attr-defined]  # a CursorResult for an UPDATE


@dataclass(frozen=True)
class NodeFailure:
    """The first failing rank of a node's job (worker.job_errors)."""

    error: str
    rank: int | None
    failed_at: float  # epoch seconds


def node_ended(
    session: Session,
    *,
    run_id: int,
    attempt: int,
    node: int,
    exit_code: int | None,
    failure: NodeFailure | None = None,
) -> None:
    values: dict[str, object] = {"exit_code": exit_code, "heartbeat_at": utcnow()}
    if failure is not None:
        rank = f"rank {failure.rank}: " if failure.rank is not None else ""
        values.update(error=f"{rank}{failure.error}", failed_at=failure.failed_at)
    session.execute(update(RunNode).where(_this(run_id, attempt, node)).values(**values))


def first_failure(session: Session, *, run_id: int, attempt: int) -> str | None:
    """The run's error from its nodes' records: the earliest failure, naming its node and
    host (and rank, when known), None when no node recorded one."""
    rows = session.scalars(
        select(RunNode).where(
            RunNode.run_id == run_id, RunNode.attempt == attempt, RunNode.error.is_not(None)
        )
    ).all()
    if not rows:
        return None
    first = min(rows, key=lambda r: (r.failed_at or 0.0, r.node))
    return f"node {first.node} ({first.host}), {first.error}"


def fail_as_one(session: Session, *, run_id: int, attempt: int, exit_code: int | None) -> bool:
    """A node's job failed: the run fails (its leases go with it) with the first failure of
    any node; every other node's job stops at its next check-in."""
    error = first_failure(session, run_id=run_id, attempt=attempt) or "a node failed"
    return lifecycle.finish(
        session,
        run_id=run_id,
        attempt=attempt,
        status=RunStatus.failed,
        exit_code=exit_code,
        error=error,
    )


def reap_lost_nodes(
    session: Session, *, lost_after_seconds: float, now: datetime | None = None
) -> list[int]:
    """Running multi-node runs one of whose nodes (other than 0: node 0's worker is the run's,
    app.runs.state.recovery reaps it) stopped heartbeating before its job ended: failed as one,
    the reason naming the node. Returns their ids.

    A node its host's worker has not taken yet (every slot busy: its task waits in the host's
    queue) has no heartbeat of its own: it is lost only when its host's worker stopped
    heartbeating (``worker_hosts``). Waiting for a slot is node 0's barrier's business, which
    fails the run once ``node_join_seconds`` have passed, naming the node and what it waits
    for (issue 37: such a run failed "node 1 lost" while both hosts heartbeated)."""
    now = now or utcnow()
    cutoff = now - timedelta(seconds=lost_after_seconds)
    rows = session.execute(
        select(
            RunNode.run_id,
            RunNode.attempt,
            RunNode.node,
            RunNode.host,
            RunNode.heartbeat_at,
            RunNode.taken_at,
            WorkerHost.heartbeat_at,
        )
        .join(Run, Run.id == RunNode.run_id)
        .outerjoin(WorkerHost, WorkerHost.host == RunNode.host)
        .where(
            Run.status == RunStatus.running,
            Run.attempt == RunNode.attempt,
            RunNode.node > 0,
            RunNode.exit_code.is_(None),
        )
    ).all()
    failed = []
    for run_id, attempt, node, host, beat, taken, host_beat in rows:
        if taken is None and host_beat is not None:
            beat = host_beat  # not taken yet: alive while its host's worker is
        if as_utc(beat) >= cutoff or run_id in failed:
            continue
        reason = (
            f"node {node} ({host}) lost: its worker stopped heartbeating for"
            f" {lost_after_seconds:.0f} s; every node's processes were stopped"
        )
        if lifecycle.fail(session, run_id=run_id, attempt=attempt, reason=reason, now=now):
            failed.append(run_id)
    return failed


def holds_node_0(session: Session, *, run_id: int, host: str) -> bool:
    """Whether this host's folder of the run is the run's own: a single-host run's, or node
    0's of a multi-node run (``runs.worker_host``). Node k > 0's host has a folder too, whose
    spool and log forwarded as the run's would land on node 0's offsets."""
    run = session.get(Run, run_id)
    if run is None:
        return False
    return run_config(run.config or {}).resources.nodes == 1 or run.worker_host == host


def peers_ended(session: Session, *, run_id: int, attempt: int) -> bool:
    """Whether every node but 0 has recorded how its job ended, or the run no longer runs as
    this attempt (a node failed it): node 0, its own job done, finishes the run only then, so
    a run that reads "succeeded" has every node's log whole (each node ships its last lines
    before it records its end)."""
    running = session.scalar(
        select(Run.id).where(
            Run.id == run_id, Run.attempt == attempt, Run.status == RunStatus.running
        )
    )
    if running is None:
        return True
    waiting = session.scalar(
        select(RunNode.node).where(
            RunNode.run_id == run_id,
            RunNode.attempt == attempt,
            RunNode.node > 0,
            RunNode.exit_code.is_(None),
            RunNode.error.is_(None),
        )
    )
    return waiting is None


def is_latest_attempt(session: Session, *, run_id: int, attempt: int) -> bool:
    """Whether no later attempt of the run exists (it may have ended): node k's last log lines
    still ship after node 0 finished the run, never into a requeued run's next attempt."""
    return session.scalar(select(Run.attempt).where(Run.id == run_id)) == attempt
