"""A worker that starts takes over the jobs the previous worker on its host left running.

Each job's record (worker.job_records) names its keeper exactly. For each record of this
host, before the worker takes any task:

- the run still runs as that attempt and the keeper is alive: ADOPT. The run heartbeats at
  once, its GPU leases are taken again if they expired meanwhile, and a thread supervises the
  job exactly as the launching worker would have (worker.supervise): forwarding resumes from
  the offsets stored on the run, so no point is lost or doubled, and the attempt stays the
  same; its code snapshot's shared copy (worker/snapshots.py) is held again, so no eviction
  takes it from under the job;
- the keeper ended while nobody watched and wrote the job's exit status: adopted the same
  way; the watch loop finds it ended, drains the spool and writes the final status;
- the keeper is gone without an exit status (the host rebooted, the container was
  recreated): re-adoption is impossible; the run is handed over as a host restart (requeued
  from its newest checkpoint by default, `requeue_after_host_restart`);
- the run is not running as that attempt any more (a reaper handed it over while no worker
  was up, it was cancelled, deleted): the job is stale; it is stopped if it still runs.

A multi-node run's node k > 0 on this host (its record says which) is taken over the same way
as that node's (`adopt_node`), never as the run's own: only while its node was not declared
lost, and its thread keeps it in step with the run as its launching worker did.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time

from app.db import is_conflict, session_scope
from app.runs.nodes import NodeFailure, readopt_node
from app.runs.state.recovery import readopt
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker import snapshots
from worker.heartbeat import Watched
from worker.job_records import JobRecord, records
from worker.limits import RunLimits, release
from worker.node_run import NodeRole, fail_as_one, supervise_node
from worker.process import JobProcess
from worker.supervise import forget, hand_over_stopped, supervise

log = logging.getLogger(__name__)

HOST_RESTART_REASON = "the host restarted while the run was training; its job is gone"


class Found(enum.Enum):
    ADOPTED = "adopted"
    HOST_RESTARTED = "host restarted"
    STALE = "stale"


def adopt_one(record: JobRecord, host: str) -> tuple[Found, threading.Thread | None]:
    settings = get_settings()
    job = JobProcess.adopt(
        keeper_pid=record.keeper_pid,
        keeper_start=record.keeper_start,
        token=record.token,
        sandboxed=record.sandboxed,
        exit_file=record.exit_path,
        stop_grace_seconds=settings.cancel_grace_seconds,
    )
    alive = record.alive()
    limits = RunLimits.loads(record.limits) if record.limits is not None else None
    if record.node:
        return adopt_node(record, host, job, limits)
    try:
        with session_scope() as session:
            run = readopt(
                session,
                run_id=record.run_id,
                attempt=record.attempt,
                host=host,
                reclaim_gpus=tuple(record.gpus) if alive else None,
            )
    except Exception as exc:
        if not is_conflict(exc):
            raise
        run = None  # a GPU of its went to another run while nobody renewed it
    if run is None:
        if alive:
            log.warning("run %s: its job is not this run's any more; stopping it", record.run_id)
            job.stop(settings.cancel_grace_seconds)
        release(limits)
        record.remove()
        return Found.STALE, None
    if not alive and record.exit_code() is None:
        hand_over_stopped(
            record.run_id,
            attempt=record.attempt,
            reason=HOST_RESTART_REASON,
            requeue_from_checkpoint=settings.requeue_after_host_restart,
        )
        release(limits)
        forget(record.run_id)
        return Found.HOST_RESTARTED, None
    watched = Watched(
        record.run_id,
        record.attempt,
        RunPaths(settings.run_dir(record.run_id)).metrics,
        run.has_leases,
        run.in_sweep,
        run.gpu_indices,
        limits,
    )
    thread = threading.Thread(
        target=_supervise_adopted,
        args=(watched, job, run.code),
        name=f"run-{record.run_id}",
        daemon=True,
    )
    thread.start()
    log.info("run %s: re-adopted its job (keeper pid %s)", record.run_id, record.keeper_pid)
    return Found.ADOPTED, thread


def _supervise_adopted(watched: Watched, job: JobProcess, code: str | None) -> None:
    try:
        with contextlib.ExitStack() as held, job:
            if code is not None:  # its shared snapshot, held from eviction again
                try:
                    held.enter_context(snapshots.cache().use(code))
                except Exception:  # a missing archive must not stop the supervision
                    log.exception("run %s: could not hold its code snapshot", watched.run_id)
            supervise(watched, job)
    except Exception:  # the job is stopped by its block; the run must not stay "running"
        log.exception("run %s: supervising the re-adopted job failed", watched.run_id)
        release(watched.limits)
        hand_over_stopped(watched.run_id, attempt=watched.attempt, reason="worker error")


def adopt_node(
    record: JobRecord, host: str, job: JobProcess, limits: RunLimits | None
) -> tuple[Found, threading.Thread | None]:
    """Node k > 0's job of a multi-node run (docs/multi-node.md): taken over while the run
    still runs as its attempt and the node was not declared lost; a thread keeps it in step
    with the run as its launching worker did (worker.node_run.supervise_node). Its log resumes
    from what the database holds of it, so no line is doubled. A keeper gone without an exit
    status (the host restarted) fails the run as one, naming the node."""
    settings = get_settings()
    with session_scope() as session:
        ours = readopt_node(
            session, run_id=record.run_id, attempt=record.attempt, node=record.node, host=host
        )
    if not ours:
        if record.alive():
            log.warning("run %s: node %s's job is stale; stopping it", record.run_id, record.node)
            job.stop(0.0)  # fenced: the run ended or moved on without this node
        release(limits)
        record.remove()
        return Found.STALE, None
    watched = Watched(
        record.run_id,
        record.attempt,
        RunPaths(settings.run_dir(record.run_id)).metrics,
        has_leases=False,  # node 0's heartbeat renews every node's leases
        limits=limits,
        node=record.node,
    )
    role = NodeRole(record.node, record.nodes)
    if not record.alive() and record.exit_code() is None:
        thread = threading.Thread(
            target=_node_host_restarted, args=(watched, role, limits), daemon=True
        )
        thread.start()
        return Found.HOST_RESTARTED, thread
    thread = threading.Thread(
        target=_supervise_node, args=(watched, job, role), name=f"run-{record.run_id}", daemon=True
    )
    thread.start()
    log.info(
        "run %s: re-adopted node %s's job (keeper pid %s)",
        record.run_id,
        record.node,
        record.keeper_pid,
    )
    return Found.ADOPTED, thread


def _supervise_node(watched: Watched, job: JobProcess, role: NodeRole) -> None:
    try:
        with job:  # anything that raises stops every process of the node's job
            supervise_node(watched, job, role)
    except Exception as exc:
        log.exception("run %s: supervising node %s's job failed", watched.run_id, role.node)
        release(watched.limits)
        why = NodeFailure(f"worker error: {exc!r}", None, time.time())
        fail_as_one(watched, role.node, None, why)


def _node_host_restarted(watched: Watched, role: NodeRole, limits: RunLimits | None) -> None:
    release(limits)
    forget(watched.run_id)
    why = NodeFailure(HOST_RESTART_REASON, None, time.time())
    fail_as_one(watched, role.node, None, why)


ADOPTED: list[threading.Thread] = []


def adopt_jobs(host: str) -> dict[int, Found]:
    """Every job this host's previous worker left (run at worker start, before any task)."""
    found: dict[int, Found] = {}
    for record in records(host):
        try:
            outcome, thread = adopt_one(record, host)
        except Exception:  # one bad record must not keep the worker from starting
            log.exception("run %s: could not re-adopt its job", record.run_id)
            continue
        found[record.run_id] = outcome
        if thread is not None:
            ADOPTED.append(thread)
    return found
