"""Search the metric keys of one experiment's runs by a part of their name (issue 43).

The experiment page offers keys to chart and columns to show. It holds the names of its newest
runs' first keys only (app/experiments/views.py): an experiment whose runs log 100,000
distinct keys cannot ship them all to a page (~3 MB of names, 100,000 checkboxes). So the
pickers are to ask here (issue 43; app/static/chart_keys_picker.js and the column picker
still list the keys the page holds): the distinct keys of the experiment's runs whose name
holds ``q`` (case-insensitive), in name order, at most ``limit`` of them and whether more match. One
answer of 200 keys of 255 characters is ~55 KB, so every answer stays under 100 KB.

Why a scan and not an index: a part of a name (``loss`` in ``train/loss``) is matched
anywhere in it, which no B-tree serves; the scan is of the experiment's own keys
(runs -> metric_keys by the (run_id, key) unique index): 16-185 ms for 100,000 keys on SQLite,
60-355 ms on PostgreSQL, on this loaded box (bench/scale_keys.py, docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from app.metrics.models import MetricKey
from app.runs.models import Run

MAX_LIMIT = 200


@dataclass(frozen=True)
class KeyPage:
    keys: list[str]
    more: bool  # more keys match than were given


def _pattern(q: str) -> str:
    """``q`` as a LIKE pattern matching it anywhere, its own % and _ taken literally."""
    escaped = q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _holds(session: Session, q: str) -> ColumnElement[bool]:
    """The key holds ``q`` in any case. SQLite's LIKE already ignores ASCII case (and its
    lower() folds only ASCII), so there the key is matched as stored: lower() on each of
    100,000 keys was ~40% of a search's scan. PostgreSQL: ILIKE."""
    pattern = _pattern(q)
    if session.get_bind().dialect.name == "sqlite":
        return MetricKey.key.like(pattern, escape="\\")
    return MetricKey.key.ilike(pattern, escape="\\")


def search_keys(session: Session, *, experiment_id: int, q: str, limit: int) -> KeyPage:
    """The distinct keys of the experiment's runs holding ``q`` (all with ""), by name."""
    k = MetricKey
    if q:
        stmt = (
            select(k.key)
            .join(Run, Run.id == k.run_id)
            .where(Run.experiment_id == experiment_id, _holds(session, q))
        )
    else:
        # The picker's first list: the keys in name order by a walk of a key-leading index
        # that stops at the limit (the join above sorts all 100,000 names: ~240 ms, this ~1)
        of_experiment = select(Run.id).where(Run.id == k.run_id, Run.experiment_id == experiment_id)
        stmt = select(k.key).where(of_experiment.exists())
    stmt = stmt.distinct().order_by(k.key).limit(limit + 1)
    found = list(session.scalars(stmt))
    return KeyPage(keys=found[:limit], more=len(found) > limit)
