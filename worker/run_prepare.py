"""A run attempt's preparation up to its launch, the same for every executor: a local run's
node (worker.runner) and a Slurm pool's job (worker.slurm.prepare) both call `prepare`, so a
change to how a run is prepared is made here once.

    the run's config file (replaced, never written through), a new attempt's spool reset, the
    script (the workspace's, or a copy of its code snapshot held while the job runs), the
    environment record, the run's environment (built or found, supervised: a cancel ends the
    wait), the job base (never the worker's own packages)

Each step that may take long (an unpack, a build) keeps the run heartbeating and returns the
status it ended with when a cancel or a worker shutdown came first.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.code.store import SnapshotMissing
from app.code.tarcheck import TarRefused
from app.db import session_scope
from app.experiments.config.model import RunConfig, ScriptConfig, config_code
from app.experiments.requirements import RequirementRefused
from app.experiments.workspace import ScriptPathError, resolve_script
from app.runs.files import environment_record
from app.runs.files.job_files import replace_job_file
from app.runs.state.status import RunStatus
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker import code as code_copy
from worker import env_build, job_base, provenance, spool
from worker.db_retry import with_db
from worker.env_build import PipFailed
from worker.environments import BuildFailed, run_requirements
from worker.heartbeat import Watched
from worker.job_base import JobBase
from worker.supervise import finish, stopped_before_start
from worker.supervision import while_supervised
from worker.supervision_steps import CheckIn
from worker.watch import drain


@dataclass(frozen=True)
class Prepared:
    """What the launch needs: the script (None for a recipe), the snapshot's shared copy (None
    without one), the run's own environment (None: it asks for no packages), the job base."""

    script: Path | None
    unpacked: Path | None
    env: env_build.Prepared
    base: JobBase

    @property
    def python(self) -> str:
        return str(self.env.env.python if self.env.env else self.base.python)

    @property
    def python_dirs(self) -> tuple[Path, ...]:
        """The folders the job imports from (bound read-only in its sandbox)."""
        return (self.base.path, *([self.env.env.path] if self.env.env else []))


@dataclass(frozen=True)
class Where:
    """Which part of the attempt this is: `chief` (node 0, or the only one) writes the run's
    own records; the host and GPUs go into its environment record."""

    host: str
    gpu_indices: tuple[int, ...]
    chief: bool = True


def prepare(
    watched: Watched,
    config: RunConfig,
    held: contextlib.ExitStack,
    where: Where,
    *,
    refusal: Callable[[], RunStatus | None] = lambda: None,
    built: Callable[[], None] = lambda: None,
) -> Prepared | RunStatus:
    """The attempt prepared, or the status the run ended with before its launch (a bad
    script, a failed build, a cancel meanwhile). `refusal` is asked before the environment's
    build (a long one must not come before a refusal); `built` is called once it is there."""
    settings = get_settings()
    run_id, attempt = watched.run_id, watched.attempt
    run_dir = settings.run_dir(run_id)
    RunPaths(run_dir).checkpoints.mkdir(parents=True, exist_ok=True)
    # A requeued run's folder holds what its last job left: replaced, never written through.
    replace_job_file(RunPaths(run_dir).config, json.dumps(config.stored(), indent=2).encode())
    if attempt > 1 and where.chief:
        with_db(run_id, "start a new attempt", lambda s: spool.start_attempt(s, run_id, run_dir))
    found = _script(watched, config, held)
    if isinstance(found, RunStatus):
        return found
    script, unpacked = found
    code = config if isinstance(config, ScriptConfig) and config.code else None
    if where.chief:  # the run's environment record is node 0's
        record = provenance.worker_record(
            worker_host=where.host,
            gpu_indices=where.gpu_indices,
            script=script,
            code=code,
            script_name=config.script if isinstance(config, ScriptConfig) else None,
        )
        with session_scope() as session:
            environment_record.store(session, run_id=run_id, record=record)
    refused = refusal()
    if refused is not None:
        return refused
    try:
        requirements = run_requirements(config, unpacked)  # a snapshot's requirements.txt
        env = env_build.prepare(watched, run_dir=run_dir, requirements=requirements)
    except (RequirementRefused, BuildFailed) as exc:
        drain(watched)  # pip's lines
        # pip's own message starts with its ERROR lines and says what failed after them.
        error = str(exc)
        if not isinstance(exc, PipFailed):
            error = f"could not build the run's environment: {error}"
        return finish(run_id, RunStatus.failed, None, error, attempt=attempt)
    held.callback(env.release)
    built()
    if env.stopped is not None:
        return stopped_before_start(watched, env.stopped)
    # Every job runs on the job base (never the worker's own packages), or on its own
    # environment layered on it.
    base, stopped = while_supervised(
        watched,
        lambda: job_base.ensure(settings.resolved_env_dir, settings.job_package_names),
        [CheckIn(watched)],
    )
    if stopped is not None:
        return stopped_before_start(watched, stopped)
    return Prepared(script, unpacked, env, base)


def _script(
    watched: Watched, config: RunConfig, held: contextlib.ExitStack
) -> tuple[Path | None, Path | None] | RunStatus:
    """The script and the unpacked snapshot (held while the job runs) of a script run."""
    settings = get_settings()
    digest = config_code(config)
    if not isinstance(config, ScriptConfig) and digest is None:
        return None, None
    script = config.script if isinstance(config, ScriptConfig) else None  # a session: none
    try:
        if digest is None:
            assert script is not None
            return resolve_script(settings.workspace_dir, script), None
        # Unpacking a large snapshot, or waiting for another run's unpack of it, may outlast
        # run_lost_seconds: the run keeps heartbeating meanwhile (issue 37).
        use = code_copy.use(settings.run_dir(watched.run_id), digest, script)
        shared, stopped = while_supervised(
            watched, lambda: held.enter_context(use), [CheckIn(watched)]
        )
        if stopped is not None:
            return stopped_before_start(watched, stopped)
        return (shared.script if script is not None else None), shared.unpacked
    except (ScriptPathError, SnapshotMissing, TarRefused) as exc:
        error = f"cannot run the script: {exc}"
        return finish(watched.run_id, RunStatus.failed, None, error, attempt=watched.attempt)
