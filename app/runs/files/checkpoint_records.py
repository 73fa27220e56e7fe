"""A run's checkpoint rows (``checkpoints``): recorded, dropped by retention, and marked as
uploaded to the artifact store, here only. The worker reads the files; every row change is a
call into this module with the worker's session.

Recording: each checkpoint line of the spool becomes one row, once per name (``record``; a
replayed spool adds none).

Retention: the policy (``config.checkpoints``, app.experiments.config.model.CheckpointRetention)
keeps the newest ``keep_last`` (by step), the ``keep_best`` best by ``metric`` (the metric's
value at the checkpoint's step, or the last one before it), and ``final.pt`` always. A config
from before the policy existed gets the default (latest two, plus the best one when a metric
is named). ``apply_retention`` runs in the forwarder's transaction right after a batch's
checkpoints and points are stored. Not in the in-job runtime, because (1) the job is untrusted
and a script may never call the runtime's checkpoint code at all (Lightning, a bare
``torch.save``): the policy must hold whatever the job does; (2) ranking by a metric needs the
points, which are in the database the job never talks to; (3) a checkpoint some queued or
running run resumes from (another run, or this run's own next attempt after a requeue) must
stay, and only the database knows. The dropped rows are locked, re-checked against the active
runs' ``resume_from`` (app.runs.files.disk.active_readers) and deleted, so the run page stops
offering them; only after the commit are the files removed (the run folder's copy, and the
artifact store's). A resume request locks the checkpoint row it starts from (app.runs.service
.resume_run), so either it commits first and the re-check sees the new run (the file stays),
or it finds the row gone (404).

Artifact store: the worker uploads the files of ``awaiting_upload`` (worker.artifacts) and
records each finished upload with ``record_upload``; a checkpoint retention dropped while its
upload was in flight is removed from the store then.
"""

from __future__ import annotations

import logging
import math
import posixpath
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import CursorResult, delete, select, update
from sqlalchemy.orm import Session

from app.artifacts import remove_stored
from app.db import after_commit
from app.experiments.config.model import run_config
from app.metrics.models import Metric, MetricKey
from app.runs.files.disk import active_readers
from app.runs.files.job_files import FileRefused, remove_job_file
from app.runs.models import Checkpoint, Run
from app.settings import get_settings

log = logging.getLogger(__name__)

FINAL = "final.pt"


def record(session: Session, *, run_id: int, records: Iterable[Mapping[str, Any]]) -> None:
    """Checkpoint lines become rows, once per name (a replayed spool adds none)."""
    known = set(session.scalars(select(Checkpoint.name).where(Checkpoint.run_id == run_id)))
    for line in records:
        if line["name"] in known:
            continue
        known.add(line["name"])
        session.add(
            Checkpoint(
                run_id=run_id,
                name=line["name"],
                epoch=int(line["epoch"]),
                step=int(line["step"]),
                size_bytes=int(line["size_bytes"]),
                path=line["path"],
            )
        )


# --- retention -------------------------------------------------------------------------------


class Policy(NamedTuple):
    keep_last: int
    keep_best: int
    metric: str | None
    mode: str


class Candidate(NamedTuple):
    id: int
    name: str
    step: int
    path: str
    uri: str | None


def policy_of(config: Mapping[str, Any]) -> Policy:
    """The stored config's policy; a config from before the policy gets its defaults."""
    kept_by = run_config(config).checkpoints
    return Policy(kept_by.keep_last, kept_by.keep_best, kept_by.metric, kept_by.mode)


def kept(candidates: list[Candidate], policy: Policy, values: dict[int, float | None]) -> set[int]:
    """The ids of the checkpoints the policy keeps; ``values``: each one's metric value."""
    keep = {c.id for c in candidates if c.name == FINAL}  # always, and in no other slot
    others = [c for c in candidates if c.name != FINAL]
    newest = sorted(others, key=lambda c: (c.step, c.id), reverse=True)
    keep |= {c.id for c in newest[: policy.keep_last]}
    if policy.metric and policy.keep_best:
        ranked = [c for c in others if (v := values.get(c.id)) is not None and math.isfinite(v)]
        sign = -1.0 if policy.mode == "max" else 1.0
        ranked.sort(key=lambda c: (sign * float(values[c.id] or 0.0), -c.step))
        keep |= {c.id for c in ranked[: policy.keep_best]}
    return keep


