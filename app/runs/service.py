"""Runs: create (validated, then queued through app.runs.state.lifecycle), cancel, edit name, tags
and notes (the list is app.runs.query.listing). Flush, never commit."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from app.artifacts import StoredFile, open_uri
from app.auth.models import User
from app.errors import Conflict, Invalid, NotFound
from app.experiments.config.model import deep_merge, run_config, with_seed
from app.experiments.config.validate import validate_config
from app.experiments.models import Experiment
from app.gpus.estimate import Estimate
from app.gpus.service import never_startable, queue_reasons
from app.gpus.start_estimates import estimated_starts
from app.runs.files.job_files import FileRefused, clean_relative, is_regular, open_regular
from app.runs.models import Checkpoint, Run, RunStatus, RunTag
from app.runs.schemas import RunPatch
from app.runs.state import lifecycle
from app.runs.state.answers import CancelOutcome
from app.settings import get_settings
from app.timeutil import utcnow
from app.users import ceilings, quota
from torchyard.contract import RunPaths


def create_run(
    session: Session,
    *,
    experiment: Experiment,
    owner: User,
    overrides: dict[str, Any],
    priority: int = 0,
    loc: tuple[str, ...] = ("body",),
    base: dict[str, Any] | None = None,
) -> Run:
    """A queued run of `experiment`, flushed in the caller's transaction. ``loc``: where the
    run's fields sit in the request body (a submission's `run`, or the body itself). ``base``:
    the config the overrides apply to instead of the experiment's (a session, app/sessions)."""
    ceiling = get_settings().max_user_priority
    if priority > ceiling and not owner.is_admin:
        raise Invalid.at(
            [*loc, "priority"],
            f"priority may be at most {ceiling} (TORCHYARD_MAX_USER_PRIORITY) for a non-admin:"
            " ask an admin to raise it",
            priority,
            kind="less_than_equal",
        )
    config = validate_config(
        deep_merge(experiment.config if base is None else base, overrides),
        loc_prefix=(*loc, "overrides"),
        session=session,
    )
    gpus_loc = (*loc, "overrides", "resources", "gpus")
    refuse_if_never_startable(session, config=config, loc=gpus_loc)
    quota.refuse_run(session, owner, loc)
    asked = overrides.get("resources")
    config = ceilings.hold(session, owner, config, (*loc, "overrides"), asked)
    return lifecycle.queue(
        session,
        experiment_id=experiment.id,
        owner_id=owner.id,
        config=with_seed(config),
        priority=priority,
    )


def resume_run(
    session: Session,
    *,
    run: Run,
    checkpoint: str,
    owner: User,
    overrides: dict[str, Any] | None = None,
) -> Run:
    """A new queued run of the same experiment that starts from one of `run`'s checkpoints:
    its job restores model, optimizer, epoch and step. Its config is the parent's (seed
    included) with `overrides` deep-merged and validated as a whole; new values (another lr)
    win over the optimizer state the checkpoint holds (torchyard.runtime.checkpoint)."""
    # Locked: retention (app.runs.files.checkpoint_records) deletes a dropped checkpoint's row
    # before its file, and re-checks the runs that resume from it under the same lock.
    ckpt = session.scalar(
        select(Checkpoint)
        .where(Checkpoint.run_id == run.id, Checkpoint.name == checkpoint)
        .with_for_update()
    )
    if ckpt is None:
        raise NotFound.of("checkpoint", f"{checkpoint!r} of run {run.id}")
    config = run.config
    if overrides:
        config = validate_config(
            deep_merge(run.config, overrides), loc_prefix=("body", "overrides"), session=session
        )
    refuse_if_nothing_left(config=config, checkpoint=ckpt)
    try:
        relative: str | None = clean_relative(ckpt.path)
    except FileRefused:
        relative = None
    # The worker that runs the new run fetches it from the store when its host lacks the file.
    if relative is None or not (is_regular(run_dir(run.id), relative) or ckpt.uri):
        raise Conflict(
            f"checkpoint {checkpoint!r} of run {run.id} is no longer on disk"
            " and not in the artifact store"
        )
    # Hosts may have changed since the parent ran.
    loc = ("body", "overrides", "resources", "gpus") if overrides else ("body", "checkpoint")
    refuse_if_never_startable(session, config=config, loc=loc)
    quota.refuse_run(session, owner, ("body",))
    asked = (overrides or {}).get("resources")
    config = ceilings.hold(session, owner, config, ("body", "overrides"), asked)
    return lifecycle.queue(
        session,
        experiment_id=run.experiment_id,
        owner_id=owner.id,
        config=with_seed(config),
        resume_from=f"{run.id}/{relative}",
        priority=run.priority,
    )


