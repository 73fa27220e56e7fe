"""Each series' summary (last value, min, max, highest step), kept on its metric_keys row.

Ingest calls ``update_summaries`` after each batch of points: ONE aggregate query over the
batch's step range of the keys it touched, then one UPDATE per key (an executemany). The
aggregate reads what is STORED in that range, not the batch itself, so a replayed point (which
ON CONFLICT DO NOTHING did not store) cannot change the summary: the first value kept is the
one summarised. Merging with the row's old values (min of mins, max of maxes, the last value at
the higher step) is idempotent, so points outside the batch that fall in its range do no harm.

Readers (the runs list, the experiment page) never scan points: ``summaries_by_run`` is one
query per chunk of run ids.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from typing import cast as type_cast

from sqlalchemy import (
    BigInteger,
    Double,
    Select,
    Table,
    and_,
    bindparam,
    case,
    cast,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from app.metrics.finite import json_value
from app.metrics.models import Metric, MetricKey

if TYPE_CHECKING:
    from app.metrics.overview.batch import Batch

LOSS_KEY = "train/loss"
ACC_KEY = "val/acc"
_CHUNK = 500
# The keys a runs list shows first: train/*, val/* and the run's GPU efficiency (sys/run/*:
# app.metrics.gpu_efficiency), then the rest, each by name.
_FIRST = ("train/", "val/", "sys/run/")
LIST_ORDER = (
    case((or_(*(MetricKey.key.startswith(p) for p in _FIRST)), 0), else_=1),
    MetricKey.key,
)  # ids per IN (...) list, well under every driver's parameter limit

# Cast, so PostgreSQL knows a parameter's type even where it is only tested for NULL.
_MIN = cast(bindparam("lo_value", type_=Double), Double)
_MAX = cast(bindparam("hi_value", type_=Double), Double)
_STEP = cast(bindparam("top_step", type_=BigInteger), BigInteger)
_KEYS = type_cast(Table, MetricKey.__table__)
_AT_TOP = (
    select(Metric.value).where(Metric.key_id == _KEYS.c.id, Metric.step == _STEP).scalar_subquery()
)
_LOWER = and_(_MIN.is_not(None), or_(_KEYS.c.min_value.is_(None), _MIN < _KEYS.c.min_value))
_HIGHER = and_(_MAX.is_not(None), or_(_KEYS.c.max_value.is_(None), _MAX > _KEYS.c.max_value))
_NEWER = or_(_KEYS.c.last_step.is_(None), _STEP >= _KEYS.c.last_step)
_MERGE = (
    update(_KEYS)
    .where(_KEYS.c.id == bindparam("key_id_"))
    .values(
        min_value=case(
            (
                and_(_MIN.is_not(None), or_(_KEYS.c.min_value.is_(None), _MIN < _KEYS.c.min_value)),
                _MIN,
            ),
            else_=_KEYS.c.min_value,
        ),
        max_value=case(
            (
                and_(_MAX.is_not(None), or_(_KEYS.c.max_value.is_(None), _MAX > _KEYS.c.max_value)),
                _MAX,
            ),
            else_=_KEYS.c.max_value,
        ),
        last_value=case((_NEWER, _AT_TOP), else_=_KEYS.c.last_value),
        last_step=case((_NEWER, _STEP), else_=_KEYS.c.last_step),
    )
)


def update_summaries(
    session: Session,
    *,
    key_ids: Collection[int],
    lo: int,
    hi: int,
    batch: Batch | None = None,
) -> None:
    """Fold the stored points of ``key_ids`` with steps in [lo, hi] into their summaries.

    ``batch``: the batch's rows, when every one was stored; its own figures per key then stand
    for the aggregate query (why that is the same: stored points of the range that are not the
    batch's were folded in before, and the merge is idempotent; the query was ~0.4 ms of a
    1,000-point MLflow batch, issue 29)."""
    if not key_ids:
        return
    rows: Sequence[Any]
    if batch is not None:
        rows = batch.summaries()
    else:
        rows = session.execute(
            select(
                Metric.key_id, func.min(Metric.value), func.max(Metric.value), func.max(Metric.step)
            )
            .where(Metric.key_id.in_(list(key_ids)), Metric.step.between(lo, hi))
            .group_by(Metric.key_id)
        ).all()
    if rows:
        params = [
            {"key_id_": key_id, "lo_value": mn, "hi_value": mx, "top_step": step}
            for key_id, mn, mx, step in rows
        ]
        session.connection().execute(_MERGE, params)


def recompute_summaries(session: Session, *, run_id: int) -> None:
    """Summaries of a run's keys from their points, for when points were DELETED (a requeued
    attempt drops the steps past its checkpoint: app.runs.state.recovery). Reads every point of the
    run once per column, so only for that rare event, never on the ingest path."""
    of_key = Metric.key_id == _KEYS.c.id
    session.connection().execute(
        update(_KEYS)
        .where(_KEYS.c.run_id == run_id)
        .values(
            min_value=select(func.min(Metric.value)).where(of_key).scalar_subquery(),
            max_value=select(func.max(Metric.value)).where(of_key).scalar_subquery(),
            last_step=select(func.max(Metric.step)).where(of_key).scalar_subquery(),
        )
    )
    at_last = select(Metric.value).where(of_key, Metric.step == _KEYS.c.last_step)
    session.connection().execute(
        update(_KEYS).where(_KEYS.c.run_id == run_id).values(last_value=at_last.scalar_subquery())
    )


# run_id, key, last, min, max, last_step: what summaries_by_run reads.
_Rows = Select[int, str, float | None, float | None, float | None, int | None]


@dataclass(frozen=True)
class SeriesSummary:
    last: float | None
    min: float | None
    max: float | None
    step: int


def summaries_by_run(
    session: Session,
    *,
    run_ids: Sequence[int],
    keys: Collection[str] | None = None,
    first: int | None = None,
    also: Collection[str] = (),
) -> dict[int, dict[str, SeriesSummary]]:
    """{run_id: {key: summary}} of every series with at least one point (or only ``keys``).
    ``first``: each run's first that many keys only (LIST_ORDER), plus those named in ``also``,
    so a list of runs stays small whatever a run logged (design.md: at most 50 in a list)."""
    ids = sorted(set(run_ids))
    found: dict[int, dict[str, SeriesSummary]] = {i: {} for i in ids}
    k = MetricKey
    for start in range(0, len(ids), _CHUNK):
        stmt: _Rows = select(
            k.run_id, k.key, k.last_value, k.min_value, k.max_value, k.last_step
        ).where(k.run_id.in_(ids[start : start + _CHUNK]), k.last_step.is_not(None))
        if keys is not None:
            stmt = stmt.where(k.key.in_(list(keys)))
        if first is not None:
            stmt = _first_keys(stmt, first, also)
        for run_id, key, last, mn, mx, step in session.execute(stmt.order_by("run_id", "key")):
            found[run_id][key] = SeriesSummary(
                last=json_value(last), min=json_value(mn), max=json_value(mx), step=step or 0
            )
    return found


def runs_with_more_keys(session: Session, *, run_ids: Sequence[int], than: int) -> set[int]:
    """The runs of ``run_ids`` with more than ``than`` series (a list cut their summaries)."""
    k = MetricKey
    found: set[int] = set()
    ids = sorted(set(run_ids))
    for start in range(0, len(ids), _CHUNK):
        stmt = (
            select(k.run_id)
            .where(k.run_id.in_(ids[start : start + _CHUNK]), k.last_step.is_not(None))
            .group_by(k.run_id)
            .having(func.count() > than)
        )
        found.update(session.scalars(stmt))
    return found


def listed_keys(session: Session, *, run_ids: Sequence[int], first: int) -> set[str]:
    """The keys a list of ``run_ids`` carries summaries of (each run's first ``first`` in
    LIST_ORDER), without their summaries: what the experiment page offers as columns and
    charts while holding the summaries of only the few it shows first (issue 31)."""
    k = MetricKey
    ids = sorted(set(run_ids))
    found: set[str] = set()
    for start in range(0, len(ids), _CHUNK):
        stmt: _Rows = select(
            k.run_id, k.key, k.last_value, k.min_value, k.max_value, k.last_step
        ).where(k.run_id.in_(ids[start : start + _CHUNK]), k.last_step.is_not(None))
        inner = _first_keys(stmt, first, ()).subquery()
        found.update(session.scalars(select(inner.c.key).distinct()))
    return found


def _first_keys(stmt: _Rows, first: int, also: Collection[str]) -> _Rows:
    """``stmt``'s rows limited to each run's first ``first`` keys in LIST_ORDER (a window over
    the (run_id, key) index: a run with 10,000 keys costs a scan of its own keys, no sort of
    everyone's) and the keys named in ``also``."""
    k = MetricKey
    rank = func.row_number().over(partition_by=k.run_id, order_by=LIST_ORDER).label("rank")
    inner = stmt.add_columns(rank).subquery()
    kept = inner.c.rank <= first
    if also:
        kept = or_(kept, inner.c.key.in_(list(also)))
    c = inner.c
    return select(c.run_id, c.key, c.last_value, c.min_value, c.max_value, c.last_step).where(kept)


@dataclass(frozen=True)
class RunSummary:
    """The two columns of the experiment page's table: last train/loss, best val/acc."""

    last_loss: float | None = None
    best_acc: float | None = None


def run_summaries(session: Session, *, run_ids: Sequence[int]) -> dict[int, RunSummary]:
    """{run_id: RunSummary} for every id given (all None for a run without those metrics)."""
    found = summaries_by_run(session, run_ids=run_ids, keys=(LOSS_KEY, ACC_KEY))
    out: dict[int, RunSummary] = {}
    for run_id, series in found.items():
        loss, acc = series.get(LOSS_KEY), series.get(ACC_KEY)
        out[run_id] = RunSummary(
            last_loss=loss.last if loss else None, best_acc=acc.max if acc else None
        )
    return out
