"""A run as the API shows it: the row's fields, its params, tags, metric summaries, disk use;
while it is queued, why it waits, and why its sweep stopped it early (if it did)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.metrics.summary import summaries_by_run
from app.runs.disk import disk_by_run
from app.runs.models import Run
from app.runs.notices import stopped_early_reason
from app.runs.params import params_by_run
from app.runs.phase import phase_of
from app.runs.schemas import RunOut, SummaryOut
from app.runs.service import tags_by_run, why_queued_many


def run_outs(session: Session, runs: list[Run]) -> list[RunOut]:
    """A query each for params, tags and summaries, whatever the number of runs."""
    ids = [r.id for r in runs]
    params = params_by_run(session, ids)
    tags = tags_by_run(session, ids)
    summaries = summaries_by_run(session, run_ids=ids)
    disks = disk_by_run(session, ids)
    reasons = why_queued_many(session, runs=runs)
    phases = {r.id: phase_of(r) for r in runs}
    return [
        RunOut.model_validate(r).model_copy(
            update={
                "phase": phases[r.id].phase,
                "env_build_seconds": phases[r.id].env_build_seconds,
                "duration_seconds": phases[r.id].duration_seconds,
                "params": params[r.id],
                "tags": tags[r.id],
                "disk_bytes": disks.get(r.id, 0),
                "queue_reason": reasons.get(r.id),
                "stopped_early": stopped_early_reason(r.notices),
                "summary": {
                    k: SummaryOut(last=s.last, min=s.min, max=s.max, step=s.step)
                    for k, s in summaries[r.id].items()
                },
            }
        )
        for r in runs
    ]