@dataclass(frozen=True)
class ResumedFrom:
    """Where a resumed run started: the parent run, the checkpoint's name (its file's name when
    the row is gone) and step (None then: the parent's curve cannot be cut there)."""

    run_id: int
    checkpoint: str
    step: int | None


def resumed_from(session: Session, *, run: Run) -> ResumedFrom | None:
    """The parent of a run started with POST /runs/{id}/resume (`resume_from` is
    "<parent id>/<checkpoint path>"); None for a fresh run and for a restart of the run itself
    from its own checkpoint (app.runs.state.recovery)."""
    head, _, rest = (run.resume_from or "").partition("/")
    if not head.isdigit() or not rest or int(head) == run.id:
        return None
    parent_id = int(head)
    ckpt = session.scalar(
        select(Checkpoint).where(Checkpoint.run_id == parent_id, Checkpoint.path == rest)
    )
    if ckpt is None:
        return ResumedFrom(run_id=parent_id, checkpoint=rest.rsplit("/", 1)[-1], step=None)
    return ResumedFrom(run_id=parent_id, checkpoint=ckpt.name, step=ckpt.step)


def refuse_if_nothing_left(*, config: dict[str, Any], checkpoint: Checkpoint) -> None:
    """A 422 when the checkpoint already reached the config's `params.epochs` (a final.pt):
    the job would train nothing and end "succeeded" with an empty curve. Raising the epochs
    in the overrides is the way on; configs without an integer `params.epochs` (scripts
    counting otherwise) pass."""
    params = config.get("params")
    epochs = params.get("epochs") if isinstance(params, dict) else None
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs > checkpoint.epoch:
        return
    raise Invalid.at(
        ["body", "overrides", "params", "epochs"],
        f"checkpoint {checkpoint.name!r} already reached epoch {checkpoint.epoch} of {epochs}:"
        f" raise params.epochs above {checkpoint.epoch} in the overrides to train on",
        epochs,
    )


def refuse_if_never_startable(
    session: Session, *, config: dict[str, Any], loc: tuple[str, ...]
) -> None:
    """A 422 for a run no live worker host could ever start (more GPUs than any has): it would
    wait in the queue for ever. Every new run (launched or resumed) passes here; a multi-node
    one needs `nodes` live hosts of that many GPUs (app.gpus.scheduler.never_fits), and the
    server's consent (settings.multi_node_runs, on unless the deployment turned them off)."""
    resources = run_config(config).resources
    if resources.nodes > 1 and not get_settings().multi_node_runs:
        raise Invalid.at(
            (*loc[:-1], "nodes") if loc[-1] == "gpus" else loc,
            f"multi-node runs (resources.nodes: {resources.nodes}) are off on this server"
            " (TORCHYARD_MULTI_NODE_RUNS=false, docs/multi-node.md)",
            resources.nodes,
        )
    reason = never_startable(
        session,
        gpus=resources.gpus,
        now=utcnow(),
        lease_ttl_seconds=get_settings().lease_ttl_seconds,
        nodes=resources.nodes,
        pool=resources.pool,
    )
    if reason is not None:
        raise Invalid.at(
            loc, f"no live worker host could ever start this run: {reason}", resources.gpus
        )


def why_queued(session: Session, *, run: Run) -> str | None:
    """Why a queued run waits: the scheduler's own reason, the words of the GPU page's queue
    (app.gpus.service.queue_reason). None unless it is queued."""
    return why_queued_many(session, runs=[run]).get(run.id)


def why_queued_many(session: Session, *, runs: Sequence[Run]) -> dict[int, str]:
    """`why_queued` of each queued run of `runs`, from one scheduler decision (a list page of
    runs asks once, not once per run); runs not waiting are left out, and nothing is asked
    when none is queued. "No worker is running" is one of these reasons (NO_LIVE_HOST)."""
    # A run handed to Slurm (app.runs.state.lifecycle.hand_over) runs from its worker's claim;
    # while Slurm holds its job pending, Slurm's reason is its queue reason.
    reasons = {r.id: r.external_reason for r in runs if r.external_reason and not r.status.finished}
    queued = [r.id for r in runs if r.status == RunStatus.queued]
    if not queued:
        return reasons
    settings = get_settings()
    return reasons | queue_reasons(
        session,
        run_ids=queued,
        now=utcnow(),
        lease_ttl_seconds=settings.lease_ttl_seconds,
        starvation_seconds=settings.starvation_seconds,
    )


def estimates_many(session: Session, *, runs: Sequence[Run]) -> dict[int, Estimate]:
    """Each queued run's estimated start (app.gpus.start_estimates), from one replay of the
    queue; nothing is read when none is queued."""
    queued = [r.id for r in runs if r.status == RunStatus.queued]
    if not queued:
        return {}
    settings = get_settings()
    return estimated_starts(
        session,
        run_ids=queued,
        now=utcnow(),
        lease_ttl_seconds=settings.lease_ttl_seconds,
        starvation_seconds=settings.starvation_seconds,
    )


