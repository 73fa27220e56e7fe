"""How long a run holds its GPUs: a running run's expected end, a queued run's expected length.

The rules, first that applies (docs/fleet.md "Estimated starts"):
1. progress (running runs): its highest metric step (not `sys/`) against its step total (params
   `total_steps`, `max_steps`, or `epochs` x `steps_per_epoch`), or its `epoch` metric against
   `epochs`; the pace of its steps so far (first to last logged step, by their wall times)
   carried on to the total, so the time before its first step (imports) is not stretched;
   plus the time its experiment's succeeded runs took from their last point to their end.
   Early on a pace rests on few steps: where its experiment's succeeded runs have a pace of
   their own, the two paces are weighed by the share done (the end, not the start-up, is
   what the history then speaks to); by epochs, the end is weighed against the history's;
2. its time limit (`resources.time_limit_minutes`), from its start;
3. the history of its experiment: the median length of its succeeded runs;
4. else unknown.
Why: app.gpus.estimate replays the scheduler over these ends and lengths.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeGuard

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.experiments.config.model import run_config
from app.gpus.estimate import Holder, Length
from app.gpus.models import GpuLease
from app.metrics.models import Metric, MetricKey
from app.runs.models import Run, RunStatus
from app.runs.query.params import params_by_run
from app.timeutil import as_utc
from torchyard.contract import SYSTEM_KEY_PREFIX

# The succeeded runs of an experiment its history reads (the latest ones).
HISTORY_RUNS = 20
# Of those, the latest whose pace of steps is read (two point reads a run).
HISTORY_PACE_RUNS = 5
STEP_TOTALS = ("total_steps", "max_steps", "num_steps")
EPOCH_TOTALS = ("epochs", "num_epochs", "max_epochs")


@dataclass(frozen=True)
class Progress:
    """A running run's logged progress: its first and last steps with their wall times, and
    its last `epoch` value."""

    first_step: int
    first_time: float
    last_step: int
    last_time: float
    epoch: float | None


def holders(session: Session, *, now: datetime) -> list[Holder]:
    """Every run holding GPU leases, with its expected end (never before `now`)."""
    gpus: dict[int, list[tuple[str, int]]] = {}
    for run_id, host, index in session.execute(
        select(GpuLease.run_id, GpuLease.host, GpuLease.gpu_index)
    ):
        gpus.setdefault(run_id, []).append((host, index))
    runs = list(session.scalars(select(Run).where(Run.id.in_(list(gpus)))))
    ends = expected_ends(session, runs, now=now)
    return [
        Holder(run.id, tuple(sorted(gpus[run.id])), *ends.get(run.id, (None, "not running")))
        for run in runs
    ]


def expected_ends(
    session: Session, runs: Sequence[Run], *, now: datetime
) -> dict[int, tuple[datetime | None, str]]:
    """Each running run's expected end and its basis."""
    running = [r for r in runs if r.status == RunStatus.running and r.started_at is not None]
    recorded = params_by_run(session, [r.id for r in running])
    params = {r.id: {**_config_params(r), **recorded[r.id]} for r in running}
    progress = progress_by_run(session, [r.id for r in running])
    experiments = {r.experiment_id for r in running}
    history = history_medians(session, experiments)
    tails = history_tails(session, experiments)
    paces = history_paces(session, experiments)
    ends: dict[int, tuple[datetime | None, str]] = {}
    for run in running:
        started = as_utc(run.started_at) if run.started_at else now
        end, basis, done, weighed = _by_progress(
            params[run.id], progress.get(run.id), run, paces.get(run.experiment_id)
        )
        tail = tails.get(run.experiment_id)
        if end is not None and tail:
            end += timedelta(seconds=tail)
            basis += f", then {tail:.0f} s to end as its experiment's runs took"
        past = history.get(run.experiment_id)
        if end is not None and past is not None and past.seconds and not weighed and done < 1:
            # Early in a run its progress rests on few steps or epochs: weigh its end by the
            # share done against the end its experiment's history gives.
            by_history = max(started + timedelta(seconds=past.seconds), now)
            end = by_history + (end - by_history) * done
            basis += f"; weighed {done:.0%} against its experiment's median, {past.seconds:.0f} s"
        if end is None:
            length = _fallback(run, history)
            end = None if length.seconds is None else started + timedelta(seconds=length.seconds)
            basis = length.basis
        ends[run.id] = (None if end is None else max(end, now), basis)
    return ends


