"""A multi-node run on this worker's host: its node's part (docs/multi-node.md, app.runs.nodes).

Every node's worker prepares the run as for one host (worker.runner), then, before its
torchrun, meets the others (`meet`): it reports ready (node 0 with the rendezvous port it just
found free on its host) and waits, checking in, until every node is. Node 0's worker then
supervises the run as always (worker.supervise: metrics, heartbeat, cancel, final status);
every other node's worker keeps its own job in step with the run (`supervise_node`) under the
same supervision loop (worker.watch, worker.supervision): its log and series forwarded, its
limits guarded, its node's check-in. It stops the job as soon as the run was cancelled or
ended, or the job passed a limit, and a job that fails fails the run as one (`fail_as_one`),
with the first failure of any node (a limit dated when the job was last within it). Node k's
job is recorded on its host (worker.job_records), so the host's next worker re-adopts it
(worker.adoption) and runs `supervise_node` on it again.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass

from app.db import session_scope
from app.runs import nodes
from app.runs.nodes import NodeFailure
from app.runs.state.answers import Standing
from app.runs.state.status import RunStatus
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker import job_records
from worker.db_retry import with_db
from worker.forwarder import forward
from worker.heartbeat import Watched
from worker.job_errors import first_failure, run_error
from worker.launcher import NodeSpec
from worker.limits import Guard, release
from worker.process import JobProcess
from worker.run_log import note_in_log
from worker.supervision import Policy, Seen, StopReason, supervise
from worker.supervision_steps import CheckIn
from worker.watch import limits_guard, watch

log = logging.getLogger(__name__)

# How long a failed node waits for the other nodes' records before it writes the run's error:
# the first rank to fail is the cause, and its node's record may land a moment after a
# node whose ranks failed on the broken process group.
FAIL_SETTLE_SECONDS = 3.0
# How often a node checks in while it waits for the others or trains.
ROUND_SECONDS = 0.25
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


class _Meeting:
    """The wait for every node, as a step and as what the loop supervises: it ends once the
    barrier is met (this node's NodeSpec) or the join time is over (why the run fails)."""

    def __init__(self, run: Watched, role: NodeRole) -> None:
        self.run, self.role = run, role
        self.deadline = time.monotonic() + get_settings().node_join_seconds
        self.said: tuple[str, ...] = ()
        self.outcome: NodeSpec | str | None = None

    def __call__(self, seen: Seen) -> None:
        if seen.standing is not Standing.OWNED:  # not answered, or the decision tree's to act
            return
        run, settings = self.run, get_settings()
        met = with_db(
            run.run_id,
            "read the barrier",
            lambda s: nodes.barrier(s, run_id=run.run_id, attempt=run.attempt),
        )
        if met.ready:
            self.outcome = NodeSpec(
                self.role.node,
                met.master_address,
                met.port,
                settings.worker_interface,
                met.addresses,
            )
        elif time.monotonic() > self.deadline:
            self.outcome = (
                f"not every node joined within {settings.node_join_seconds:.0f} s of the "
                f"others: {'; '.join(met.missing)}"
            )
        elif self.role.node == 0 and met.missing != self.said:  # the log says who waits
            self.said = met.missing
            note_in_log(RunPaths(run.metrics_path.parent).root, f"{'; '.join(self.said)}")

    def ended(self) -> bool:
        return self.outcome is not None

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)

    def stop(self, grace: float, reason: StopReason) -> bool:
        return True  # nothing of the node runs yet


def meet(run: Watched, role: NodeRole) -> NodeSpec | StopReason | str:
    """Report ready and wait for every node: this node's NodeSpec once all are, the reason to
    stop (cancelled, handed over), or why the run fails (a node never joined). The wait is the
    supervision loop's (worker.supervision): the check-in (node 0's: the run's own heartbeat
    and leases), then the barrier; a worker shutdown does not end it (the job, once started,
    is left to the next worker as any job is)."""
    port = pick_port() if role.node == 0 else None
    with_db(
        run.run_id,
        "report the node ready",
        lambda s: nodes.report_ready(
            s, run_id=run.run_id, attempt=run.attempt, node=role.node, port=port
        ),
    )
    meeting = _Meeting(run, role)
    policy = Policy(cancel_grace=0.0, shutdown_grace=None)
    what = f"run {run.run_id} node {role.node}'s meeting"
    stopped = supervise(what, meeting, [CheckIn(run), meeting], policy, interval=ROUND_SECONDS)
    if stopped is not None:
        return stopped
    assert meeting.outcome is not None
    return meeting.outcome


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


