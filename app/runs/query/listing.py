"""The runs list: filters, sort and cursor paging of GET /api/runs, all in one SQL query.

Sort (``sort=``): a run field (SORT_FIELDS), ``params.<key>`` with <key> a key of the run's
``params`` as the API shows them (``params.params.lr`` for the config's ``params.lr``,
``params.seed``, ``params.hparams.lr``; the param's number, then its text), or
``summary.<key>.<last|min|max>``; a leading ``-`` sorts descending. Runs without the sorted
value come last either way, and the run id (in the same direction) breaks ties, so the order
is total and a cursor is stable under it.

Conditions (``filter=``, repeatable, all must hold): each one text of the filter language,
parsed by app/runs/query/filter_lang.py and compiled to SQL by app/runs/query/filter_sql.py
(``val/acc>0.9``, ``lr<=0.01 and (tags~best or name in (a, b))``); a refused one is a 422 naming
the position, and so is a key no run of the listed experiment or sweep has
(app/runs/query/filter_keys.py: with the keys it has, and the nearest).

Paging: keyset, not offset. ``next`` is an opaque cursor (base64 of the sort and the last
row's sort values); the next page is the rows strictly after it in the sort order, so runs
created or changed meanwhile neither shift nor repeat the pages already read. Bad input is a
422 naming the parameter (``sort``, ``filter`` or ``cursor``) and what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, exists, false, func, or_, select, true
from sqlalchemy.orm import Session, aliased

from app.db import MAX_ID
from app.errors import Invalid
from app.metrics.models import MetricKey
from app.runs.models import Run, RunParam, RunStatus, RunTag
from app.runs.query import filter_lang
from app.runs.query.filter_keys import check_keys
from app.runs.query.filter_sql import compile_filter
from app.runs.query.params import number_of

SORT_FIELDS: dict[str, Any] = {
    "id": Run.id,
    "created_at": Run.created_at,
    "started_at": Run.started_at,
    "finished_at": Run.finished_at,
    "name": Run.name,
    "status": Run.status,
    "priority": Run.priority,
    "experiment_id": Run.experiment_id,
    "owner_id": Run.owner_id,
}
SUMMARY_COLUMNS = {"last": "last_value", "min": "min_value", "max": "max_value"}
MAX_FILTERS = 20
MAX_SEARCH_WORDS = 8
_SUMMARY = re.compile(r"^summary\.(.+)\.(last|min|max)$", re.DOTALL)
SYNTAX = (
    "field, params.<key> or summary.<key>.<last|min|max>, with - in front for descending; "
    f"fields: {', '.join(SORT_FIELDS)}"
)
FILTER_SYNTAX = (
    "key op value joined by and/or, with parentheses: keys are params (lr, params.lr), metrics "
    "(val/acc is the last value, val/acc.max, val/acc.min), name, tags, status, id; op one of "
    "= != > >= < <= ~ (contains) or in (a, b)"
)


@dataclass(frozen=True)
class RunQuery:
    """What a caller asks of the runs list (the API's query parameters, parsed)."""

    sort: str = "-id"
    limit: int = 100
    cursor: str | None = None
    experiment_id: int | None = None
    owner_id: int | None = None
    statuses: Sequence[RunStatus] = ()
    tags: Sequence[str] = ()
    sweep_id: int | None = None
    filters: Sequence[str] = ()
    search: str = ""


@dataclass(frozen=True)
class Page:
    runs: list[Run]
    next: str | None


def _sort_columns(sort: str) -> tuple[list[Any], bool, list[Any]]:
    """The sort's value columns, whether descending, and the outer joins they need."""
    desc = sort.startswith("-")
    name = sort[1:] if desc else sort
    if name in SORT_FIELDS:
        return [SORT_FIELDS[name]], desc, []
    if name.startswith("params.") and len(name) > len("params."):
        p = aliased(RunParam)
        join = (p, and_(p.run_id == Run.id, p.key == name.removeprefix("params.")))
        return [p.value_num, p.value_text], desc, [join]
    match = _SUMMARY.match(name)
    if match:
        s = aliased(MetricKey)
        on = and_(s.run_id == Run.id, s.key == match.group(1))
        return [getattr(s, SUMMARY_COLUMNS[match.group(2)])], desc, [(s, on)]
    raise Invalid.at(["query", "sort"], f"cannot sort by {name!r}: sort takes a {SYNTAX}", sort)


def condition(text: str) -> ColumnElement[bool]:
    """One ``filter=`` text as a condition on runs (every run when it holds no condition)."""
    tree = filter_lang.parse_query(text)
    return true() if tree is None else compile_filter(tree)


def _encode(sort: str, values: list[Any]) -> str:
    plain = [{"t": v.isoformat()} if isinstance(v, datetime) else v for v in values]
    raw = json.dumps({"sort": sort, "v": plain}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, sort: str, width: int) -> list[Any]:
    refused = Invalid.at(
        ["query", "cursor"], "not a cursor of this list: pass `next` of the last page", cursor
    )
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        values = data["v"]
        same = data["sort"] == sort and isinstance(values, list) and len(values) == width
    except (ValueError, TypeError, KeyError, binascii.Error):
        raise refused from None
    if not same:
        raise Invalid.at(
            ["query", "cursor"], "the cursor was made for another sort: keep `sort` the same", sort
        )
    out: list[Any] = []
    for v in values:
        if isinstance(v, dict) and isinstance(v.get("t"), str):
            try:
                v = datetime.fromisoformat(v["t"])
            except ValueError:
                raise refused from None
        elif v is not None and not isinstance(v, str | int | float) or isinstance(v, bool):
            raise refused
        out.append(v)
    if not isinstance(out[-1], int):  # the run id closes every sort
        raise refused
    return out


def _after(columns: list[Any], desc: bool, values: list[Any]) -> Any:
    """Rows strictly after ``values`` in ORDER BY (col IS NULL), col [DESC], ..., id."""
    ahead: list[Any] = []
    equal: list[Any] = []
    for column, value in zip(columns, values, strict=True):
        if value is None:  # nulls come last: after a null only a null with a later tail
            ahead.append(and_(*equal, false()))
            equal.append(column.is_(None))
            continue
        beyond = column < value if desc else column > value
        ahead.append(and_(*equal, or_(column.is_(None), beyond)))
        equal.append(column == value)
    return or_(*ahead)


def _filtered(stmt: Select[Any], q: RunQuery) -> Select[Any]:
    if q.experiment_id is not None:
        stmt = stmt.where(Run.experiment_id == q.experiment_id)
    if q.owner_id is not None:
        stmt = stmt.where(Run.owner_id == q.owner_id)
    if q.statuses:
        stmt = stmt.where(Run.status.in_(list(q.statuses)))
    if q.sweep_id is not None:
        stmt = stmt.where(Run.sweep_id == q.sweep_id)
    for tag in q.tags:
        stmt = stmt.where(exists().where(RunTag.run_id == Run.id, RunTag.tag == tag))
    if len(q.filters) > MAX_FILTERS:
        raise Invalid.at(["query", "filter"], f"at most {MAX_FILTERS} conditions", len(q.filters))
    for text in q.filters:
        stmt = stmt.where(condition(text))
    if q.search.strip():
        stmt = stmt.where(search_condition(q.search))
    return stmt


def _like(text: str) -> str:
    """``text`` as a case-insensitive "contains" pattern, its own % and _ taken literally."""
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_condition(text: str) -> ColumnElement[bool]:
    """The compare picker's free-text search (``q=``): each word must be found in the run's
    name, one of its tags or a param's text value, or be its id or a param's number. Free
    text rather than the filter language: a reader looking for "resnet" or "0.01" does not
    know which field holds it. Plain LIKEs and EXISTS probes on the run's own rows: a scan of
    1,000 runs' params answers in milliseconds (bench/picker_search.py)."""
    parts = []
    for word in text.split()[:MAX_SEARCH_WORDS]:
        like = _like(word)
        options: list[ColumnElement[bool]] = [
            func.lower(Run.name).like(like, escape="\\"),
            exists().where(RunTag.run_id == Run.id, func.lower(RunTag.tag).like(like, escape="\\")),
            exists().where(
                RunParam.run_id == Run.id, func.lower(RunParam.value_text).like(like, escape="\\")
            ),
        ]
        number = number_of(word)  # as the param's value_num was stored
        if number is not None:
            options.append(exists().where(RunParam.run_id == Run.id, RunParam.value_num == number))
            if number.is_integer() and 0 < number <= MAX_ID:
                options.append(Run.id == int(number))
        parts.append(or_(*options))
    return and_(*parts) if parts else true()


def _order(columns: list[Any], desc: bool) -> list[Any]:
    """ORDER BY of the sort: nulls last (a CASE, only on a column that may be null: on a NOT
    NULL one it would only hide the index order and sort every run, issue 43)."""
    order: list[Any] = []
    for column in columns:
        if getattr(column, "nullable", True):
            order.append(case((column.is_(None), 1), else_=0))
        order.append(column.desc() if desc else column)
    return order


def list_runs(session: Session, q: RunQuery) -> Page:
    """One page of runs matching ``q``, in its sort order, and the cursor of the next page."""
    sort_columns, desc, joins = _sort_columns(q.sort)
    columns = [*sort_columns, Run.id]
    trees = [tree for tree in map(filter_lang.parse_query, q.filters) if tree is not None]
    check_keys(session, trees, experiment_id=q.experiment_id, sweep_id=q.sweep_id)
    values = _decode(q.cursor, q.sort, len(columns)) if q.cursor is not None else None
    if _SUMMARY.match(q.sort.removeprefix("-")):
        rows = _summary_page(session, q, columns, desc, joins[0], values)
    else:
        stmt = select(Run, *columns)
        for target, on in joins:
            stmt = stmt.outerjoin(target, on)
        stmt = _filtered(stmt, q)
        if values is not None:
            stmt = stmt.where(_after(columns, desc, values))
        rows = list(session.execute(stmt.order_by(*_order(columns, desc)).limit(q.limit + 1)))
    more = len(rows) > q.limit
    rows = rows[: q.limit]
    last = list(rows[-1][1:]) if more else None
    return Page(runs=[row[0] for row in rows], next=_encode(q.sort, last) if last else None)


def _summary_page(
    session: Session,
    q: RunQuery,
    columns: list[Any],
    desc: bool,
    join: tuple[Any, Any],
    values: list[Any] | None,
) -> list[Any]:
    """A page sorted by a summary, in two parts: the runs with the value (an inner join, so
    the (key, value) index of metric_keys gives them in order and the walk stops at the page's
    end: the top 100 of 100,000 runs reads ~100 rows, not every run and a sort of them,
    issue 43), then, if the page is not full, the runs without it (by id), which come last."""
    target, on = join
    value, run_id = columns
    rows: list[Any] = []
    if values is None or values[0] is not None:  # the cursor is not past the valued runs
        stmt = _filtered(select(Run, value, run_id).join(target, on), q)
        stmt = stmt.where(value.is_not(None))
        if values is not None:
            stmt = stmt.where(_after(columns, desc, values))
        order = [value.desc(), run_id.desc()] if desc else [value, run_id]
        rows = list(session.execute(stmt.order_by(*order).limit(q.limit + 1)))
    if len(rows) > q.limit:
        return rows
    stmt = _filtered(select(Run, value, run_id).outerjoin(target, on), q)
    stmt = stmt.where(value.is_(None))
    if values is not None and values[0] is None:
        stmt = stmt.where(run_id < values[1] if desc else run_id > values[1])
    stmt = stmt.order_by(run_id.desc() if desc else run_id)
    return rows + list(session.execute(stmt.limit(q.limit + 1 - len(rows))))