def queued_lengths(session: Session, runs: Sequence[Run]) -> dict[int, Length]:
    """Each run's expected length once it starts: its time limit, else its history."""
    history = history_medians(session, {r.experiment_id for r in runs})
    return {run.id: _fallback(run, history) for run in runs}


def progress_by_run(session: Session, run_ids: Iterable[int]) -> dict[int, Progress]:
    """Each run's series with the highest last step (the job's own: not the worker's `sys/`
    samples): its first and last points' steps and wall times; its `epoch` series' last
    value."""
    ids = list(run_ids)
    if not ids:
        return {}
    keys = session.execute(
        select(
            MetricKey.run_id, MetricKey.id, MetricKey.key, MetricKey.last_step, MetricKey.last_value
        )
        .where(
            MetricKey.run_id.in_(ids),
            MetricKey.last_step.is_not(None),
            # The worker's own samples (step = sample number) say nothing of training's.
            ~MetricKey.key.startswith(SYSTEM_KEY_PREFIX, autoescape=True),
        )
        .order_by(MetricKey.run_id, MetricKey.last_step.desc(), MetricKey.id)
    ).all()
    top: dict[int, int] = {}
    epochs: dict[int, float] = {}
    for run_id, key_id, key, _, last_value in keys:
        top.setdefault(run_id, key_id)
        if key == "epoch" and last_value is not None:
            epochs[run_id] = float(last_value)
    found: dict[int, Progress] = {}
    for run_id, key_id in top.items():
        ends = session.execute(
            select(func.min(Metric.step), func.max(Metric.step)).where(Metric.key_id == key_id)
        ).one()
        times = {
            step: wall
            for step, wall in session.execute(
                select(Metric.step, Metric.wall_time).where(
                    Metric.key_id == key_id, Metric.step.in_([ends[0], ends[1]])
                )
            )
        }
        found[run_id] = Progress(
            int(ends[0]),
            float(times[ends[0]]),
            int(ends[1]),
            float(times[ends[1]]),
            epochs.get(run_id),
        )
    return found


def history_medians(session: Session, experiment_ids: Iterable[int]) -> dict[int, Length]:
    """Each experiment's median run length (start to end) over its latest succeeded runs."""
    medians: dict[int, Length] = {}
    for experiment_id in sorted(set(experiment_ids)):
        rows = session.execute(
            select(Run.started_at, Run.finished_at)
            .where(
                Run.experiment_id == experiment_id,
                Run.status == RunStatus.succeeded,
                Run.started_at.is_not(None),
                Run.finished_at.is_not(None),
            )
            .order_by(Run.finished_at.desc())
            .limit(HISTORY_RUNS)
        ).all()
        seconds = [
            (as_utc(end) - as_utc(start)).total_seconds() for start, end in rows if start and end
        ]
        if seconds:
            median = statistics.median(seconds)
            medians[experiment_id] = Length(
                median,
                f"the median length of its experiment's {len(seconds)} succeeded runs, "
                f"{median:.0f} s",
            )
    return medians


def history_tails(session: Session, experiment_ids: Iterable[int]) -> dict[int, float]:
    """Each experiment's median time from a succeeded run's last metric point to its end
    (the final checkpoint, the job's exit, the last points stored): what a run's progress
    does not show, added to the end its progress gives."""
    tails: dict[int, float] = {}
    for experiment_id in sorted(set(experiment_ids)):
        runs = (
            select(Run.id, Run.finished_at)
            .where(
                Run.experiment_id == experiment_id,
                Run.status == RunStatus.succeeded,
                Run.finished_at.is_not(None),
            )
            .order_by(Run.finished_at.desc())
            .limit(HISTORY_RUNS)
            .subquery()
        )
        rows = session.execute(
            select(runs.c.finished_at, func.max(Metric.wall_time))
            .join(MetricKey, MetricKey.run_id == runs.c.id)
            .join(Metric, Metric.key_id == MetricKey.id)
            .where(~MetricKey.key.startswith(SYSTEM_KEY_PREFIX, autoescape=True))
            .group_by(runs.c.id, runs.c.finished_at)
        ).all()
        seconds = [
            as_utc(finished).timestamp() - float(last) for finished, last in rows if finished
        ]
        if seconds:
            tails[experiment_id] = max(statistics.median(seconds), 0.0)
    return tails


