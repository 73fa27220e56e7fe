"""A run as the API shows it: the row's fields, its params, tags, metric summaries, disk use;
while it is queued, why it waits, and why its sweep stopped it early (if it did)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy.orm import Session

from app.metrics.summary import runs_with_more_keys, summaries_by_run
from app.runs.files.disk import disk_by_run
from app.runs.models import Run
from app.runs.query.params import params_by_run
from app.runs.schemas import RunOut, SummaryOut
from app.runs.service import estimates_many, tags_by_run, why_queued_many
from app.runs.state.notices import stopped_early_reason
from app.runs.state.phase import phase_of

# A list of runs carries each run's first LIST_SUMMARIES metric summaries (train/ and val/
# first) plus the keys the caller names: one run logging 10,000 keys made GET /api/runs 670 KB
# (issue 31). A caller may ask for fewer first ones (`summary_first=`, 0: only those it names):
# the experiment page asks for its shown columns' alone, so a page of 100 runs logging 1,000
# keys each is ~80 KB, not 624 KB (issue 43). A single run (GET /api/runs/{id}) has them all.
LIST_SUMMARIES = 50


def run_outs(
    session: Session,
    runs: list[Run],
    *,
    listed: bool = False,
    summary_keys: Sequence[str] = (),
    only_keys: Collection[str] | None = None,
    first: int = LIST_SUMMARIES,
) -> list[RunOut]:
    """A query each for params, tags and summaries, whatever the number of runs. ``listed``:
    the summaries of each run's ``first`` keys (at most LIST_SUMMARIES), plus those of
    ``summary_keys`` (with ``first`` 0, those alone). ``only_keys``: the
    summaries of those keys alone (the experiment page holds its columns' only: issue 31);
    ``summary_cut`` still says whether a list would have cut the run's."""
    ids = [r.id for r in runs]
    params = params_by_run(session, ids)
    tags = tags_by_run(session, ids)
    cut_at = min(first, LIST_SUMMARIES) if listed else None
    if only_keys is None and cut_at == 0:
        only_keys = summary_keys  # by name alone: no window over each run's keys
    summaries = (
        summaries_by_run(session, run_ids=ids, keys=only_keys)
        if only_keys is not None
        else summaries_by_run(session, run_ids=ids, first=cut_at, also=summary_keys)
    )
    cut = runs_with_more_keys(session, run_ids=ids, than=cut_at) if cut_at is not None else set()
    disks = disk_by_run(session, ids)
    reasons = why_queued_many(session, runs=runs)
    estimates = estimates_many(session, runs=runs)
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
                "estimated_start": estimates[r.id].start if r.id in estimates else None,
                "estimate_basis": estimates[r.id].basis if r.id in estimates else None,
                "stopped_early": stopped_early_reason(r.notices),
                "summary_cut": r.id in cut,
                "summary": {
                    k: SummaryOut(last=s.last, min=s.min, max=s.max, step=s.step)
                    for k, s in summaries[r.id].items()
                },
            }
        )
        for r in runs
    ]
