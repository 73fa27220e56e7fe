"""One line per run for tables: the last train/loss and the best val/acc.

A fixed number of queries for any number of runs (two, plus one per chunk of ids): the list
and experiment pages show dozens of runs, and a query per run would be most of their time.
The last point of a series is an index seek on the (key_id, step) primary key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from app.metrics.models import Metric, MetricKey

LOSS_KEY = "train/loss"
ACC_KEY = "val/acc"
_CHUNK = 500  # ids per IN (...) list, well under every driver's parameter limit


@dataclass(frozen=True)
class RunSummary:
    last_loss: float | None = None
    best_acc: float | None = None


def run_summaries(session: Session, *, run_ids: Sequence[int]) -> dict[int, RunSummary]:
    """{run_id: RunSummary} for every id given (all None for a run without those metrics)."""
    ids = sorted(set(run_ids))
    last_loss: dict[int, float | None] = {}
    best_acc: dict[int, float | None] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        keys = session.execute(
            select(MetricKey.id, MetricKey.run_id, MetricKey.key).where(
                MetricKey.run_id.in_(chunk), MetricKey.key.in_([LOSS_KEY, ACC_KEY])
            )
        ).all()
        loss_runs = {key_id: run_id for key_id, run_id, key in keys if key == LOSS_KEY}
        acc_runs = {key_id: run_id for key_id, run_id, key in keys if key == ACC_KEY}
        if loss_runs:
            later = aliased(Metric)
            last_step = (
                select(func.max(later.step)).where(later.key_id == Metric.key_id).scalar_subquery()
            )
            rows = session.execute(
                select(Metric.key_id, Metric.value).where(
                    Metric.key_id.in_(loss_runs), Metric.step == last_step
                )
            ).all()
            last_loss.update({loss_runs[key_id]: value for key_id, value in rows})
        if acc_runs:
            rows = session.execute(
                select(Metric.key_id, func.max(Metric.value))
                .where(Metric.key_id.in_(acc_runs))
                .group_by(Metric.key_id)
            ).all()
            best_acc.update({acc_runs[key_id]: value for key_id, value in rows})
    return {
        run_id: RunSummary(last_loss=last_loss.get(run_id), best_acc=best_acc.get(run_id))
        for run_id in ids
    }
