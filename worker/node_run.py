"""A multi-node run on this worker's host: its node's part (docs/multi-node.md, app.runs.nodes).

Every node's worker prepares the run as for one host (worker.runner), then, before its
torchrun, meets the others (`meet`): it reports ready (node 0 with the rendezvous port it just
found free on its host) and waits, checking in, until every node is. Node 0's worker then
supervises the run as always (worker.supervise: metrics, heartbeat, cancel, final status);
every other node's worker only keeps its own job in step with the run (`supervise_node`): it
stops the job as soon as the run was cancelled or ended, and a job that fails fails the run
as one (`fail_as_one`), with the first failure of any node. Node k's job is recorded on its
host (worker.job_records), so the host's next worker re-adopts it (worker.adoption) and runs
`supervise_node` on it again.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass

from app.db import session_scope
from app.runs import nodes
from app.runs.lifecycle import Standing
from app.runs.nodes import NodeFailure
from app.runs.status import RunStatus
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker import gpus, job_records
from worker.db_retry import with_db
from worker.forwarder import forward
from worker.heartbeat import Heartbeat, Watched, stops_as_cancelled
from worker.job_errors import first_failure, run_error
from worker.launcher import NodeSpec
from worker.limits import release
from worker.process import JobProcess
from worker.run_log import note_in_log
from worker.system_metrics import SystemSeries
from worker.watch import SHUTTING_DOWN, StopReason

log = logging.getLogger(__name__)

# How long a failed node waits for the other nodes' records before it writes the run's error:
# the first rank to fail is the cause, and its node's record may land a moment after a
# node whose ranks failed on the broken process group.
FAIL_SETTLE_SECONDS = 3.0
# How often a node checks in while it waits for the others or trains.
ROUND_SECONDS = 0.25
# How often node k ships its new output lines and samples its series (one transaction each).
FORWARD_SECONDS = 1.0
# How long node 0 waits, its job done, for the other nodes' ends (their ranks leave the
# process group together: a second or two) before it finishes the run anyway.
PEERS_END_SECONDS = 20.0


@dataclass(frozen=True)
class NodeRole:
    """Which node of a multi-node run this worker trains."""

    node: int
    nodes: int


def pick_port() -> int:
    """A port free on every address of this host now, for node 0's rendezvous (one per run:
    two runs' torchruns on one host never share the fixed 29400)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _check_in(run: Watched, role: NodeRole, heartbeat: Heartbeat | None) -> Standing | None:
    if heartbeat is not None:  # node 0: the run's own heartbeat (and its leases)
        return heartbeat.check()
    try:
        with session_scope() as session:
            return nodes.node_check_in(
                session, run_id=run.run_id, attempt=run.attempt, node=role.node
            )
    except Exception as exc:
        log.warning("run %s node %s: check-in failed (%s)", run.run_id, role.node, exc)
        return None


def meet(run: Watched, role: NodeRole) -> NodeSpec | StopReason | str:
    """Report ready and wait for every node: this node's NodeSpec once all are, the reason to
    stop (cancelled, handed over), or why the run fails (a node never joined)."""
    settings = get_settings()
    port = pick_port() if role.node == 0 else None
    with_db(
        run.run_id,
        "report the node ready",
        lambda s: nodes.report_ready(
            s, run_id=run.run_id, attempt=run.attempt, node=role.node, port=port
        ),
    )
    heartbeat = Heartbeat(run) if role.node == 0 else None
    deadline = time.monotonic() + settings.node_join_seconds
    said: tuple[str, ...] = ()
    while True:
        standing = _check_in(run, role, heartbeat)
        if standing is not None:
            if stops_as_cancelled(standing):
                return StopReason.CANCEL
            if standing is Standing.NOT_OWNED:
                return StopReason.FENCED
            met = with_db(
                run.run_id,
                "read the barrier",
                lambda s: nodes.barrier(s, run_id=run.run_id, attempt=run.attempt),
            )
            if met.ready:
                return NodeSpec(
                    role.node,
                    met.master_address,
                    met.port,
                    settings.worker_interface,
                    met.addresses,
                )
            if time.monotonic() > deadline:
                return (
                    f"not every node joined within {settings.node_join_seconds:.0f} s of the "
                    f"others: {'; '.join(met.missing)}"
                )
            if role.node == 0 and met.missing != said:  # the run's log says who waits for what
                said = met.missing
                note_in_log(RunPaths(run.metrics_path.parent).root, f"{'; '.join(said)}")
        time.sleep(ROUND_SECONDS)