def _metric_values(
    session: Session, *, run_id: int, metric: str, candidates: list[Candidate]
) -> dict[int, float | None]:
    key_id = session.scalar(
        select(MetricKey.id).where(MetricKey.run_id == run_id, MetricKey.key == metric)
    )
    if key_id is None:
        return {}
    return {
        c.id: session.scalar(
            select(Metric.value)
            .where(Metric.key_id == key_id, Metric.step <= c.step)
            .order_by(Metric.step.desc())
            .limit(1)
        )
        for c in candidates
    }


def apply_retention(session: Session, *, run_id: int, run_dir: Path) -> list[str]:
    """Drop the checkpoints the run's policy does not keep: rows now, files after the commit;
    returns the names dropped."""
    config = session.scalar(select(Run.config).where(Run.id == run_id))
    if config is None:
        return []
    policy = policy_of(config)
    candidates = [
        Candidate(*row)
        for row in session.execute(
            select(Checkpoint.id, Checkpoint.name, Checkpoint.step, Checkpoint.path, Checkpoint.uri)
            .where(Checkpoint.run_id == run_id)
            .with_for_update()
        )
    ]
    if len(candidates) <= policy.keep_last:
        return []
    values = (
        _metric_values(session, run_id=run_id, metric=policy.metric, candidates=candidates)
        if policy.metric and policy.keep_best
        else {}
    )
    keep = kept(candidates, policy, values)
    readers = active_readers(session, [run_id])
    drop = [
        c
        for c in candidates
        if c.id not in keep and f"{run_id}/{posixpath.normpath(c.path)}" not in readers
    ]
    if not drop:
        return []
    session.execute(delete(Checkpoint).where(Checkpoint.id.in_([c.id for c in drop])))
    after_commit(session, lambda: _remove_files(run_id, run_dir, drop))
    return [c.name for c in drop]


def _remove_files(run_id: int, run_dir: Path, dropped: list[Candidate]) -> None:
    store = get_settings().artifact_store
    for c in dropped:
        try:
            freed = remove_job_file(run_dir, c.path)
        except (OSError, FileRefused) as exc:
            log.warning("run %s: could not remove dropped checkpoint %s: %r", run_id, c.name, exc)
            continue
        if c.uri and store:
            remove_stored(store, c.uri)
        log.info("run %s: checkpoint %s dropped by retention (%d bytes)", run_id, c.name, freed)


# --- the artifact store's copies -------------------------------------------------------------


def awaiting_upload(session: Session, *, run_id: int) -> list[tuple[str, str]]:
    """(name, path in the run folder) of the run's checkpoints not in the store yet."""
    rows = session.execute(
        select(Checkpoint.name, Checkpoint.path).where(
            Checkpoint.run_id == run_id, Checkpoint.uri.is_(None)
        )
    )
    return [(name, path) for name, path in rows]


def record_upload(session: Session, *, run_id: int, name: str, uri: str, store: str) -> bool:
    """The checkpoint ``name`` is in the store at ``uri``. False when retention dropped its
    row while it was uploading: the copy is removed from ``store`` then."""
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(Checkpoint)
        .where(Checkpoint.run_id == run_id, Checkpoint.name == name)
        .values(uri=uri)
    )
    if result.rowcount:
        return True
    remove_stored(store, uri)
    return False


def stored_uri(session: Session, *, run_id: int, path: str) -> str | None:
    """The store's URI of the run's checkpoint at ``path`` (relative to the run folder, as
    ``runs.resume_from`` names it after the run id); None when it has none."""
    rows = session.execute(
        select(Checkpoint.path, Checkpoint.uri).where(Checkpoint.run_id == run_id)
    ).all()
    return next((u for p, u in rows if posixpath.normpath(p) == path), None)
