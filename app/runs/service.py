"""Runs: create (validated, then queued after commit), cancel, list. Flush, never commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.artifacts import StoredFile, open_uri
from app.auth.models import User
from app.db import after_commit
from app.errors import conflict, not_found, validation_error
from app.experiments.config import ConfigInvalid, deep_merge, validate_config, with_seed
from app.experiments.models import Experiment
from app.runs.models import Checkpoint, Run, RunStatus
from app.settings import get_settings
from app.timeutil import utcnow
from torchyard.contract import LOG_FILE


def create_run(
    session: Session,
    *,
    experiment: Experiment,
    owner: User,
    overrides: dict[str, Any],
    priority: int = 0,
) -> Run:
    try:
        config = validate_config(
            deep_merge(experiment.config, overrides), loc_prefix=("body", "overrides")
        )
    except ConfigInvalid as exc:
        raise validation_error(exc.errors) from None
    return _queue_run(
        session,
        experiment_id=experiment.id,
        owner=owner,
        config=with_seed(config),
        priority=priority,
    )


def resume_run(session: Session, *, run: Run, checkpoint: str, owner: User) -> Run:
    """A new queued run of the same experiment and config (seed included) that starts from
    one of `run`'s checkpoints: its job restores model, optimizer, epoch and step."""
    ckpt = session.scalar(
        select(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.name == checkpoint)
    )
    if ckpt is None:
        raise not_found("checkpoint", f"{checkpoint!r} of run {run.id}")
    path = inside(run_dir(run.id), ckpt.path)
    # The worker that runs the new run fetches it from the store when its host lacks the file.
    if path is None or not (path.is_file() or ckpt.uri):
        raise conflict(
            f"checkpoint {checkpoint!r} of run {run.id} is no longer on disk"
            " and not in the artifact store"
        )
    return _queue_run(
        session,
        experiment_id=run.experiment_id,
        owner=owner,
        config=run.config,
        resume_from=path.relative_to(get_settings().runs_dir.resolve()).as_posix(),
        priority=run.priority,
    )


def _queue_run(
    session: Session,
    *,
    experiment_id: int,
    owner: User,
    config: dict[str, Any],
    resume_from: str | None = None,
    priority: int = 0,
) -> Run:
    """Store a validated, seeded config as a queued run; enqueue it once the caller commits."""
    run = Run(
        experiment_id=experiment_id,
        owner_id=owner.id,
        status=RunStatus.queued,
        config=config,
        seed=config["seed"],
        resume_from=resume_from,
        priority=priority,
    )
    session.add(run)
    session.flush()
    run_id = run.id
    after_commit(session, lambda: enqueue_run(run_id))
    return run


def enqueue_run(run_id: int) -> None:
    from worker.celery_app import RUN_TASK, celery_app

    celery_app.send_task(RUN_TASK, args=[run_id])


def request_cancel(session: Session, *, run: Run) -> Run:
    """Queued runs end here and now; running ones are stopped by their worker, which polls."""
    status = RunStatus(run.status)
    if status.finished:
        raise conflict(f"run {run.id} has already finished ({status.value})")
    if status is RunStatus.queued:
        run.status = RunStatus.cancelled
        run.finished_at = utcnow()
    run.cancel_requested = True
    session.flush()
    return run


def runs_of_experiment(session: Session, *, experiment_id: int) -> list[Run]:
    stmt = select(Run).where(Run.experiment_id == experiment_id).order_by(Run.id.desc())
    return list(session.scalars(stmt))


def visible_runs(session: Session, *, owner_id: int | None = None, limit: int = 200) -> list[Run]:
    """The newest runs on the box (everyone reads them all), or one owner's."""
    stmt = select(Run).order_by(Run.id.desc()).limit(limit)
    if owner_id is not None:
        stmt = stmt.where(Run.owner_id == owner_id)
    return list(session.scalars(stmt))


def checkpoints_of(session: Session, *, run_id: int) -> list[Checkpoint]:
    stmt = select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.id)
    return list(session.scalars(stmt))


def run_dir(run_id: int) -> Path:
    return get_settings().run_dir(run_id)


def inside(base: Path, relative: str) -> Path | None:
    """Resolve `relative` under `base`; None when it would leave it (.., absolute, symlink)."""
    base = base.resolve()
    target = (base / relative).resolve()
    return target if target.is_relative_to(base) else None


def checkpoint_file(session: Session, *, run: Run, name: str) -> Path | StoredFile:
    """The checkpoint's file on this machine's disk when it is there (embedded, or a shared
    data dir), else its copy in the artifact store."""
    ckpt = session.scalar(
        select(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.name == name)
    )
    if ckpt is None:
        raise not_found("checkpoint", f"{name!r} of run {run.id}")
    path = inside(run_dir(run.id), ckpt.path)
    if path is None:
        raise not_found("checkpoint file", f"{name!r} of run {run.id}")
    if path.is_file():
        return path
    stored = open_uri(ckpt.uri, store=get_settings().artifact_store) if ckpt.uri else None
    if stored is not None:
        return stored
    if ckpt.uri:
        raise not_found("checkpoint file", f"{name!r} of run {run.id} (gone from {ckpt.uri})")
    if not RunStatus(run.status).finished:
        raise conflict(
            f"checkpoint {name!r} of run {run.id} is on its worker's disk and not in the"
            " artifact store yet; try again once the upload is done"
        )
    raise not_found(
        "checkpoint file",
        f"{name!r} of run {run.id} (neither on this server's disk nor in the artifact store)",
    )


def log_path(run_id: int) -> Path:
    return run_dir(run_id) / LOG_FILE
