"""A sweep as the API shows it: progress (trials by their run's status), each trial's values,
metric and early stop, the best run so far, and the trials' runs as the runs list shows them.
A few queries per sweep whatever its size (values from the metric summaries, no points)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.metrics.models import MetricKey
from app.runs.files.out import run_outs
from app.runs.models import Run, RunStatus
from app.runs.state.notices import stopped_early_reason
from app.sweeps.models import Sweep, SweepTrial
from app.sweeps.schemas import BestOut, MetricSpec, SweepBrief, SweepOut, TrialOut
from app.sweeps.service import planned
from app.sweeps.trials import trials_of


def _last_values(
    session: Session, *, metric: str, run_ids: list[int]
) -> dict[int, tuple[float | None, int | None]]:
    if not run_ids:
        return {}
    stmt = select(MetricKey.run_id, MetricKey.last_value, MetricKey.last_step).where(
        MetricKey.key == metric, MetricKey.run_id.in_(run_ids)
    )
    return {run_id: (value, step) for run_id, value, step in session.execute(stmt)}


def _trial_outs(
    session: Session, sweep: Sweep, trials: list[tuple[SweepTrial, Run | None]]
) -> list[TrialOut]:
    values = _last_values(
        session, metric=sweep.metric, run_ids=[r.id for _, r in trials if r is not None]
    )
    outs = []
    for trial, run in trials:
        value, steps = values.get(run.id, (None, None)) if run is not None else (None, None)
        outs.append(
            TrialOut(
                number=trial.number,
                run_id=run.id if run is not None else None,
                status=RunStatus(run.status).value if run is not None else "deleted",
                params=trial.params,
                value=value,
                steps=steps,
                stopped_early=stopped_early_reason(run.notices) if run is not None else None,
            )
        )
    return outs


def best_of(sweep: Sweep, trials: list[TrialOut]) -> BestOut | None:
    """The succeeded trial with the best last value of the metric (the first on a tie)."""
    done = [
        t
        for t in trials
        if t.status == RunStatus.succeeded.value
        and t.run_id is not None
        and t.value is not None
        and math.isfinite(t.value)
    ]
    if not done:
        return None
    sign = 1.0 if sweep.goal == "maximize" else -1.0
    best = max(done, key=lambda t: (sign * (t.value or 0.0), -t.number))
    assert best.run_id is not None and best.value is not None
    return BestOut(run_id=best.run_id, value=best.value, params=best.params)


def _brief(sweep: Sweep, trials: list[TrialOut]) -> dict[str, Any]:
    return {
        "id": sweep.id,
        "experiment_id": sweep.experiment_id,
        "owner_id": sweep.owner_id,
        "status": str(sweep.status),
        "method": sweep.method,
        "metric": MetricSpec(name=sweep.metric, goal=sweep.goal),
        "parameters": sweep.parameters,
        "max_runs": sweep.max_runs,
        "planned_runs": planned(sweep),
        "max_concurrent": sweep.max_concurrent,
        "early_stop": sweep.early_stop,
        "seed": sweep.seed,
        "created_at": sweep.created_at,
        "finished_at": sweep.finished_at,
        "counts": dict(Counter(t.status for t in trials)),
        "best": best_of(sweep, trials),
    }


def sweep_out(session: Session, sweep: Sweep) -> SweepOut:
    trials = trials_of(session, sweep_id=sweep.id)
    outs = _trial_outs(session, sweep, trials)
    runs = run_outs(session, [r for _, r in trials if r is not None])
    return SweepOut(**_brief(sweep, outs), trials=outs, runs=runs)


def sweep_briefs(session: Session, sweeps: list[Sweep]) -> list[SweepBrief]:
    return [
        SweepBrief(**_brief(s, _trial_outs(session, s, trials_of(session, sweep_id=s.id))))
        for s in sweeps
    ]