def refuse(run: Watched, role: NodeRole, why: str) -> RunStatus:
    """This node cannot start its job as asked (its worker cannot give it the job network):
    the run fails as one, its error naming the node, its host and the cause."""
    note_in_log(RunPaths(run.metrics_path.parent).root, f"this node cannot start its job: {why}")
    return fail_as_one(run, role.node, None, NodeFailure(why, None, time.time()))


def node_failure(run_dir_log: tuple[RunPaths, int | None], node: int) -> NodeFailure:
    """The first failing rank of this node's job: its record (worker.job_errors), else the
    last traceback of its output, else its exit status."""
    paths, code = run_dir_log
    record = first_failure(paths.errors)
    if record is not None:
        text = f"{record['message']}\n\n{record['traceback']}".rstrip()
        return NodeFailure(text, int(record["rank"]), float(record["time"]))
    return NodeFailure(run_error(paths.root, paths.log, code), None, time.time())


def fail_as_one(run: Watched, node: int, code: int | None, failure: NodeFailure) -> RunStatus:
    """This node's job failed: record it, give the others a moment to record theirs, then
    fail the run with the first failure of any node (each node picks the same one)."""
    run_id, attempt = run.run_id, run.attempt
    _record_end(run, node, code, failure)
    time.sleep(FAIL_SETTLE_SECONDS)
    with_db(
        run_id,
        "fail the run",
        lambda s: nodes.fail_as_one(s, run_id=run_id, attempt=attempt, exit_code=code),
    )
    log.info("run %s failed on node %s (exit code %s)", run_id, node, code)
    return RunStatus.failed


def _early_failure(paths: RunPaths) -> NodeFailure | None:
    """A rank of the job raised (its record is written before it exits): known before
    torchrun has stopped the node's other ranks."""
    record = first_failure(paths.errors)
    if record is None:
        return None
    text = f"{record['message']}\n\n{record['traceback']}".rstrip()
    return NodeFailure(text, int(record["rank"]), float(record["time"]))


def _record_end(run: Watched, node: int, code: int | None, failure: NodeFailure | None) -> None:
    with_db(
        run.run_id,
        "record the node's end",
        lambda s: nodes.node_ended(
            s, run_id=run.run_id, attempt=run.attempt, node=node, exit_code=code, failure=failure
        ),
    )


