"""A run attempt of a Slurm pool, from its claim to the launch its Slurm job runs.

The same preparation as a local run's (worker.run_prepare) up to its launch, on the submit
host and into the shared folder (TORCHYARD_DATA_DIR inside TORCHYARD_SLURM_SHARED_DIR, checked
at the worker's start), then the launch of worker.launcher.build_launch. What differs is
what the node's batch script does with it (worker.slurm.batch): no GPU lease (Slurm's
--gres), no cgroup of torchyard's (Slurm's limits), no keeper (Slurm's step holds the
processes); the sandbox is a local run's, carried to the node (worker.slurm.boundary).
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from typing import Any

from app.db import session_scope
from app.experiments.config.model import ScriptConfig, run_config
from app.runs.models import Run
from app.runs.state import lifecycle
from app.runs.state.status import RunStatus
from app.settings import get_settings
from app.timeutil import utcnow
from torchyard.contract import RunPaths
from worker import job_sandbox, run_prepare, user_cache
from worker.gpus import host_name
from worker.heartbeat import Watched
from worker.job_policy import job_isolation
from worker.launcher import Launch, LaunchSpec, NodeSpec, build_launch
from worker.slurm import boundary
from worker.slurm.batch import MASTER_PLACEHOLDER, NODE_RANK_PLACEHOLDER, Handoff, JobFiles
from worker.workspace import prepare_work_dir

# torchrun's rendezvous port on the allocation's first node: one job per allocation of
# these nodes at a time is not guaranteed (a node may be shared), so it varies by run.
RENDEZVOUS_PORT_BASE = 29400


@dataclass(frozen=True)
class Claimed:
    run_id: int
    attempt: int
    config: dict[str, Any]
    resume_from: str | None
    owner_id: int
    in_sweep: bool

    def watched(self) -> Watched:
        metrics = RunPaths(get_settings().run_dir(self.run_id)).metrics
        return Watched(self.run_id, self.attempt, metrics, False, self.in_sweep)


def claim(run_id: int) -> Claimed | None:
    """queued -> running on this submit host (app.runs.state.lifecycle.start, no GPU leased:
    Slurm schedules); None when it is not queued any more."""
    with session_scope() as session:
        run = session.get(Run, run_id)
        if run is None or run.status != RunStatus.queued:
            return None
        claimed = Claimed(
            run_id,
            run.attempt,
            dict(run.config),
            run.resume_from,
            run.owner_id,
            run.sweep_id is not None,
        )
        host = host_name(get_settings())
        if not lifecycle.start(
            session, run_id=run_id, host=host, gpu_indices="", started_at=utcnow()
        ):
            return None
    return claimed


@dataclass(frozen=True)
class Submission:
    """What the attempt's Slurm job runs: its launch (sandboxed: with the `handoff` of its
    descriptors, worker.slurm.boundary) and its files."""

    launch: Launch
    files: JobFiles
    handoff: Handoff | None


def prepare(claimed: Claimed, held: contextlib.ExitStack) -> Submission | RunStatus:
    """The attempt's launch, or the status the run ended with before it (a bad script, a
    failed build, a cancel meanwhile)."""
    settings = get_settings()
    run_id, attempt = claimed.run_id, claimed.attempt
    config = run_config(claimed.config)
    where = run_prepare.Where(host_name(settings), ())  # the GPUs are Slurm's, the job's only
    found = run_prepare.prepare(claimed.watched(), config, held, where)
    if isinstance(found, RunStatus):
        return found
    code = isinstance(config, ScriptConfig) and bool(config.code)
    isolation = job_isolation()
    group = job_sandbox.user_group(claimed.owner_id) if isolation.as_root else None
    cache = user_cache.prepare(settings.resolved_data_dir, claimed.owner_id, group)
    nodes = config.resources.nodes
    port = RENDEZVOUS_PORT_BASE + run_id % 500
    node = NodeSpec(NODE_RANK_PLACEHOLDER, MASTER_PLACEHOLDER, port) if nodes > 1 else None
    script = found.script
    launch = build_launch(
        LaunchSpec(
            run_id=run_id,
            run_dir=settings.run_dir(run_id),
            config=config,
            python=found.python,
            job_token=secrets.token_hex(16),
            master_port=port,
            single_process=settings.single_process_launch,
            resume_from=settings.runs_dir / claimed.resume_from if claimed.resume_from else None,
            base_env={**job_sandbox.job_base_env(()), **user_cache.variables(cache)},
            script=script,
            workspace=settings.workspace_dir.expanduser().resolve()
            if script and not code
            else None,
            from_snapshot=code,
            node=node,
        )
    )
    if not code:
        prepare_work_dir(launch.cwd, script.parent if script is not None else None)
    files = boundary.job_files(run_id, attempt)
    if not isolation.enabled:
        return Submission(launch, files, None)
    launch = boundary.sandboxed(
        launch,
        isolation,
        run_id=run_id,
        config=config,
        prepared=found,
        resume=claimed.resume_from,
        cache=(cache, group),
    )
    tools = boundary.node_tools(isolation, boundary.network(config))
    fenced = boundary.fenced_uids(isolation, config)
    return Submission(launch, files, boundary.handoff(launch, files, tools, fenced))
