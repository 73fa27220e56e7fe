"""The experiments list's "best" column: each experiment judged by its own metric, not a
hard-coded val/acc (issue 31). The metric is the experiment's own choice (its owner's, set by
PATCH /api/experiments/{id}, the experiment page or `torchyard experiments edit`: it wins, as
the one thing a person said on purpose), else the experiment's newest sweep's (its name and
goal), else the one its config ranks checkpoints by (``checkpoints.metric`` and ``mode``: the
experiment's own choice of what "better" means), else none and the column stays empty for it.
The best value is that metric's best over all of the experiment's runs: the max of each run's
maxima when larger is better, the min of its minima otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.experiments.models import Experiment
from app.metrics.summary import summaries_by_run
from app.sweeps.models import Sweep


@dataclass(frozen=True)
class BestMetric:
    key: str
    maximize: bool
    # "experiment", "sweep" or "checkpoints": where the choice came from (shown in the title)
    source: str


@dataclass(frozen=True)
class Best:
    metric: BestMetric
    value: float | None  # None: no run logged the metric yet


def _from_config(config: Mapping[str, object]) -> BestMetric | None:
    retention = config.get("checkpoints")
    if not isinstance(retention, Mapping):
        return None
    key = retention.get("metric")
    if not isinstance(key, str) or not key:
        return None
    return BestMetric(key=key, maximize=retention.get("mode", "max") != "min", source="checkpoints")


def experiment_metrics(
    session: Session, *, experiments: Sequence[Experiment]
) -> dict[int, BestMetric]:
    """{experiment id: its metric} for those that have one (one query for the sweeps)."""
    ids = [e.id for e in experiments]
    newest: dict[int, BestMetric] = {}
    if ids:
        rows = session.execute(
            select(Sweep.experiment_id, Sweep.metric, Sweep.goal)
            .where(Sweep.experiment_id.in_(ids))
            .order_by(Sweep.id)
        )
        for exp_id, key, goal in rows:  # ascending ids: the newest sweep's stays
            newest[exp_id] = BestMetric(key=key, maximize=goal != "minimize", source="sweep")
    out: dict[int, BestMetric] = {}
    for e in experiments:
        own = (
            BestMetric(key=e.best_metric, maximize=e.best_mode != "min", source="experiment")
            if e.best_metric
            else None
        )
        metric = own or newest.get(e.id) or _from_config(e.config or {})
        if metric is not None:
            out[e.id] = metric
    return out


def best_of_experiments(
    session: Session,
    *,
    experiments: Sequence[Experiment],
    run_ids: Mapping[int, Sequence[int]],
) -> dict[int, Best]:
    """{experiment id: its metric and best value} for the experiments that have a metric;
    ``run_ids``: each experiment's runs."""
    metrics = experiment_metrics(session, experiments=experiments)
    wanted = {rid for exp_id in metrics for rid in run_ids.get(exp_id, ())}
    keys = {m.key for m in metrics.values()}
    found = summaries_by_run(session, run_ids=sorted(wanted), keys=keys) if wanted else {}
    out: dict[int, Best] = {}
    for exp_id, metric in metrics.items():
        values = []
        for rid in run_ids.get(exp_id, ()):
            s = found.get(rid, {}).get(metric.key)
            v = (s.max if metric.maximize else s.min) if s is not None else None
            if v is not None:
                values.append(v)
        best = (max(values) if metric.maximize else min(values)) if values else None
        out[exp_id] = Best(metric=metric, value=best)
    return out
