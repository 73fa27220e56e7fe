"""Runs one training run from start to end inside a worker: start (scheduler + GPU leases),
launch, watch and drain (worker.watch), finish (the status through app.runs.state.lifecycle, its
leases released with it).

Takes a run id, not an ORM object, and opens short units of work of its own, so the database
is never held while the job trains.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
from dataclasses import replace
from functools import lru_cache

from app.db import database_away, is_conflict, session_scope
from app.experiments.config.model import SessionConfig, config_code, run_config
from app.gpus.service import StartOutcome, StartResult, touch_host, try_start
from app.runs import nodes
from app.runs.state import phase
from app.runs.state.status import RunStatus
from app.settings import get_settings
from app.timeutil import utcnow
from torchyard.contract import RunPaths
from worker import (
    artifacts,
    env_build,
    held_gpus,
    job_records,
    job_sandbox,
    limits,
    node_run,
    privileged_env,
    run_prepare,
    session_job,
    user_cache,
)
from worker import slots as worker_slots
from worker.db_retry import with_db
from worker.executor import NotRun
from worker.gpus import Inventory, detect, gpu_stats
from worker.heartbeat import Watched
from worker.job_firewall import FirewallError, fence, nft_path
from worker.job_network import Plan
from worker.job_policy import (
    job_isolation,
    job_limits,
    multi_node_fence,
    multi_node_refusal,
    network_plan,
)
from worker.launcher import LaunchSpec, NodeSpec, build_launch
from worker.node_run import NodeRole
from worker.process import JobProcess
from worker.supervise import (
    finish,
    not_met,
    remember,
    supervise,
)
from worker.workspace import prepare_work_dir

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@lru_cache
def inventory() -> Inventory:
    found = detect(get_settings())
    log.info("GPU inventory of %s: %s (%s)", found.host, list(found.gpus) or "none", found.source)
    return found


def start(run_id: int) -> StartResult:
    """Ask the scheduler, in one serialized transaction, whether this host starts the run now;
    if so its leases are taken and it is running when this returns."""
    settings = get_settings()
    inv = inventory()
    # Read before the transaction (NVML is not quick enough to hold a lock); a GPU a job of
    # this worker still runs on is busy whatever its lease says (a reaped attempt's job).
    stats = held_gpus.mark_busy(gpu_stats(inv), inv.gpus)
    try:
        with session_scope() as session:
            return try_start(
                session,
                run_id=run_id,
                host=inv.host,
                inventory=list(inv.gpus),
                lease_ttl_seconds=settings.lease_ttl_seconds,
                starvation_seconds=settings.starvation_seconds,
                gpu_stats=stats,
                address=settings.resolved_worker_address,
            )
    except Exception as exc:
        if is_conflict(exc):  # a GPU leased twice: the database refused, so nothing was taken
            log.warning("run %s: lease conflict; will ask again", run_id)
            return StartResult(StartOutcome.WAIT, reason="lease conflict")
        if database_away(exc):  # the run stays queued
            log.exception("run %s: could not ask the scheduler; will ask again", run_id)
            return StartResult(StartOutcome.WAIT, reason="database unavailable")
        raise


def heartbeat_host() -> None:
    """Keep this host live for the scheduler while the worker is idle (one round of the
    periodic job in worker/scheduled.py, from the start at once)."""
    inv = inventory()
    with session_scope() as session:
        touch_host(
            session,
            host=inv.host,
            gpus=list(inv.gpus),
            now=utcnow(),
            gpu_stats=held_gpus.mark_busy(gpu_stats(inv), inv.gpus),
            address=get_settings().resolved_worker_address,
        )


def execute_run(run_id: int) -> RunStatus | NotRun:
    """Runs the run when the scheduler lets this host start it and this worker has a place
    for it (worker.slots: a run slot, or a build place when its environment must be built
    first); returns the status it ended with (queued: handed back to the queue by a worker
    shutdown), or why it did not run."""
    place = worker_slots.slots()
    claim = place.claim(needs_build=env_build.needs_build(run_id)) if place else None
    if place is not None and claim is None:
        log.debug("run %s waits: no free slot on this worker", run_id)
        return NotRun.WAITING
    with contextlib.ExitStack() as held:  # the run's place, then its environment
        if claim is not None:
            held.callback(claim.release)
        started = start(run_id)
        if started.outcome is StartOutcome.GONE:
            log.info("run %s is not queued any more; nothing to do", run_id)
            return NotRun.GONE
        if started.outcome is StartOutcome.WAIT:
            log.debug("run %s waits: %s", run_id, started.reason)
            return NotRun.WAITING
        role = NodeRole(0, len(started.nodes)) if started.nodes else None
        try:
            return _execute_claimed(run_id, started, held, role, claim)
        except Exception as exc:
            # A claimed run must never stay "running" because the worker itself failed. Its
            # job, if it was spawned, is stopped already (JobProcess's block): the GPUs are free.
            log.exception("run %s: the worker failed while running it", run_id)
            error = f"worker error: {exc!r}"
            return finish(run_id, RunStatus.failed, None, error, attempt=started.attempt)


def execute_node(run_id: int, attempt: int, node: int) -> RunStatus | None:
    """Node `node` (> 0) of a multi-node run's attempt on this host (app.runs.nodes sent it
    here); None when the run no longer runs as that attempt."""
    with session_scope() as session:
        claim = nodes.claim_node(session, run_id=run_id, attempt=attempt, node=node)
    if claim is None:
        log.info(
            "run %s: attempt %s no longer runs; node %s has nothing to do", run_id, attempt, node
        )
        return None
    claimed = StartResult(
        StartOutcome.STARTED,
        gpu_indices=claim.gpu_indices,
        config=claim.config,
        resume_from=claim.resume_from,
        attempt=attempt,
        sweep_id=claim.sweep_id,
        owner_id=claim.owner_id,
    )
    try:
        with contextlib.ExitStack() as held:
            return _execute_claimed(run_id, claimed, held, NodeRole(node, claim.nodes))
    except Exception as exc:
        log.exception("run %s: the worker failed while running node %s", run_id, node)
        watched = Watched(run_id, attempt, RunPaths(get_settings().run_dir(run_id)).metrics, False)
        why = nodes.NodeFailure(f"worker error: {exc!r}", None, utcnow().timestamp())
        return node_run.fail_as_one(watched, node, None, why)


def _execute_claimed(
    run_id: int,
    claimed: StartResult,
    held: contextlib.ExitStack,
    role: NodeRole | None = None,
    place: worker_slots.Claim | None = None,
) -> RunStatus:
    """Claimed by this host: the whole run, or (`role`) one node of a multi-node run."""
    settings = get_settings()
    chief = role is None or role.node == 0  # writes the run's own records
    assert claimed.config is not None
    config = run_config(claimed.config)  # the one place the worker reads a run's config
    attempt = claimed.attempt
    run_dir = settings.run_dir(run_id)
    resume = claimed.resume_from
    code = config_code(config)
    in_sweep = claimed.sweep_id is not None
    gpus = tuple(claimed.gpu_indices or ())
    watched = Watched(run_id, attempt, RunPaths(run_dir).metrics, bool(gpus), in_sweep, gpus)
    watched = replace(watched, node=role.node if role is not None else None)

    def refusal() -> RunStatus | None:  # before a long environment build
        if role is not None and (refused := multi_node_refusal()) is not None:
            return node_run.refuse(watched, role, refused)
        return None

    found = run_prepare.prepare(
        watched,
        config,
        held,
        run_prepare.Where(inventory().host, claimed.gpu_indices, chief),
        refusal=refusal,
        built=place.built if place is not None else lambda: None,  # a build place -> a slot
    )
    if isinstance(found, RunStatus):
        return found
    script, unpacked = found.script, found.unpacked
    isolation = job_isolation()
    group = job_sandbox.user_group(claimed.owner_id) if isolation.as_root else None
    cache = user_cache.prepare(settings.resolved_data_dir, claimed.owner_id, group)
    token = secrets.token_hex(16)
    artifacts.ensure_local(settings.runs_dir, resume)  # a checkpoint another host wrote
    node: NodeSpec | None = None
    if role is not None:  # every node prepared before any starts
        met = node_run.meet(watched, role)
        if not isinstance(met, NodeSpec):
            return not_met(watched, role, met)
        node = met
        # The host's network, fenced by rules of the run's uid (worker.job_firewall), until
        # the job has ended; nft failing, or a clash with another run's fence, fails the run.
        rules = multi_node_fence(run_id, node.peers, node.master_port)
        if rules is not None:
            try:
                held.enter_context(fence(nft_path() or "nft", rules))
            except FirewallError as exc:
                return node_run.refuse(watched, role, str(exc))
    launch = build_launch(
        LaunchSpec(
            run_id=run_id,
            run_dir=run_dir,
            config=config,
            python=found.python,
            job_token=token,
            master_port=free_port(),
            single_process=settings.single_process_launch,
            resume_from=settings.runs_dir / resume if resume else None,
            base_env={
                **job_sandbox.job_base_env(claimed.gpu_indices),
                **user_cache.variables(cache),
            },
            script=script,
            workspace=settings.workspace_dir.expanduser().resolve()
            if script and not code
            else None,
            from_snapshot=bool(code),
            node=node,
        )
    )
    if not code:  # a snapshot's mirror is its own work dir already (worker.code)
        prepare_work_dir(launch.cwd, script.parent if script is not None else None)
    if isinstance(config, SessionConfig):  # JupyterLab instead of a script, same sandbox
        secret = session_job.prepare(run_dir)
        launch = session_job.lab_launch(launch, run_id=run_id, run_dir=run_dir, token=secret)
    try:  # the attempt's cgroup, before its job's first process
        name = limits.cgroup_name(settings.data_dir, run_id, attempt)
        held_to = limits.prepare(job_limits(), limits.RunLimits.of(config.resources), name)
    except OSError as exc:
        error = f"could not apply the run's limits: {exc}"
        return finish(run_id, RunStatus.failed, None, error, attempt=attempt)
    watched = replace(watched, limits=held_to)
    # Until the keeper's spawn nothing runs in the cgroup: a failure here removes it.
    try:
        own_uid = isolation.enabled and isolation.as_root
        options = limits.keeper_options(held_to, own_uid=own_uid, gpus=bool(gpus))
        launch = replace(launch, keeper_options=tuple(options))
        if isolation.enabled:
            launch = job_sandbox.sandboxed(
                launch,
                isolation,
                run_id=run_id,
                run_dir=run_dir,
                script=script if not code else None,  # a snapshot's job needs no workspace
                code=unpacked,
                gpus=claimed.gpu_indices,
                resume=resume,
                python_dirs=found.python_dirs,
                cache=(cache, group),
                held_to=held_to,
                nvml=inventory().source == "nvml",
                # A multi-node job's peers must reach its ranks, which a namespace of its own
                # does not let in: the host's network, fenced above.
                network=Plan("host") if role is not None else network_plan(),
            )
        else:  # the keeper gets no run variable either (worker.privileged_env)
            launch = privileged_env.handed_over(launch)
        # The run's duration counts from here, its environment's build apart (app.runs.state.phase).
        if chief:
            with_db(
                run_id,
                "record the training start",
                lambda s: phase.training(s, run_id=run_id, attempt=attempt),
            )
    except BaseException:
        limits.release(held_to)
        raise
    try:
        job = JobProcess(
            launch,
            log_path=RunPaths(run_dir).log,
            cwd=launch.cwd,
            token=token,
            nice=settings.job_nice,
            stop_grace_seconds=settings.cancel_grace_seconds,
            sandboxed=isolation.enabled,
            exit_file=job_records.prepare_exit_path(run_id),
        )
    except OSError as exc:
        limits.release(held_to)
        error = f"could not start the job: {exc}"
        return finish(run_id, RunStatus.failed, None, error, attempt=attempt)
    try:
        with job:  # from here on, anything that raises stops every process of the job first
            if role is not None and role.node > 0:
                remember(job, watched, host=inventory().host, nodes=role.nodes)
                log.info("run %s node %s started: keeper pid %s", run_id, role.node, job.pid)
                return node_run.supervise_node(watched, job, role)
            remember(job, watched, host=inventory().host)
            log.info("run %s started: keeper pid %s, %s", run_id, job.pid, " ".join(launch.argv))
            # Removes the cgroup once the job has ended, keeps it for a job left to train on.
            return supervise(watched, job)
    except BaseException:
        limits.release(held_to)  # the block stopped the job
        raise
