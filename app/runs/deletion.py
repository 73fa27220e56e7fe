"""Deleting runs and experiments: rows, points, logs, files and stored checkpoints, disk freed.

Only a run that has ended may go (409 while queued or running: cancel it first), and only when
no queued or running run resumes from one of its checkpoints (that run may still read the file;
the 409 names it). Finished runs that resumed from it do not hold it: they read it once, when
they started, and a finished run never runs again.

A large run has millions of points. Deleting them in one statement would hold SQLite's write
lock (and every worker's ingest behind it) for seconds, so they go first, POINTS_BATCH at a
time, each batch its own short transaction; the same for log chunks and images. The last
transaction re-checks everything under the checkpoint rows' locks (a resume that picked one of
them meanwhile either finished first, and this answers 409, or finds the row gone), deletes
what a late forwarder added meanwhile, and deletes the run row only while the run has ended
(a conditional DELETE: a run is never removed from under a worker). A finished status is final,
so nothing requeues the run between the batches and that last transaction. Files go after the
commit: the run's folder (app.runs.files.disk, no link followed) and its prefix in the artifact
store (checkpoints, the stored work files), and then the code snapshots no run or experiment refers
to any more (app.code.service.remove_unused).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import CursorResult, delete, select
from sqlalchemy.orm import Session

from app.artifacts import store_fs
from app.code import service as code_snapshots
from app.db import session_scope
from app.errors import Conflict
from app.experiments import service as experiments
from app.metrics.ingest import drop_first_points, drop_points
from app.metrics.models import MetricKey
from app.runs.files import images, log_store
from app.runs.files.disk import ACTIVE, active_readers, remove_folder, remove_from_store
from app.runs.models import Checkpoint, Run
from app.settings import get_settings

POINTS_BATCH = 20_000
ROWS_BATCH = 64  # log chunks and images: up to megabytes each


def refuse_if_busy(session: Session, runs: Sequence[Run]) -> None:
    """409 when any of ``runs`` is queued or running, or another active run resumes from one
    of their checkpoints; the message names the runs and what to do."""
    active = [r for r in runs if r.status in ACTIVE]
    if active:
        named = ", ".join(f"run {r.id} ({r.status.value})" for r in active)
        raise Conflict(f"{named} has not ended: cancel it first, then delete")
    ids = {r.id for r in runs}
    readers = {p: rid for p, rid in active_readers(session, ids).items() if rid not in ids}
    if readers:
        named = ", ".join(f"run {rid} resumes from {path}" for path, rid in readers.items())
        raise Conflict(f"{named}: wait until it has ended (or cancel it), then delete")


def delete_runs(run_ids: Sequence[int]) -> int:
    """Delete the runs (checked with ``refuse_if_busy``), then the code snapshots nothing uses
    any more; returns the bytes of files freed."""
    freed = sum(_delete_run(run_id) for run_id in run_ids)
    return freed + code_snapshots.remove_unused()


def delete_experiment(experiment_id: int, run_ids: Sequence[int]) -> int:
    freed = sum(_delete_run(run_id) for run_id in run_ids)
    with session_scope() as session:
        if not experiments.delete_if_empty(session, experiment_id=experiment_id):
            raise Conflict(
                f"a run of experiment {experiment_id} was started while it was being deleted:"
                " its other runs are gone; cancel the new run, then delete again"
            )
    return freed + code_snapshots.remove_unused()


def _delete_run(run_id: int) -> int:
    key_ids = _key_ids(run_id)
    for key_id in key_ids:
        while _delete_points_batch(key_id):
            pass
    while _in_own_transaction(log_store.drop_first_log_chunks, run_id):
        pass
    while _in_own_transaction(images.drop_first_images, run_id):
        pass
    with session_scope() as session:
        session.scalars(select(Checkpoint.id).where(Checkpoint.run_id == run_id).with_for_update())
        run = session.get(Run, run_id, populate_existing=True)
        if run is None:
            return 0  # deleted by another request meanwhile
        refuse_if_busy(session, [run])
        # Points a late forwarder added (a worker the reaper gave up on) since the batches.
        late = list(session.scalars(select(MetricKey.id).where(MetricKey.run_id == run_id)))
        if late:
            drop_points(session, key_ids=late)
        done: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            delete(Run).where(Run.id == run_id, Run.status.not_in(ACTIVE))
        )
        if not done.rowcount:
            raise Conflict(f"run {run_id} started again meanwhile: cancel it first, then delete")
    return _remove_files(run_id)


def _remove_files(run_id: int) -> int:
    settings = get_settings()
    freed = remove_folder(settings.run_dir(run_id))
    if settings.artifact_store:
        _fs, root = store_fs(settings.artifact_store)
        # checkpoints/ and the stored work files (work/, work.json) are all under it.
        freed += remove_from_store(settings.artifact_store, f"{root}/runs/{run_id}")
    return freed


def _key_ids(run_id: int) -> list[int]:
    with session_scope() as session:
        return list(session.scalars(select(MetricKey.id).where(MetricKey.run_id == run_id)))


def _delete_points_batch(key_id: int) -> int:
    """Up to POINTS_BATCH of the key's first points, in one short transaction (a range on the
    (key_id, step) primary key); returns how many went."""
    with session_scope() as session:
        return drop_first_points(session, key_id=key_id, count=POINTS_BATCH)


def _in_own_transaction(drop: Callable[..., int], run_id: int) -> int:
    with session_scope() as session:
        return drop(session, run_id=run_id, count=ROWS_BATCH)
