"""The filter language's tree (app/runs/query/filter_lang.py) as one SQL condition on runs.

What a key means, in this order:
- ``name``, ``tag`` / ``tags``, ``status``, ``id``: the run's own fields (``~`` is a substring,
  case-insensitive, on the name and on any tag; ``tags=x`` holds when one tag is x, ``tags!=x``
  when none is);
- ``summary.<key>.<last|min|max>``: a metric's summary (the form before the language, kept);
- ``params.<key>``: the param ``<key>`` or ``params.<key>`` (so the config's ``params.lr`` is
  ``params.lr``, and the older ``params.params.lr`` still finds it);
- any other key is a param or a metric, whichever the run has: the param ``<key>`` or
  ``params.<key>`` (bare ``lr``), the metric ``<key>``'s last value (``val/acc``), and for
  ``<key>.last|min|max`` that summary of the metric ``<key>`` (``val/acc.max``).

A number (or true/false) compares with a param's number and a metric's value; any other value
(or a quoted one) with a param's text, never a metric's. A run lacking the key never matches.
Every condition is an EXISTS over the indexed run_params / metric_keys / run_tags, so the runs
list stays one query whatever the filter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, and_, exists, false, func, not_, or_

from app.errors import Invalid
from app.metrics.models import MetricKey
from app.runs.models import Run, RunParam, RunStatus, RunTag
from app.runs.query.filter_lang import Condition, Junction, Node, Value

AGGREGATES = {"last": "last_value", "min": "min_value", "max": "max_value"}
_SUMMARY = re.compile(r"^summary\.(.+)\.(last|min|max)$", re.DOTALL)
_AGG_SUFFIX = re.compile(r"^(.+)\.(last|min|max)$", re.DOTALL)
_COMPARE: dict[str, Callable[[Any, Any], ColumnElement[bool]]] = {
    "=": lambda c, v: c == v,
    "==": lambda c, v: c == v,
    "!=": lambda c, v: c != v,
    ">": lambda c, v: c > v,
    ">=": lambda c, v: c >= v,
    "<": lambda c, v: c < v,
    "<=": lambda c, v: c <= v,
}


def number(value: Value) -> float | None:
    """The number a value spells (true/false as 1/0), None for text or a quoted value."""
    if value.quoted:
        return None
    low = value.text.lower()
    if low in ("true", "false"):
        return 1.0 if low == "true" else 0.0
    try:
        found = float(value.text)
    except ValueError:
        return None
    return found if math.isfinite(found) else None


def _refused(cond: Condition, message: str) -> Invalid:
    return Invalid.at(["query", "filter"], f"position {cond.pos}: {message}", cond.key)


def _match(column: Any, cond: Condition, values: list[Any]) -> ColumnElement[bool]:
    """``column op value`` (``in``: one of ``values``; ``~``: contains, any case)."""
    found: ColumnElement[bool]
    if cond.op == "in":
        found = column.in_(values)
    elif cond.op == "~":
        found = func.lower(column).contains(str(values[0]).lower(), autoescape=True)
    else:
        found = _COMPARE[cond.op](column, values[0])
    return found


def _texts(cond: Condition) -> list[str]:
    return [v.text for v in cond.values]


def _run_field(cond: Condition, field: str) -> ColumnElement[bool]:
    if field in ("tag", "tags"):
        if cond.op not in ("=", "==", "!=", "~", "in"):
            raise _refused(cond, f"tags take = != ~ or in, not {cond.op}")
        positive = cond.op if cond.op != "!=" else "="
        one = exists().where(
            RunTag.run_id == Run.id, _match(RunTag.tag, _with_op(cond, positive), _texts(cond))
        )
        return not_(one) if cond.op == "!=" else one
    if field == "id":
        ids = [number(v) for v in cond.values]
        if cond.op == "~" or any(i is None for i in ids):
            raise _refused(cond, "id takes a number (= != > >= < <= or in)")
        return _match(Run.id, cond, ids)
    if field == "status":
        known = {s.value: s for s in RunStatus}
        if cond.op not in ("=", "==", "!=", "in") or any(t not in known for t in _texts(cond)):
            raise _refused(cond, f"status takes = != or in, and one of {', '.join(known)}")
        return _match(Run.status, cond, [known[t] for t in _texts(cond)])
    if cond.op not in ("=", "==", "!=", "~", "in"):
        raise _refused(cond, f"name takes = != ~ or in, not {cond.op}")
    return _match(Run.name, cond, _texts(cond))


def _with_op(cond: Condition, op: str) -> Condition:
    return Condition(cond.key, op, cond.values, cond.pos)


def _param(cond: Condition, keys: list[str]) -> ColumnElement[bool]:
    """The run has one of ``keys`` as a param whose value matches."""
    nums = [number(v) for v in cond.values]
    if cond.op == "~":
        held = _match(RunParam.value_text, cond, _texts(cond))
    elif cond.op == "in":
        found = [n for n in nums if n is not None]
        texts = [v.text for v, n in zip(cond.values, nums, strict=True) if n is None]
        held = or_(
            RunParam.value_num.in_(found) if found else false(),
            RunParam.value_text.in_(texts) if texts else false(),
        )
    elif nums[0] is not None:
        held = _match(RunParam.value_num, cond, [nums[0]])
    else:
        held = _match(RunParam.value_text, cond, _texts(cond))
    return exists().where(RunParam.run_id == Run.id, RunParam.key.in_(keys), held)


def _metric(cond: Condition, key: str, aggregate: str) -> ColumnElement[bool] | None:
    """The run's metric ``key`` has a matching summary; None when the values are not numbers
    (text never matches a metric)."""
    nums = [number(v) for v in cond.values]
    if cond.op == "~" or any(n is None for n in nums):
        return None
    column = getattr(MetricKey, AGGREGATES[aggregate])
    return exists().where(
        MetricKey.run_id == Run.id, MetricKey.key == key, _match(column, cond, nums)
    )


def _condition(cond: Condition) -> ColumnElement[bool]:
    field = cond.key.lower()
    if field in ("name", "tag", "tags", "status", "id"):
        return _run_field(cond, field)
    summary = _SUMMARY.match(cond.key)
    if summary:
        found = _metric(cond, summary.group(1), summary.group(2))
        if found is None:
            raise _refused(cond, f"{cond.key} is a number: compare it with a number")
        return found
    if cond.key.startswith("params.") and len(cond.key) > len("params."):
        return _param(cond, [cond.key.removeprefix("params."), cond.key])
    options = [_param(cond, [cond.key, f"params.{cond.key}"]), _metric(cond, cond.key, "last")]
    suffix = _AGG_SUFFIX.match(cond.key)
    if suffix:
        options.append(_metric(cond, suffix.group(1), suffix.group(2)))
    return or_(*(o for o in options if o is not None))


def compile_filter(node: Node) -> ColumnElement[bool]:
    """One SQL condition on ``Run`` that holds for the runs ``node`` keeps."""
    if isinstance(node, Junction):
        parts = [compile_filter(p) for p in node.parts]
        return and_(*parts) if node.op == "and" else or_(*parts)
    return _condition(node)