def supervise_node(run: Watched, job: JobProcess, role: NodeRole) -> RunStatus:
    """Node k > 0's job, from its start to its end: stopped at once when the run is no longer
    its attempt's (another node failed it), after the cancel grace when it was cancelled.

    Meanwhile it forwards its node's output.log and records its system series, both labelled
    with the node (worker.forwarder, app.metrics.system_series)."""
    settings = get_settings()
    paths = RunPaths(run.metrics_path.parent)
    system = SystemSeries(
        run.run_id,
        interval=settings.system_metrics_interval_seconds,
        node=role.node,
        host=gpus.host_name(settings),
    )
    stopped: StopReason | None = None
    early: NodeFailure | None = None
    next_forward = 0.0
    while job.poll() is None:
        time.sleep(ROUND_SECONDS)
        if time.monotonic() >= next_forward:
            next_forward = time.monotonic() + FORWARD_SECONDS
            _forward(run, role, system, job)
        if early is None and (early := _early_failure(paths)) is not None:
            _record_end(run, role.node, None, early)  # now: node 0's may fail first
        standing = _check_in(run, role, None)
        if standing is None or (standing is Standing.OWNED and not SHUTTING_DOWN.is_set()):
            continue
        if standing is Standing.OWNED and settings.keep_jobs_on_worker_stop:
            # This worker shuts down: the job trains on for the host's next worker
            # (worker.adoption), as a single host's does, unless the node is lost meanwhile.
            job.detach()
            log.warning("run %s node %s: left training for the next worker", run.run_id, role.node)
            return RunStatus.running
        if standing is Standing.OWNED:  # this worker shuts down: the run cannot go on
            stopped = StopReason.SHUTDOWN
            job.stop(settings.cancel_grace_seconds)
        elif stops_as_cancelled(standing):
            stopped = StopReason.CANCEL
            job.stop(settings.cancel_grace_seconds)
        else:
            stopped = StopReason.FENCED
            job.stop(0.0)
        break
    code = job.wait()
    try:
        return _ended(run, role, job, (code, stopped, early))
    finally:
        job_records.forget_attempt(run.run_id, run.attempt)  # nothing left to re-adopt


def _ended(
    run: Watched,
    role: NodeRole,
    job: JobProcess,
    how: tuple[int, StopReason | None, NodeFailure | None],
) -> RunStatus:
    """Node k's job has exited (`how`: its exit status, why this worker stopped it, the
    failure its ranks recorded early): the last of its log, its limits released, its end
    recorded, and the run failed as one when the job failed."""
    code, stopped, early = how
    paths = RunPaths(run.metrics_path.parent)
    _forward(run, role, None, job, final=True)
    release(run.limits)
    if stopped is StopReason.SHUTDOWN:
        why = f"the worker of node {role.node} shut down while the run was training"
        return fail_as_one(run, role.node, code, NodeFailure(why, None, time.time()))
    if stopped is not None:
        note_in_log(paths.root, f"the run ended ({stopped.value}); this node's processes stopped")
        _record_end(run, role.node, code, None)
        return RunStatus.cancelled if stopped is StopReason.CANCEL else RunStatus.queued
    if code == 0:
        _record_end(run, role.node, 0, None)
        return RunStatus.succeeded
    return fail_as_one(run, role.node, code, early or node_failure((paths, code), role.node))


def await_peers(run: Watched, seconds: float = PEERS_END_SECONDS) -> None:
    """Node 0's job exited 0: wait (bounded) until every other node has shipped its last log
    lines and recorded its end (app.runs.nodes.peers_ended) before the run is finished. A peer
    that outlasts the bound is stopped at its next check-in, once the run has ended."""
    deadline = time.monotonic() + seconds
    while not with_db(
        run.run_id,
        "wait for the other nodes' ends",
        lambda s: nodes.peers_ended(s, run_id=run.run_id, attempt=run.attempt),
    ):
        if time.monotonic() > deadline:
            log.warning("run %s: a node had not ended %s s after node 0", run.run_id, seconds)
            return
        time.sleep(ROUND_SECONDS)


def _forward(
    run: Watched, role: NodeRole, system: SystemSeries | None, job: JobProcess, final: bool = False
) -> None:
    """Node k's log and system series to the database; an error is logged and retried at the
    next round (the job trains on: its output stays in this host's run directory)."""
    try:
        with session_scope() as session:
            if system is not None and system.due():
                system.record(session, job.members())
            if final and not nodes.is_latest_attempt(
                session, run_id=run.run_id, attempt=run.attempt
            ):
                return
            forward(
                session,
                run_id=run.run_id,
                metrics_path=run.metrics_path,
                # the last batch goes after node 0 may have ended the run (still this attempt)
                attempt=None if final else run.attempt,
                node=role.node,
                final=final,
            )
    except Exception as exc:
        log.warning("run %s node %s: forwarding failed (%s)", run.run_id, role.node, exc)
