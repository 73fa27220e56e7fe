"""The `slurm` executor (worker.executor): each run attempt of this worker's pool is one Slurm
job, submitted from this host with sbatch and tracked until it ends (docs/clusters.md).

    the broker's task -> claim (queued -> running on this submit host, no GPU lease: Slurm
    schedules) -> prepare (worker.slurm.prepare: the same steps as a local run) -> the batch
    script into the shared folder, sbatch --parsable (worker.slurm.batch) -> the job id on
    the run (app.runs.state.lifecycle.hand_over) -> track (worker.slurm.track) -> final status

The task's thread tracks the run to its end, as a local run's does. A worker killed at any
moment is re-adopted by the next (`adopt`): every running run of this host whose attempt has
a Slurm job of its name is tracked again, its spool forwarded from the database's offset.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

from sqlalchemy import select

from app.db import session_scope
from app.experiments.config.model import run_config
from app.runs.models import Run
from app.runs.state import lifecycle
from app.runs.state.status import RunStatus
from app.settings import get_settings
from torchyard.paths import within
from worker.db_retry import with_db
from worker.executor import NotRun
from worker.gpus import host_name
from worker.heartbeat import Watched
from worker.job_policy import job_isolation
from worker.slurm import boundary, commands
from worker.slurm.batch import NAME_PREFIX, batch_script, parse_job_name, sbatch_options
from worker.slurm.prepare import Claimed, claim, prepare
from worker.slurm.track import STARTED, recorded_end, track
from worker.supervise import finish, hand_over_stopped

log = logging.getLogger(__name__)


class SlurmExecutor:
    name = "slurm"

    def execute(self, run_id: int) -> RunStatus | NotRun:
        claimed = claim(run_id)
        if claimed is None:
            log.info("run %s is not queued any more; nothing to do", run_id)
            return NotRun.GONE
        job_id: str | RunStatus | None = None
        try:
            with contextlib.ExitStack() as held:  # its snapshot and environment, while it runs
                job_id = submit(claimed, held)
                if isinstance(job_id, RunStatus):
                    return job_id
                return _tracked(claimed.watched(), job_id)
        except Exception as exc:  # a claimed run never stays running for a worker's error
            log.exception("run %s: the Slurm worker failed while running it", run_id)
            if isinstance(job_id, str):  # nor does its job go on without a worker's eye
                with contextlib.suppress(commands.SlurmError):
                    commands.cancel(job_id)
            error = f"worker error: {exc!r}"
            return finish(run_id, RunStatus.failed, None, error, attempt=claimed.attempt)

    def adopt(self) -> None:
        shared_folder_check()
        for thread in adopt_jobs():
            log.info("re-adopted: %s", thread.name)


def submit(claimed: Claimed, held: contextlib.ExitStack) -> str | RunStatus:
    """The attempt prepared and submitted; its Slurm job id (recorded on the run), or the
    status it ended with before."""
    settings = get_settings()
    shared_folder_check()
    isolation = job_isolation()
    if os.geteuid() == 0 and not isolation.enabled and not settings.slurm_jobs_as_root:
        error = (
            "the Slurm worker runs as root and cannot sandbox its jobs "
            f"({isolation.reason}), so this run's job would run as root on the cluster: "
            "install bubblewrap, or run the worker as the service's Slurm account "
            "(docs/clusters.md)"
        )
        return finish(claimed.run_id, RunStatus.failed, None, error, attempt=claimed.attempt)
    job = prepare(claimed, held)
    if isinstance(job, RunStatus):
        return job
    run_id, attempt, files = claimed.run_id, claimed.attempt, job.files
    resources = run_config(claimed.config).resources
    files.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    # The job token is in it: readable by the service's account only.
    fd = os.open(files.script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
    with os.fdopen(fd, "w") as out:
        out.write(batch_script(job.launch, files, nodes=resources.nodes, handoff=job.handoff))
    boundary.fresh_log(files.log)
    options = sbatch_options(settings, resources, run_id=run_id, attempt=attempt, files=files)
    try:  # sbatch with the Slurm client's variables only: none of the worker's settings
        job_id = commands.submit(files.script, options, env={})
    except commands.SlurmError as exc:  # its own words: "Requested node configuration is ..."
        boundary.forget(files)
        error = f"Slurm refused the job: {exc}"
        return finish(run_id, RunStatus.failed, None, error, attempt=attempt)
    log.info("run %s attempt %s: Slurm job %s", run_id, attempt, job_id)
    recorded = with_db(
        run_id,
        "record the Slurm job",
        lambda s: lifecycle.hand_over(
            s, run_id=run_id, attempt=attempt, external_id=job_id, reason="Slurm: submitted"
        ),
    )
    if not recorded:  # cancelled or handed over meanwhile: the check-in of track() says which
        log.info("run %s: no longer this attempt's as its job was submitted", run_id)
    return job_id


def shared_folder_check() -> None:
    """The run folders, snapshots and environments must be on the shared folder."""
    settings = get_settings()
    shared = settings.slurm_shared_dir
    data = Path(settings.data_dir).expanduser().resolve()
    if shared is None or not within(data, shared.expanduser().resolve()):
        raise RuntimeError(
            f"a Slurm pool's TORCHYARD_DATA_DIR ({data}) must be inside "
            f"TORCHYARD_SLURM_SHARED_DIR ({shared}): its compute nodes read and write it"
        )


def adopt_jobs() -> list[threading.Thread]:
    """Every run this host's worker left running: tracked again in a thread of its own where
    its attempt's Slurm job exists (or ended meanwhile and Slurm still knows how: its end is
    read, its spool drained), handed over (requeued or failed) where none does; a live job of
    this pool whose run no longer runs as its attempt is cancelled."""
    host = host_name(get_settings())
    jobs = {parse_job_name(j.name): j for j in commands.find(NAME_PREFIX)}
    with session_scope() as session:
        rows = session.execute(
            select(Run.id, Run.attempt, Run.sweep_id, Run.external_id).where(
                Run.status == RunStatus.running, Run.worker_host == host, Run.origin.is_(None)
            )
        ).all()
    threads = []
    for run_id, attempt, sweep_id, external_id in rows:
        job = jobs.pop((run_id, attempt), None)
        if job is None and external_id:  # ended while no worker watched: squeue or sacct says how
            job = commands.query([external_id]).get(external_id)
            if job is None:  # or, forgotten by Slurm, its batch step's record
                record = boundary.job_files(run_id, attempt).exit_record
                job = recorded_end(record, external_id)
        if job is None:
            reason = "its Slurm worker restarted and found no Slurm job of the attempt"
            hand_over_stopped(run_id, attempt=attempt, reason=reason)
            continue
        claimed = Claimed(run_id, attempt, {}, None, 0, sweep_id is not None)
        threads.append(_track_in_thread(claimed.watched(), job.job_id, job.state in STARTED))
    pool = f"pool {get_settings().worker_pool}"
    for key, job in jobs.items():
        if key is not None and job.comment.endswith(pool) and job.state in STARTED | {"PENDING"}:
            log.warning(
                "Slurm job %s of run %s is no run's attempt now: cancelled", job.job_id, key[0]
            )
            commands.cancel(job.job_id)
    return threads


def _tracked(watched: Watched, job_id: str, *, started: bool = False) -> RunStatus:
    """track(), then the attempt's descriptor files gone once its job has ended (they hold the
    job's environment; a job left to Slurm keeps them for its nodes' tasks)."""
    status = track(watched, job_id, started=started)
    if status is not RunStatus.running:
        boundary.forget(boundary.job_files(watched.run_id, watched.attempt))
    return status


def _track_in_thread(watched: Watched, job_id: str, started: bool) -> threading.Thread:
    def run() -> None:
        try:
            _tracked(watched, job_id, started=started)
        except Exception as exc:
            log.exception("run %s: tracking its Slurm job %s failed", watched.run_id, job_id)
            error = f"worker error: {exc!r}"
            finish(watched.run_id, RunStatus.failed, None, error, attempt=watched.attempt)

    thread = threading.Thread(target=run, name=f"run-{watched.run_id}-slurm-{job_id}", daemon=True)
    thread.start()
    return thread
