"""Keys a filter names that no run of its experiment (or sweep) has: said, with the keys it
has, instead of an empty table (issue 41: ``val/accuracy`` or ``LR`` silently gave 0 rows).

A key is known when app/runs/query/filter_sql.py would find it on some run in scope: the run
fields (name, tags, status, id), a param ``<key>`` or ``params.<key>``, a metric ``<key>``, or
``<metric>.last|min|max`` and ``summary.<metric>.<agg>``. An unknown one is a 422 at
``filter``: ``position 0: no run here has the key 'val/accuracy': did you mean val/acc? Keys:
...``. The check runs only for a list scoped to one experiment or sweep (the runs table, the
CLI's ``--experiment``): there the keys are few and the reader means those runs; a box-wide
list keeps "a key no run has matches nothing". A scope without runs checks nothing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from app.errors import Invalid
from app.metrics.models import MetricKey
from app.runs.models import Run, RunParam
from app.runs.query.filter_lang import Condition, Junction, Node

RUN_FIELDS = ("name", "tag", "tags", "status", "id")
SHOWN_KEYS = 20  # the known keys listed in the message
_AGG = re.compile(r"^(?:summary\.)?(.+)\.(?:last|min|max)$", re.DOTALL)


def _conditions(node: Node) -> Iterator[Condition]:
    if isinstance(node, Junction):
        for part in node.parts:
            yield from _conditions(part)
    else:
        yield node


def known(params: set[str], metrics: set[str], key: str) -> bool:
    """Whether filter_sql finds ``key`` on a run with these params and metrics."""
    if key.lower() in RUN_FIELDS:
        return True
    bare = key.removeprefix("params.")
    if key in params or bare in params or f"params.{bare}" in params:
        return True
    if key in metrics:
        return True
    agg = _AGG.match(key)
    return bool(agg and agg.group(1) in metrics)


def shown_keys(params: set[str], metrics: set[str]) -> list[str]:
    """The keys as a reader types them: params without ``params.``, then metrics."""
    plain = sorted({p.removeprefix("params.") for p in params})
    return [*plain, *sorted(metrics - set(plain))]


def suggestion(key: str, keys: list[str]) -> str | None:
    """The known key closest to ``key`` (any case; ``LR`` -> ``lr``), None when none is near."""
    lowered = {k.lower(): k for k in reversed(keys)}
    bare = key.removeprefix("params.").lower()
    close = difflib.get_close_matches(bare, list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def unknown_key_message(key: str, params: set[str], metrics: set[str]) -> str:
    keys = shown_keys(params, metrics)
    near = suggestion(key, keys)
    listed = ", ".join(keys[:SHOWN_KEYS]) + (", ..." if len(keys) > SHOWN_KEYS else "")
    hint = f": did you mean {near}?" if near else "."
    return f"no run here has the key {key!r}{hint} Keys: name, tags, status, id, {listed}"


def _scope_keys(session: Session, runs: Select[Any]) -> tuple[set[str], set[str]]:
    params = set(session.scalars(select(RunParam.key).where(RunParam.run_id.in_(runs)).distinct()))
    metrics = set(
        session.scalars(select(MetricKey.key).where(MetricKey.run_id.in_(runs)).distinct())
    )
    return params, metrics


def _found(session: Session, runs: Select[Any], key: str) -> bool:
    """Whether some run in scope has ``key`` (as `known` reads it), by probes that stop at the
    first such run: the key-leading indexes of run_params and metric_keys, then the run by its
    id. Issue 43: listing the scope's every key (`_scope_keys`) took ~1 s a filter with 100,000
    runs, so it is left to the message of a key not found."""
    bare = key.removeprefix("params.")
    agg = _AGG.match(key)
    metric_keys = [key, agg.group(1)] if agg else [key]
    probes = [
        (RunParam.run_id, RunParam.key.in_([key, bare, f"params.{bare}"])),
        (MetricKey.run_id, MetricKey.key.in_(metric_keys)),
    ]
    for run_id, named in probes:
        scoped = runs.where(Run.id == run_id).exists()
        if session.scalar(select(run_id).where(named, scoped).limit(1)) is not None:
            return True
    return False


def check_keys(
    session: Session, trees: list[Node], *, experiment_id: int | None, sweep_id: int | None
) -> None:
    """A 422 at ``filter`` for the first key of ``trees`` no run of the experiment or sweep
    has (nothing checked without either, or when its runs have no params and no metrics)."""
    if experiment_id is None and sweep_id is None:
        return
    conds = [c for tree in trees for c in _conditions(tree) if c.key.lower() not in RUN_FIELDS]
    if not conds:
        return
    runs = select(Run.id)
    if experiment_id is not None:
        runs = runs.where(Run.experiment_id == experiment_id)
    if sweep_id is not None:
        runs = runs.where(Run.sweep_id == sweep_id)
    if all(_found(session, runs, cond.key) for cond in conds):
        return
    params, metrics = _scope_keys(session, runs)
    if not params and not metrics:
        return
    for cond in conds:
        if not known(params, metrics, cond.key):
            message = unknown_key_message(cond.key, params, metrics)
            raise Invalid.at(["query", "filter"], f"position {cond.pos}: {message}", cond.key)