def request_cancel(session: Session, *, run: Run) -> Run:
    """Queued runs end here and now; running ones are stopped by their worker, which polls."""
    if lifecycle.cancel(session, run_id=run.id) is CancelOutcome.FINISHED:
        session.refresh(run)
        raise Conflict(f"run {run.id} has already finished ({run.status.value})")
    session.refresh(run)
    return run


def runs_of_experiment(session: Session, *, experiment_id: int) -> list[Run]:
    stmt = select(Run).where(Run.experiment_id == experiment_id).order_by(Run.id.desc())
    return list(session.scalars(stmt))


def edit_run(session: Session, *, run: Run, patch: RunPatch) -> Run:
    """Set what the patch names (app.runs.schemas.RunPatch): an empty name or notes clears it,
    tags replace the run's set."""
    given = patch.model_fields_set
    if "name" in given:
        run.name = (patch.name or "").strip() or None
    if "notes" in given:
        run.notes = patch.notes if patch.notes and patch.notes.strip() else None
    if "tags" in given:
        session.execute(delete(RunTag).where(RunTag.run_id == run.id))
        tags = sorted(set(patch.tags or []))
        if tags:
            session.execute(insert(RunTag), [{"run_id": run.id, "tag": t} for t in tags])
    session.flush()
    return run


def set_name(session: Session, *, run: Run, name: str | None) -> None:
    """The name exactly as given (MLflow's run name and tag, cut by its caller): edit_run's
    rules (a stripped name, an empty one cleared) are the API's PATCH, not MLflow's."""
    run.name = name


def set_notes(session: Session, *, run: Run, notes: str | None) -> None:
    """The notes exactly as given (MLflow's note tag); see set_name."""
    run.notes = notes


def tags_by_run(session: Session, run_ids: Sequence[int]) -> dict[int, list[str]]:
    """Each run's tags, sorted."""
    found: dict[int, list[str]] = {i: [] for i in run_ids}
    if run_ids:
        stmt = select(RunTag.run_id, RunTag.tag).where(RunTag.run_id.in_(list(run_ids)))
        for run_id, tag in session.execute(stmt.order_by(RunTag.run_id, RunTag.tag)):
            found[run_id].append(tag)
    return found


def checkpoints_of(session: Session, *, run_id: int) -> list[Checkpoint]:
    stmt = select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.id)
    return list(session.scalars(stmt))


def run_dir(run_id: int) -> Path:
    return get_settings().run_dir(run_id)


def checkpoint_file(session: Session, *, run: Run, name: str) -> StoredFile:
    """The checkpoint's bytes: from this machine's disk when it is there (embedded, or a
    shared data dir), opened once without following links and streamed from that descriptor
    (a name swapped for a link after a check cannot redirect it), else from its copy in the
    artifact store."""
    ckpt = session.scalar(
        select(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.name == name)
    )
    if ckpt is None:
        raise NotFound.of("checkpoint", f"{name!r} of run {run.id}")
    try:
        local = open_regular(run_dir(run.id), ckpt.path)
    except FileRefused:
        raise NotFound.of("checkpoint file", f"{name!r} of run {run.id}") from None
    except FileNotFoundError:
        local = None
    if local is not None:
        return StoredFile(size=os.fstat(local.fileno()).st_size, chunks=_chunks(local))
    stored = open_uri(ckpt.uri, store=get_settings().artifact_store) if ckpt.uri else None
    if stored is not None:
        return stored
    if ckpt.uri:
        raise NotFound.of("checkpoint file", f"{name!r} of run {run.id} (gone from {ckpt.uri})")
    if not RunStatus(run.status).finished:
        raise Conflict(
            f"checkpoint {name!r} of run {run.id} is on its worker's disk and not in the"
            " artifact store yet; try again once the upload is done"
        )
    raise NotFound.of(
        "checkpoint file",
        f"{name!r} of run {run.id} (neither on this server's disk nor in the artifact store)",
    )


def _chunks(f: BinaryIO) -> Iterator[bytes]:
    with f:
        while chunk := f.read(1 << 20):
            yield chunk


def log_path(run_id: int) -> Path:
    return RunPaths(run_dir(run_id)).log


def queued_config(session: Session, *, run_id: int) -> dict[str, Any] | None:
    """The config of a run while it is queued (None otherwise): what a worker looks at before
    it starts the run, e.g. whether its environment must be built first (worker.slots)."""
    row = session.execute(
        select(Run.config).where(Run.id == run_id, Run.status == RunStatus.queued)
    ).one_or_none()
    return dict(row.config or {}) if row is not None else None