class _NodeFailures:
    """Node k's failure, recorded on its node as soon as it is known, before torchrun has
    stopped the node's other ranks or this worker the job (node 0's may fail first): the first
    rank's record (a step of the loop), or the limit the job passed, dated when the job was
    last seen within it (worker.limits.Guard.hit_after)."""

    def __init__(self, run: Watched, node: int) -> None:
        self.run, self.node = run, node
        self.paths = RunPaths(run.metrics_path.parent)
        self.early: NodeFailure | None = None
        self.limit: NodeFailure | None = None

    def __call__(self, seen: Seen) -> None:
        if self.early is None and (found := _early_failure(self.paths)) is not None:
            self.early = found
            if self.limit is None:  # the limit is the cause: a rank then failed on it
                _record_end(self.run, self.node, None, found)

    def limit_hit(self, hit: str, guard: Guard) -> NodeFailure:
        self.limit = NodeFailure(hit, None, guard.hit_after(hit))
        _record_end(self.run, self.node, None, self.limit)
        return self.limit


def supervise_node(run: Watched, job: JobProcess, role: NodeRole) -> RunStatus:
    """Node k > 0's job, from its start to its end, under the supervision loop every job has
    (worker.watch): its log and system series forwarded (labelled with the node), its limits
    guarded, the node's check-in; stopped at once when the run is no longer its attempt's
    (another node failed it), after the cancel grace when it was cancelled or a limit hit."""
    settings = get_settings()
    guard = limits_guard(run)
    failures = _NodeFailures(run, role.node)

    def on_hit(hit: str) -> None:
        assert guard is not None
        failures.limit_hit(hit, guard)

    stopped = watch(
        run,
        job,
        interval=ROUND_SECONDS,
        grace=settings.cancel_grace_seconds,
        guard=guard,
        on_hit=on_hit,
        extra=[failures],
    )
    if stopped is StopReason.DETACH:
        # This worker shuts down: the job trains on for the host's next worker
        # (worker.adoption), as a single host's does, unless the node is lost meanwhile.
        job.detach()
        log.warning("run %s node %s: left training for the next worker", run.run_id, role.node)
        return RunStatus.running
    code = job.wait()
    try:
        hit = guard.verdict(code) if guard is not None else None
        return _ended(run, role, (code, stopped, hit, guard), failures)
    finally:
        job_records.forget_attempt(run.run_id, run.attempt)  # nothing left to re-adopt


def _ended(
    run: Watched,
    role: NodeRole,
    how: tuple[int, StopReason | None, str | None, Guard | None],
    failures: _NodeFailures,
) -> RunStatus:
    """Node k's job has exited (`how`: its exit status, why this worker stopped it, the limit
    it passed and the guard that saw it): the last of its log, its limits released, its end
    recorded, and the run failed as one when the job failed (the limit first, as on one
    host: worker.supervise)."""
    code, stopped, hit, guard = how
    paths = RunPaths(run.metrics_path.parent)
    _forward_last(run, role)
    release(run.limits)
    if stopped is StopReason.SHUTDOWN:
        why = f"the worker of node {role.node} shut down while the run was training"
        return fail_as_one(run, role.node, code, NodeFailure(why, None, time.time()))
    if stopped in (StopReason.CANCEL, StopReason.FENCED):
        note_in_log(paths.root, f"the run ended ({stopped.value}); this node's processes stopped")
        _record_end(run, role.node, code, None)
        return RunStatus.cancelled if stopped is StopReason.CANCEL else RunStatus.queued
    if hit is not None and guard is not None:
        limit = failures.limit or failures.limit_hit(hit, guard)
        words = node_failure((paths, code), role.node).error
        failure = NodeFailure(f"{hit}\n\n{words}", None, limit.failed_at)
        return fail_as_one(run, role.node, code, failure)
    if code == 0:
        _record_end(run, role.node, 0, None)
        return RunStatus.succeeded
    failure = failures.early or node_failure((paths, code), role.node)
    return fail_as_one(run, role.node, code, failure)


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


def _forward_last(run: Watched, role: NodeRole) -> None:
    """Node k's last log lines to the database once its job has ended (the loop shipped the
    rest), while the run is still this attempt's; the batch goes after node 0 may have ended
    the run. An error is logged (its output stays in this host's run directory)."""
    try:
        with session_scope() as session:
            if not nodes.is_latest_attempt(session, run_id=run.run_id, attempt=run.attempt):
                return
            forward(
                session,
                run_id=run.run_id,
                metrics_path=run.metrics_path,
                attempt=None,
                node=role.node,
                final=True,
            )
    except Exception as exc:
        log.warning("run %s node %s: forwarding failed (%s)", run.run_id, role.node, exc)
