"""Sweeps: create (validated, first trials launched), advance, cancel, read. Functions take
the session and flush; the caller commits (the request, or the worker's task).

`advance` is the driver's one step, safe to call any time from anywhere: its first statement
stamps the sweep's row (taking its write lock: a second advance waits for the first to
commit, on PostgreSQL and on SQLite alike), then it launches trials until max_concurrent are
queued or running or every planned trial exists, and ends the sweep once they have all ended.
(sweep_id, number) is the primary key of a trial: the backstop if two advances ever overlap.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from app.auth.models import User
from app.errors import Conflict, Invalid
from app.experiments.config.model import deep_merge, with_seed
from app.experiments.config.validate import validate_config
from app.experiments.models import Experiment
from app.runs.service import refuse_if_never_startable
from app.runs.state import lifecycle
from app.sweeps.early_stop import observed_trials
from app.sweeps.models import Sweep, SweepStatus, SweepTrial
from app.sweeps.sampling import MAX_SEED, next_params, planned_runs
from app.sweeps.schemas import SweepCreate
from app.sweeps.spec import nested, spec_errors
from app.sweeps.trials import is_active, trials_of
from app.timeutil import utcnow
from app.users import ceilings, quota


def create_sweep(
    session: Session, *, experiment: Experiment, owner: User, data: SweepCreate
) -> Sweep:
    errors = spec_errors(data, base_config=experiment.config)
    if errors:
        raise Invalid(errors)
    refuse_if_never_startable(session, config=experiment.config, loc=("body", "experiment_id"))
    quota.refuse_run(session, owner, ("body",))
    sweep = Sweep(
        experiment_id=experiment.id,
        owner_id=owner.id,
        status=SweepStatus.running,
        method=data.method,
        metric=data.metric.name,
        goal=data.metric.goal,
        parameters={k: v.model_dump(exclude_none=True) for k, v in data.parameters.items()},
        max_runs=data.max_runs,
        max_concurrent=data.max_concurrent,
        early_stop=data.early_stop.model_dump() if data.early_stop else None,
        seed=data.seed if data.seed is not None else secrets.randbelow(MAX_SEED),
    )
    session.add(sweep)
    session.flush()
    advance(session, sweep_id=sweep.id)
    return sweep


def planned(sweep: Sweep) -> int:
    return planned_runs(sweep.method, sweep.parameters, sweep.max_runs)


def _lock(session: Session, sweep_id: int) -> bool:
    """Stamp the running sweep's row (its write lock until the caller commits); False when it
    is not running (ended, cancelled, deleted)."""
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(Sweep)
        .where(Sweep.id == sweep_id, Sweep.status == SweepStatus.running)
        .values(advanced_at=utcnow())
    )
    return bool(result.rowcount)


def advance(session: Session, *, sweep_id: int) -> list[int]:
    """Launch the trials the sweep may have now; end it when every planned trial has ended.
    Returns the new trials' run ids."""
    if not _lock(session, sweep_id):
        return []
    sweep = session.get(Sweep, sweep_id, populate_existing=True)
    assert sweep is not None
    experiment = session.get(Experiment, sweep.experiment_id)
    assert experiment is not None  # the sweep goes with its experiment (ON DELETE CASCADE)
    trials = trials_of(session, sweep_id=sweep_id)
    active = sum(is_active(run) for _, run in trials)
    total = planned(sweep)
    if len(trials) >= total:
        if active == 0:
            sweep.status = SweepStatus.succeeded
            sweep.finished_at = utcnow()
            session.flush()
        return []
    launched: list[int] = []
    observed = None
    while len(trials) + len(launched) < total and active < sweep.max_concurrent:
        number = len(trials) + len(launched)
        if observed is None and sweep.method != "grid":
            observed = observed_trials(session, sweep=sweep, trials=trials)
        params = next_params(
            method=sweep.method,
            goal=sweep.goal,
            parameters=sweep.parameters,
            seed=sweep.seed,
            max_runs=sweep.max_runs,
            number=number,
            observed=observed or [],
        )
        launched.append(
            _launch(session, sweep=sweep, experiment=experiment, number=number, params=params)
        )
        active += 1
    return launched


def _launch(
    session: Session, *, sweep: Sweep, experiment: Experiment, number: int, params: dict[str, Any]
) -> int:
    """Trial `number` as an ordinary run of the experiment: its config with the trial's
    values merged in, validated whole (spec.py checked every value's range already)."""
    overrides: dict[str, Any] = {}
    for path, value in params.items():
        overrides = deep_merge(overrides, nested(path, value))
    try:
        config = validate_config(deep_merge(experiment.config, overrides), loc_prefix=("trial",))
        owner = session.get(User, sweep.owner_id)
        assert owner is not None  # users are disabled, never deleted
        config = ceilings.hold(session, owner, config, ("trial",), overrides.get("resources"))
    except Invalid as exc:  # a config the experiment no longer allows (its script gone)
        raise Conflict(
            f"sweep {sweep.id}: trial {number}'s config is invalid: {exc.errors}"
        ) from None
    run = lifecycle.queue(
        session,
        experiment_id=experiment.id,
        owner_id=sweep.owner_id,
        config=with_seed(config),
        sweep_id=sweep.id,
        name=f"sweep {sweep.id} #{number}",
    )
    session.add(SweepTrial(sweep_id=sweep.id, number=number, run_id=run.id, params=params))
    session.flush()
    return run.id


def cancel_sweep(session: Session, *, sweep: Sweep) -> Sweep:
    """No more trials; queued ones are cancelled here, running ones stopped by their workers."""
    if SweepStatus(sweep.status).finished:
        raise Conflict(f"sweep {sweep.id} has already ended ({sweep.status})")
    sweep.status = SweepStatus.cancelled
    sweep.finished_at = utcnow()
    session.flush()
    for _, run in trials_of(session, sweep_id=sweep.id):
        if is_active(run):
            assert run is not None
            lifecycle.cancel(session, run_id=run.id)
    session.flush()
    return sweep


def sweeps_of(session: Session, *, experiment_id: int | None) -> list[Sweep]:
    stmt = select(Sweep).order_by(Sweep.id.desc())
    if experiment_id is not None:
        stmt = stmt.where(Sweep.experiment_id == experiment_id)
    return list(session.scalars(stmt))
