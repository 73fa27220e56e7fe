"""Early stopping: whether a running trial should stop, judged by Optuna's pruners on the
metric as the runs reported it (the stored points), and the stop itself.

The worker's watch loop calls `check` after each forwarded batch of a sweep's run. The study
is rebuilt from the stored points each time (the sweep's state is the database's, as for
sampling): the other trials replayed in trial order (ASHA records its rungs as it goes), then
this run's curve. A stop is the ordinary cancel request (app.runs.state.lifecycle) with the reason
said on the run (app.runs.state.notices), which the run page, the runs table, GET /api/runs and the
sweep show; the worker's watch loop, seeing that `check` stopped the trial, kills its job at
once (no cancel grace: the trial is discarded, its points stored) and finishes it cancelled,
its GPU leases released in that transaction (measured ~0.3 s after the decision).
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.metrics.models import Metric, MetricKey
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle, notices
from app.sweeps.models import Sweep, SweepStatus, SweepTrial
from app.sweeps.sampling import Observed, State, study_of
from app.sweeps.trials import observe, trials_of
from app.timeutil import utcnow

if TYPE_CHECKING:
    import optuna

# The last step judged per run, in this process: a batch without a new point of the metric
# needs no new judgement (only an optimisation: a restarted worker judges again).
_judged: dict[int, int] = {}


def pruner(early_stop: dict[str, Any]) -> optuna.pruners.BasePruner:
    from optuna import pruners

    if early_stop["type"] == "asha":
        return pruners.SuccessiveHalvingPruner(
            min_resource=early_stop.get("min_steps", 1),
            reduction_factor=early_stop.get("reduction_factor", 3),
        )
    return pruners.MedianPruner(
        n_startup_trials=early_stop.get("min_trials", 3),
        n_warmup_steps=early_stop.get("warmup_steps", 0),
    )


def curves(session: Session, *, metric: str, run_ids: list[int]) -> dict[int, dict[int, float]]:
    """Each run's points of `metric`, step -> value (a non-finite value, stored NULL: nan)."""
    found: dict[int, dict[int, float]] = {i: {} for i in run_ids}
    if not run_ids:
        return found
    stmt = (
        select(MetricKey.run_id, Metric.step, Metric.value)
        .join(Metric, Metric.key_id == MetricKey.id)
        .where(MetricKey.key == metric, MetricKey.run_id.in_(run_ids))
        .order_by(MetricKey.run_id, Metric.step)
    )
    for run_id, step, value in session.execute(stmt):
        found[run_id][int(step)] = math.nan if value is None else float(value)
    return found


def decide(
    early_stop: dict[str, Any], *, goal: str, others: list[Observed], curve: dict[int, float]
) -> bool:
    """Whether a trial with `curve` so far stops, given the other trials (in trial order)."""
    if not curve:
        return False
    study = study_of([], goal=goal, parameters={}, pruner=pruner(early_stop))
    for other in others:  # replayed: ASHA's rungs are written by should_prune as it goes
        trial = study.ask()
        for step, value in sorted(other.curve.items()):
            trial.report(value, step)
            if early_stop["type"] == "asha":
                trial.should_prune()
        if other.state is not State.RUNNING:
            final = other.value if other.state is State.COMPLETE else None
            study.tell(trial, final, state=other.state.optuna)
    trial = study.ask()
    verdicts = []
    for step, value in sorted(curve.items()):
        trial.report(value, step)
        if early_stop["type"] == "asha":
            verdicts.append(trial.should_prune())
    # The median rule judges the best value so far at the last step; ASHA judges each rung as
    # the trial reached it (a batch may carry several).
    return any(verdicts) if early_stop["type"] == "asha" else trial.should_prune()


def reason(
    early_stop: dict[str, Any],
    *,
    metric: str,
    goal: str,
    others: list[Observed],
    curve: dict[int, float],
) -> str:
    step = max(curve)
    value = curve[step]
    if early_stop["type"] == "asha":
        rf = early_stop.get("reduction_factor", 3)
        return (
            f"stopped early by the sweep (successive halving: {metric} {value:.4g} at step "
            f"{step} was not in the top 1/{rf} of the trials at that rung)"
        )
    at_step = [o.curve[step] for o in others if o.state is State.COMPLETE and step in o.curve]
    median = statistics.median(at_step) if at_step else math.nan
    pick = max if goal == "maximize" else min
    best = pick(v for v in curve.values())
    return (
        f"stopped early by the sweep (median rule: best {metric} so far {best:.4g} at step "
        f"{step} is worse than the median {median:.4g} of {len(at_step)} finished trials)"
    )


def observed_trials(
    session: Session, *, sweep: Sweep, trials: list[tuple[SweepTrial, Run | None]]
) -> list[Observed]:
    """The trials as Optuna sees them, in trial order: curves from the stored points."""
    by_run = curves(
        session, metric=sweep.metric, run_ids=[r.id for _, r in trials if r is not None]
    )
    return [observe(t, r, by_run.get(r.id, {}) if r else {}) for t, r in trials]


def check(session: Session, *, run_id: int) -> str | None:
    """Judge a running trial; when it should stop, request its cancel with the reason said on
    the run, and return the reason. None: it goes on (or it is no sweep's, or no rule)."""
    run = session.get(Run, run_id)
    if run is None or run.sweep_id is None or run.status != RunStatus.running:
        _judged.pop(run_id, None)
        return None
    sweep = session.get(Sweep, run.sweep_id)
    if sweep is None or sweep.early_stop is None or sweep.status != SweepStatus.running:
        return None
    last = session.scalar(
        select(MetricKey.last_step).where(MetricKey.run_id == run_id, MetricKey.key == sweep.metric)
    )
    if last is None or _judged.get(run_id) == last:
        return None
    _judged[run_id] = int(last)
    trials = trials_of(session, sweep_id=sweep.id)
    observed = observed_trials(session, sweep=sweep, trials=trials)
    mine = [
        o for (t, r), o in zip(trials, observed, strict=True) if r is not None and r.id == run_id
    ]
    if not mine:
        return None
    others = [o for (t, r), o in zip(trials, observed, strict=True) if r is None or r.id != run_id]
    if not decide(sweep.early_stop, goal=sweep.goal, others=others, curve=mine[0].curve):
        return None
    text = reason(
        sweep.early_stop, metric=sweep.metric, goal=sweep.goal, others=others, curve=mine[0].curve
    )
    notices.stopped_early(run, text, at=utcnow())
    lifecycle.cancel(session, run_id=run_id)
    session.flush()
    _judged.pop(run_id, None)
    return text
