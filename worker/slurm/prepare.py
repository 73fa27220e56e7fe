"""A run attempt of a Slurm pool, from its claim to the launch its Slurm job runs.

The same steps as a local run's (worker.runner) up to its launch, on the submit host and into
the shared folder (TORCHYARD_DATA_DIR inside TORCHYARD_SLURM_SHARED_DIR, checked at the
worker's start): the run's config file, its code snapshot's copy, its environment (built
here, supervised as locally), the job base, its environment record, then the launch of
worker.launcher.build_launch. What differs is what the node's batch script does with it
(worker.slurm.batch): no GPU lease (Slurm's --gres), no cgroup of torchyard's (Slurm's
limits), no keeper or sandbox of torchyard's (docs/clusters.md: the job runs as the service's
Slurm account).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.code.store import SnapshotMissing
from app.code.tarcheck import TarRefused
from app.db import session_scope
from app.experiments.config.model import RunConfig, ScriptConfig, run_config
from app.experiments.requirements import RequirementRefused
from app.experiments.workspace import ScriptPathError, resolve_script
from app.runs.files import environment_record
from app.runs.files.job_files import replace_job_file
from app.runs.models import Run
from app.runs.state import lifecycle
from app.runs.state.status import RunStatus
from app.settings import get_settings
from app.timeutil import utcnow
from torchyard.contract import RunPaths
from worker import code as code_copy
from worker import env_build, job_base, job_sandbox, provenance, spool, user_cache
from worker.db_retry import with_db
from worker.env_build import PipFailed
from worker.environments import BuildFailed, run_requirements
from worker.gpus import host_name
from worker.heartbeat import Watched
from worker.launcher import Launch, LaunchSpec, NodeSpec, build_launch
from worker.slurm.batch import MASTER_PLACEHOLDER, NODE_RANK_PLACEHOLDER
from worker.supervise import finish, stopped_before_start
from worker.supervision import while_supervised
from worker.supervision_steps import CheckIn
from worker.watch import drain
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


def _script(
    claimed: Claimed, config: RunConfig, held: contextlib.ExitStack, watched: Watched
) -> tuple[Path | None, Path | None] | RunStatus:
    """The script and the unpacked snapshot (held while the job runs) of a script run."""
    settings = get_settings()
    if not isinstance(config, ScriptConfig):
        return None, None
    try:
        if not config.code:
            return resolve_script(settings.workspace_dir, config.script), None
        use = code_copy.use(settings.run_dir(claimed.run_id), config.code, config.script)
        shared, stopped = while_supervised(
            watched, lambda: held.enter_context(use), [CheckIn(watched)]
        )
        if stopped is not None:
            return stopped_before_start(watched, stopped)
        return shared.script, shared.unpacked
    except (ScriptPathError, SnapshotMissing, TarRefused) as exc:
        error = f"cannot run the script: {exc}"
        return finish(claimed.run_id, RunStatus.failed, None, error, attempt=claimed.attempt)


def prepare(claimed: Claimed, held: contextlib.ExitStack) -> Launch | RunStatus:
    """The attempt's launch, or the status the run ended with before it (a bad script, a
    failed build, a cancel meanwhile)."""
    settings = get_settings()
    run_id, attempt = claimed.run_id, claimed.attempt
    config = run_config(claimed.config)
    run_dir = settings.run_dir(run_id)
    watched = claimed.watched()
    RunPaths(run_dir).checkpoints.mkdir(parents=True, exist_ok=True)
    replace_job_file(RunPaths(run_dir).config, json.dumps(config.stored(), indent=2).encode())
    if attempt > 1:
        with_db(run_id, "start a new attempt", lambda s: spool.start_attempt(s, run_id, run_dir))
    found = _script(claimed, config, held, watched)
    if isinstance(found, RunStatus):
        return found
    script, unpacked = found
    code = isinstance(config, ScriptConfig) and bool(config.code)
    record = provenance.worker_record(
        worker_host=host_name(settings),
        gpu_indices=(),  # Slurm's, known to the job only
        script=script,
        code=config if code and isinstance(config, ScriptConfig) else None,
        script_name=config.script if isinstance(config, ScriptConfig) else None,
    )
    with session_scope() as session:
        environment_record.store(session, run_id=run_id, record=record)
    try:
        requirements = run_requirements(config, unpacked)
        built = env_build.prepare(watched, run_dir=run_dir, requirements=requirements)
    except (RequirementRefused, BuildFailed) as exc:
        drain(watched)
        error = (
            str(exc)
            if isinstance(exc, PipFailed)
            else f"could not build the run's environment: {exc}"
        )
        return finish(run_id, RunStatus.failed, None, error, attempt=attempt)
    held.callback(built.release)
    if built.stopped is not None:
        return stopped_before_start(watched, built.stopped)
    base, stopped = while_supervised(
        watched,
        lambda: job_base.ensure(settings.resolved_env_dir, settings.job_package_names),
        [CheckIn(watched)],
    )
    if stopped is not None:
        return stopped_before_start(watched, stopped)
    cache = user_cache.prepare(settings.resolved_data_dir, claimed.owner_id, None)
    nodes = config.resources.nodes
    port = RENDEZVOUS_PORT_BASE + run_id % 500
    node = NodeSpec(NODE_RANK_PLACEHOLDER, MASTER_PLACEHOLDER, port) if nodes > 1 else None
    launch = build_launch(
        LaunchSpec(
            run_id=run_id,
            run_dir=run_dir,
            config=config,
            python=str(built.env.python if built.env else base.python),
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
    return launch