def history_paces(session: Session, experiment_ids: Iterable[int]) -> dict[int, float]:
    """Each experiment's median seconds a step over its latest succeeded runs (first to last
    logged step of each, by their wall times): what a running run's own pace, early on, is
    weighed against. The start-up before a first step is not in it, so a running run's end
    does not carry the history's start-ups (which swing with the box's load)."""
    paces: dict[int, float] = {}
    for experiment_id in sorted(set(experiment_ids)):
        ids = session.scalars(
            select(Run.id)
            .where(Run.experiment_id == experiment_id, Run.status == RunStatus.succeeded)
            .order_by(Run.finished_at.desc())
            .limit(HISTORY_PACE_RUNS)
        ).all()
        found = [
            (p.last_time - p.first_time) / (p.last_step - p.first_step)
            for p in progress_by_run(session, ids).values()
            if p.last_step > p.first_step
        ]
        if found:
            paces[experiment_id] = statistics.median(found)
    return paces


def step_total(params: Mapping[str, Any]) -> int | None:
    """The run's total of steps from its params, or None."""
    for name in STEP_TOTALS:
        value = params.get(name)
        if _positive(value):
            return int(value)
    epochs, per_epoch = params.get("epochs"), params.get("steps_per_epoch")
    if _positive(epochs) and _positive(per_epoch):
        return int(epochs) * int(per_epoch)
    return None


def epoch_total(params: Mapping[str, Any]) -> int | None:
    for name in EPOCH_TOTALS:
        value = params.get(name)
        if _positive(value):
            return int(value)
    return None


def _positive(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _by_progress(
    params: Mapping[str, Any], progress: Progress | None, run: Run, past_pace: float | None
) -> tuple[datetime | None, str, float, bool]:
    """The end its progress gives: the pace of its logged steps (weighed by the share done
    against `past_pace`, its experiment's seconds a step, when known) carried on to its
    total, or (one step or epochs only) the time since its job started stretched by its
    fraction; that fraction (the share done); whether the end is weighed already."""
    if progress is None:
        return None, "", 0.0, False
    steps = step_total(params)
    if steps is not None and progress.last_step > progress.first_step:
        pace = (progress.last_time - progress.first_time) / (
            progress.last_step - progress.first_step
        )
        done = min(progress.last_step / steps, 1.0)
        basis = f"its progress: step {progress.last_step} of {steps}"
        if past_pace is not None and done < 1:
            pace = done * pace + (1 - done) * past_pace
            basis += (
                f" (its pace weighed {done:.0%} against its experiment's, {past_pace:.3g} s a step)"
            )
        left = max(steps - progress.last_step, 0) * pace
        at = datetime.fromtimestamp(progress.last_time + left).astimezone()
        return as_utc(at), basis, done, past_pace is not None
    began = run.training_started_at or run.started_at
    if began is None:
        return None, "", 0.0, False
    start = as_utc(began).timestamp()
    epochs = epoch_total(params)
    if steps is not None and progress.last_step > 0:
        done, basis = progress.last_step / steps, f"step {progress.last_step} of {steps}"
    elif epochs is not None and progress.epoch:
        done, basis = progress.epoch / epochs, f"epoch {progress.epoch:g} of {epochs}"
    else:
        return None, "", 0.0, False
    ends = start + (progress.last_time - start) / min(done, 1.0)
    at = datetime.fromtimestamp(ends).astimezone()
    return as_utc(at), f"its progress: {basis}", min(done, 1.0), False


def _config_params(run: Run) -> dict[str, Any]:
    """The launch config's params (those the API recorded, and the SDK reported, win)."""
    params = (run.config or {}).get("params")
    return dict(params) if isinstance(params, dict) else {}


def _fallback(run: Run, history: Mapping[int, Length]) -> Length:
    limit = run_config(run.config).resources.time_limit_minutes
    if limit is not None:
        return Length(limit * 60.0, f"its time limit, {limit} min")
    return history.get(run.experiment_id, Length(None, "no known length"))
